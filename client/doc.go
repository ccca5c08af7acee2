// Package client is the gridmgr client library: what the CLI, the web UI,
// tests and outside Go programs use to talk to managers over the client
// protocol (/gridmgr/client/1.0.0). A Client runs over one Conn to one
// manager and matches replies to requests by id, so calls may be made from
// several goroutines; typed methods cover every request (Status, Tree,
// Ping, Query, Resources, Reserve, ReservationOp, Reservations, Admin,
// AdminAll). A Reserver makes reservations across a grid: query and
// reserve with fallback to the next offer, co-reservation on several
// managers (all or nothing), and operations on a reservation wherever its
// owner is.
//
// The caller supplies the transport: a Dialer that opens Conns to managers.
// node/p2p's ClientHost is the libp2p one, and the client's peer id (which
// holds reservations) is that host's. Close every Client, and the Dialer,
// when done. An ErrorReply from a manager comes back as a *RemoteError; a
// lost stream as an error wrapping ErrClosed.
package client
