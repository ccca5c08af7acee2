// Package daemon wires one grid manager for `gridmgr run`: it locks the
// data dir, loads (or creates) the identity, reads the pre-shared key,
// starts the libp2p transport (node/p2p), opens the durable stores
// (reservations in bbolt, the saved relations, the audit log), samples the
// host (daemon/host), runs admin plugins (daemon/plugins), and runs the
// node.Driver that owns the Core. It writes DATA_DIR/addr (client.AddrFile)
// so that a CLI on the same host finds the manager (client.ReadAddrFile).
// keys.go makes and reads a manager's key files without the transport, for
// `gridmgr id`, `keygen` and `web-token`.
//
// It also makes the manager observable (docs/monitoring.md): the event bus
// (node/p2p/events) publishes what the Core produces and relays the grid's
// event topics, and feeds the inferiors' utilization samples back to the
// Core; with [archive] enabled the events that reach the manager are kept
// (daemon/archive) and read back over the client protocol; with
// http_listen, /metrics (daemon/metrics) and the web UI (daemon/web) are
// served, the UI's backend asking this Core in-process and other managers
// over client streams from the manager's own host.
//
// The caller builds a validated config, calls Start, and calls Stop when
// done (or Crash, in tests and demos, to stop as kill -9 would). A Manager
// whose Done channel closed (a shutdown command) must still be Stopped to
// release the data dir.
package daemon
