// Package relations holds a grid manager's superior and inferior relations as
// pure data and logic: the relation set with per-relation state, heartbeat
// liveness and the failure detector (Set.Check, Set.Failed), the indirect
// probes that confirm a lost or silent superior through its own superiors
// before it is failed (probe.go: Failover.Lost, ActProbe, ProbeAnswer,
// Relation.HeldUntil), the candidates
// to try in place of a failed superior (Set.Candidates), the search for
// that replacement (Failover: inputs in, actions out, removals among them),
// dial backoff, the ancestor chain and the cycle check, and the saved
// relations a manager restarts from (Saved, ParseSaved). Peers' addresses
// are package peeraddr's: its PeerAddrs, and ParsePeerMaddr, the one
// parser of a manager's full multiaddr.
//
// A relation shows its peer, before its name is known, as text.ShortPeer
// does everywhere (Relation.DisplayName).
//
// Nothing here does I/O. Time arrives as a now argument, randomness as an
// injected *rand.Rand. The properties file is package config's: this
// package receives plain values from it (Liveness, Policy). The caller
// (the node's Core) owns a Set, feeds it what it hears and asks it what to
// do. A Failover, like query.Walk, is a state machine the caller drives:
// it gives it each tick, welcome, failed trial and goodbye with the time,
// the Set and the Policy, and must carry out the returned Acts in order
// before the next call. It also tells it when a superior's channel was
// lost (Lost), sends the questions of each ActProbe to the helpers it
// names, and reports every helper's answer, or that none will come
// (ProbeAnswer); the helper's side (asking the target, answering within
// Liveness.ProbeWait) is the caller's too. A Failover reads the Set and marks the relations
// it searches for (Trial, StandsFor, Standby) but never adds or removes
// one: ActTry and ActRemove ask the caller to, and the caller must remove
// relations in one place that also ends what waits on them.
package relations
