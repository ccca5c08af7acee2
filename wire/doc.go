// Package wire holds the generated protobuf types of the gridmgr wire
// protocol (gridmgr.proto): one Envelope with a oneof body per frame,
// varint-length-delimited on a long-lived stream. It is a leaf: it imports
// nothing of gridmgr, and node, query, the client library and outside
// programs import it. docs/wire.md is the contract for outside clients.
//
// Streams encode and decode frames with the code protoc-gen-go-vtproto
// generates (gridmgr_vtproto.pb.go), through codec.go: AppendFrame and
// UnmarshalEnvelope, which decodes as protobuf-go does (FuzzCodec holds
// it to that) and falls back to protobuf-go for the bodies that can nest.
// wire/internal/vtutf8 adds to the generated decoders the checks
// protobuf-go makes and vtprotobuf does not (UTF-8 in strings, overflowing
// varints and field numbers, unknown fields read by protowire).
//
// Regenerate with `go generate ./wire` after editing the .proto file; the
// README names the protoc, protoc-gen-go and protoc-gen-go-vtproto
// versions.
package wire

//go:generate protoc --go_out=. --go_opt=paths=source_relative gridmgr.proto
//go:generate protoc --go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size gridmgr.proto
//go:generate go run ./internal/vtutf8 gridmgr_vtproto.pb.go
