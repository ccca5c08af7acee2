// Package wire holds the generated protobuf types of the gridmgr wire
// protocol (gridmgr.proto): one Envelope with a oneof body per frame,
// varint-length-delimited on a long-lived stream. It is a leaf: it imports
// nothing of gridmgr, and node, query, the client library and outside
// programs import it. docs/wire.md is the contract for outside clients.
//
// Regenerate with `go generate ./wire` after editing the .proto file; the
// README names the protoc and protoc-gen-go versions.
package wire

//go:generate protoc --go_out=. --go_opt=paths=source_relative gridmgr.proto
