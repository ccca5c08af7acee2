package node

// Version is the software version; release builds set it with
// -ldflags "-X github.com/gridmgr/gridmgr/config.Version=v1.2.3".
var Version = "0.1.0-dev"

// ProtocolVersion is the mesh handshake version this build speaks.
const ProtocolVersion = 1
