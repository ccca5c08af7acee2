// Package pb holds the generated protobuf types of the gridmgr wire protocol
// (gridmgr.proto). Regenerate with `go generate ./node/pb` after editing the
// .proto file; the README names the protoc and protoc-gen-go versions.
package pb

//go:generate protoc --go_out=. --go_opt=paths=source_relative gridmgr.proto
