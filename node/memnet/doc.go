// Package memnet runs grid-manager Cores on a simulated network under a
// virtual clock, in one goroutine, deterministically from a seed. It is the
// in-memory transport of the tests (and of sim/): channels open and close
// with a set latency, messages can be dropped by a filter, managers can be
// killed and restarted, and clients can ask any manager.
//
// The caller creates a Net, Adds managers with validated node.Configs,
// Starts them in any order, and advances time with RunFor or RunUntil.
// Nothing runs between those calls; every Core is touched only inside them.
package memnet
