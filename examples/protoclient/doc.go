// Command protoclient talks to a gridmgr manager with nothing but the wire
// contract: the message types are generated from wire/gridmgr.proto
// (package gridmgrpb), frames are written and read by hand as
// docs/wire.md describes them, and no package of the gridmgr module is
// imported. It asks the manager for its status and for offers (two
// requests in flight at once), reserves one cpu (a hold) at the best
// offer's owner, sends the same reservation request again to show that a
// retry gets the original answer, and releases the reservation.
//
//	go run . [-psk FILE] [-timeout 20s] /ip4/127.0.0.1/tcp/4001/p2p/12D3KooW…
//
// It prints what it got and exits 1 on any failure (2 on bad usage).
package main
