// Package node is one grid manager: the Core (the protocol state machine),
// the Driver (the goroutine that owns a Core in production) and Config.
//
// The Core does no I/O, reads no clock and starts no goroutine. Its caller
// feeds it what happened — Start, Tick, Connected, Disconnected,
// DialFailed, Step (a mesh message), ClientStep (a client request) — each
// with the current time, and then takes Ready: reservation changes to make
// durable (Persist), messages to send, client replies, channels to close,
// superiors to dial, and relation events. The caller must carry Ready out
// in its documented order before feeding the next input — in particular it
// must write Persist to the reservation store before sending the client
// replies of that Ready or any later one — and must never call a Core from
// two goroutines. Before Start it gives the Core the stored reservations
// (Restore) and the saved superiors (RestoreRelations); when a write fails
// it says so (StoreFailed), and the Core then refuses reservation changes.
// Ready.Relations, when set, must be saved (atomically: WriteRelations) for
// the next start.
//
// Failover lives in the Core too (failover.go): a superior silent for
// heartbeat.misses intervals is failed, and its ancestors, then
// fallback_superiors, are tried one at a time until one takes the manager;
// with none, the manager acts as a root and retries with backoff. Randomness comes from the *rand.Rand given
// to NewCore.
//
// The Driver does exactly that over a Transport (node/p2p implements it
// over libp2p) with the wall clock, writing Persist batches to a
// reservation.Store on a writer goroutine (group commit); memnet does it
// over a simulated network with a virtual clock and an in-memory disk.
// Config is one struct with documented units and defaults; call Validate
// before use.
package node
