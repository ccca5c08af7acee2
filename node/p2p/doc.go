// Package p2p is gridmgr's libp2p adapter, the only package that imports
// libp2p. It builds the host (TCP + Noise + yamux, relay off, explicit
// listen addresses, raised resource limits, protected relation peers, an
// optional pre-shared key), implements node.Transport over one long-lived
// varint-delimited protobuf stream per relation (/gridmgr/mesh/1.0.0), serves
// clients on /gridmgr/client/1.0.0, and offers the Client the CLI uses.
//
// A caller creates a Host with New, makes a node.Driver with it as the
// Transport, Attaches the driver (which registers the stream handlers), runs
// the driver, and Closes the Host after the driver has returned. Identity
// keys and pre-shared keys are read and written with the functions in
// identity.go.
package p2p
