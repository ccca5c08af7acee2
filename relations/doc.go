// Package relations holds a grid manager's superior and inferior relations as
// pure data and logic: the relation set with per-relation state, heartbeat
// liveness, dial backoff, the ancestor chain and the cycle check, and the
// properties file (TOML) that seeds them.
//
// Nothing here does I/O. Time arrives as a now argument, randomness as an
// injected *rand.Rand, and the properties file as bytes. The caller (the
// node's Core) owns a Set, feeds it what it hears and asks it what to do.
package relations
