// Package gridmgrpb holds the Go types of gridmgr's wire messages,
// generated from the project's wire/gridmgr.proto and nothing else: this
// example shows that an outside program needs only the .proto file and
// docs/wire.md. Regenerate with `go generate ./...` in examples/protoclient
// (protoc 3.21.12, protoc-gen-go v1.36.11); CI fails if the committed file
// differs from what they generate.
package gridmgrpb

//go:generate protoc -I ../../../wire --go_out=. --go_opt=paths=source_relative --go_opt=Mgridmgr.proto=example.com/protoclient/gridmgrpb;gridmgrpb gridmgr.proto
