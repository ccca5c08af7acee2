// Package p2p is gridmgr's libp2p transport, the only package that imports
// libp2p. It builds the host (TCP + Noise + yamux, relay off, explicit
// listen addresses, raised resource limits, protected relation peers, an
// optional pre-shared key), implements node.Transport over one long-lived
// varint-delimited protobuf stream per relation (/gridmgr/mesh/1.0.0),
// serves client streams (/gridmgr/client/1.0.0), and opens client streams
// from a ClientHost (what the client library dials through). It only moves
// frames: what they mean is the Core's business.
//
// Send, CloseChannel and Dial never block the driver on the network for
// longer than Options.DirectWrite (1 ms by default). Each channel (mesh and
// client alike) has an outbound queue bounded in bytes (Options.QueueBytes,
// 2 × MaxFrame by default, so the largest reply fits) and a writer
// goroutine that writes what is queued in batches. Send writes the frame
// to the stream itself when the channel's writer has nothing to do (one
// goroutine hand-off less per message), with a write deadline of
// DirectWrite; what that deadline cuts short (the peer's window is full)
// and everything sent until the writer has emptied the queue again is
// left to the writer, so a stalled peer costs the driver one DirectWrite,
// not one per message. The driver uses Queue and Push instead of Send
// (node.BatchTransport): what one turn sends to a channel goes out in one
// write at the end of the turn.
// A peer that stops reading stalls its own writer only; its channel is
// reset and reported lost (as node.InputDisconnected, like a read error)
// when its queue is full or a write makes no progress for
// Options.WriteStall. A failed direct write has the effect a failed write
// of the writer has. CloseChannel lets the
// writer write what was queued, then half-closes the stream and reads
// until the peer closes its side (for up to 2 s), so that a last goodbye
// or refusal reaches the peer. Per channel, messages keep their order.
//
// A caller creates a Host with New, makes a node.Driver with it as the
// Transport, Attaches the driver (which starts serving streams), runs the
// driver, and Closes the Host after the driver has returned; Close writes
// what was queued, waits a bounded time for the peers, and returns once
// every stream goroutine has ended (or after a second bounded wait).
// Identity keys and pre-shared keys are read and written with the
// functions in identity.go.
//
// A manager as another's client (clientuse.go). OpenClient opens a client
// stream to another manager (the web UI's questions, the job runtime's
// sessions) and SendBundle uploads to one; each holds the peer until it
// ends (HoldPeer). The last to end closes the connection, unless the peer
// is a relation or has gridmgr streams of its own open on it, so the
// event bus does not gossip over it; one session's end never cuts
// another's. At most maxClientStreamsOutPerPeer (8) client streams are
// open to one peer at a time, the resource manager's limit: one more
// waits for a place until its context ends. The caller closes every
// ClientStream it opened.
//
// Private networks (privnet.go). AddNetwork gives a Host a further libp2p
// host with the same identity key (so the same peer id), another
// pre-shared key and listen addresses of its own: what a manager opens
// for the glide-ins it launches with --private, so that only they and it
// hold the key. Streams arriving there are served into the same Host:
// one space of channel ids, one sink, the same Send, CloseChannel,
// Traffic, IsManager and hold on peers, so a manager that joins over a
// private network is an ordinary relation of the Core. What goes out
// picks the libp2p host the peer is on (For): Dial, OpenClient and the
// caller's bundle uploads use a private network's host when the peer is
// connected there (or only its peerstore knows the peer), else the main
// one; ClosePeer and the last release of a hold drop the peer's connections on all
// of them. A peer reachable only over a private network is so reached
// only through it. RemoveNetwork closes one (its relations are reported
// lost); Close closes them all with the Host. The caller keeps the keys
// and the ports (the daemon does, in its data dir); libp2p's metrics are
// the main host's only.
package p2p
