// Package metrics is a manager's Prometheus metrics (served on /metrics
// when http_listen is set): the Core's counts and timings (it implements
// node.Metrics), what the runtime measures (store commits, event bus,
// protocol traffic) and, at each scrape, the manager's state asked of its
// Core (relations, reservations) and of its application runtime. Names
// follow Prometheus practice: the gridmgr_ prefix, base units, _total for
// counters, and labels with a bounded set of values (roles, states, kinds,
// application names, protocols; never reservation or trace ids). libp2p's
// own metrics (resource manager, swarm, identify) and the Go and process
// collectors are in the same registry.
//
// What the caller must do: New one per manager, pass it as the driver's
// node.Metrics, give it a Source once the manager is up, and serve
// Handler. Source functions are called at scrape time from the HTTP
// goroutine and must be safe for that (the daemon asks its Core through
// the driver's in-process requests, which the owner goroutine answers).
package metrics
