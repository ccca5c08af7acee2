// Command vtutf8 makes the code protoc-gen-go-vtproto generates read and
// write what protobuf-go does, in these changes to its output:
//
//   - a proto3 string field must hold valid UTF-8 (vtprotobuf does not
//     check it: planetscale/vtprotobuf issue 146). Before each place an
//     UnmarshalVT makes a string of the input, it inserts a test that
//     returns an error wrapping wire.ErrInvalidUTF8 and naming the message
//     and the field;
//   - a varint's tenth byte may only be 0 or 1 (more overflows 64 bits,
//     which vtprotobuf drops silently);
//   - a field number must be at most 2^29-1 (vtprotobuf cuts the tag to
//     32 bits, so that field 2^32+1 would be read as field 1);
//   - a floating-point field holding -0 is encoded, as protobuf-go encodes
//     it (its bits are not zero); the generated encoder tested it with
//     != 0, which -0 is not, and dropped it;
//   - an unknown field is skipped by wire's skipField, protobuf-go's own
//     reading of a field (protowire), instead of protohelpers.Skip, which
//     takes overflowing varints too and does not bound nested groups.
//
// `go generate ./wire` runs it after protoc:
//
//	go run ./internal/vtutf8 gridmgr_vtproto.pb.go
//
// It fails, writing nothing, when it finds none of one of these, a string
// outside an UnmarshalVT or a field it cannot name, or a file it already
// changed: a newer generator that writes them another way must be looked
// at, not passed over.
package main
