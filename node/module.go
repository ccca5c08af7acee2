package node

import (
	"time"

	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// A module is one capability of the Core, with its own state behind this
// small interface: queries (tree, ping, query; queries.go), reservations
// (reserve.go), failover (failover.go) and admin (admin.go). The Core keeps
// the lifecycle, the relations (handshake, heartbeats, failure detection)
// and the dispatch, and tells every module the same things at the same
// points:
//   - handle: a message for it (Core.dispatch offers each message to the
//     modules in turn; a module takes the bodies it owns, requests from
//     clients or relations and replies to what it sent);
//   - tick: time passed (Core.Tick, in a fixed order);
//   - relationEnded: a relation went down, left or was removed
//     (Core.relationEnded, the one place that cleans up what waits on a
//     relation);
//   - deadline: when its tick next has something to do (Core.NextDeadline).
//
// Modules reach the Core's services (send, reply, events, the relation
// set, the config) through their *Core, and each other only through the
// Core's fields, for the few things that cross capabilities (an admin
// command that waits for a superior's welcome, a failover that ends an
// admin's wait).
type module interface {
	// handle takes a message from o; false: the body is not this
	// module's. The error is for the runtime's log.
	handle(now time.Time, o origin, env *wire.Envelope) (bool, error)
	// tick does what is due at now.
	tick(now time.Time)
	// relationEnded: the relation with r ended (why: "down" or
	// "removed"); r may already be gone from the set.
	relationEnded(now time.Time, r *relations.Relation, why string)
	// deadline is the earliest time at which tick has something to do (at
	// or before now: at once), zero if none.
	deadline(now time.Time) time.Time
}
