// Package node is one grid manager: the Core (the protocol state machine)
// and its modules, the Applier (the one place that carries out what a Core
// asks for), the Driver (the goroutine that owns a Core in production) and
// Config.
//
// The Core does no I/O, reads no clock and starts no goroutine. Its caller
// feeds it what happened — Start, Tick, Connected, Disconnected,
// DialFailed, Step (a mesh message), ClientStep (a client request),
// SetHost, CallDone, StoreFailed — each with the current time, and then
// takes Ready: messages to send, durable writes (reservation changes,
// saved superiors, audit records), client replies, channels to close,
// superiors to dial, calls for the runtime, relation events. It must
// never call a Core from two goroutines. Before Start it gives the Core the stored
// reservations (Restore) and the saved superiors (RestoreRelations).
// NextDeadline says when Tick next has something to do: a runtime may tick
// a Core only then (ticking more often is harmless). It is cached
// (deadline.go) and recomputed after an input that may change it, so the
// caller must change a Core only through its methods: what Relations and
// Ledger expose is for reading.
//
// The Core keeps the lifecycle, the relations (handshake, heartbeats, the
// failure detector) and the dispatch of messages; each capability keeps
// its own state in a module (module.go), which sees the Core through a
// small environment (env.go for queries, reservations, applications,
// monitoring and admin; failover.go's failoverEnv for failover) rather
// than the Core itself: failover (failover.go: a superior silent for
// heartbeat.misses intervals is failed, and its ancestors, then
// fallback_superiors, are tried one at a time until one takes the
// manager; with none, the manager acts as a root and retries with
// backoff. The search is relations.Failover, pure; failover.go feeds it
// and carries out its acts), queries (tree, ping, query; queries.go),
// admin (admin.go: command strings, --all floods, plugins), reservations
// (reserve.go, with the values queries see and the calendars),
// applications (apps.go) and monitoring (monitor.go). A relation is
// removed only by Core.removeRelation, which tells every module
// (relationEnded). Randomness comes from the *rand.Rand given to NewCore.
//
// Ready is carried out by an Applier, the same under every runtime: it
// sends messages over a Transport, gives the durable writes to a Storage
// and holds client replies and monitoring events (but utilization
// samples) until the write they depend on is reported (so no answer and
// no event ever tells of a change a crash could lose), closes and
// dials channels, keeps one mesh channel per peer (a new one replaces the
// old), and hands each Call to the Runner registered for its kind
// (SetRunner; call.go: plugins, applications, the event archive), whose
// answer comes back as one Input kind, InputCallDone, that the Core
// routes to the module that made the call. The Driver runs an Applier
// over node/p2p's libp2p Transport and the daemon's Storage with the wall
// clock, one input at a time under a lock (on its own goroutine, or on a
// stream reader's or a requester's when the Core is free: one hand-off
// less per message), never waiting on a socket or a disk;
// node/memnet runs one per manager over a simulated network and disk with
// a virtual clock. The config (package config) must have passed Validate.
// A simulation of many managers gives each Core the config they share and
// the manager's own fields (NewCoreShared, Own): the Core reads its name,
// host name, superiors and attributes only from Own, which a test
// (TestOwnFieldsOnlyFromOwn) checks of every line of this package.
package node
