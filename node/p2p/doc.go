// Package p2p is gridmgr's libp2p transport, the only package that imports
// libp2p. It builds the host (TCP + Noise + yamux, relay off, explicit
// listen addresses, raised resource limits, protected relation peers, an
// optional pre-shared key), implements node.Transport over one long-lived
// varint-delimited protobuf stream per relation (/gridmgr/mesh/1.0.0),
// serves client streams (/gridmgr/client/1.0.0), and opens client streams
// from a ClientHost (what the client library dials through). It only moves
// frames: what they mean is the Core's business.
//
// A caller creates a Host with New, makes a node.Driver with it as the
// Transport, Attaches the driver (which starts serving streams), runs the
// driver, and Closes the Host after the driver has returned. Identity keys
// and pre-shared keys are read and written with the functions in
// identity.go.
package p2p
