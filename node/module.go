package node

import (
	"time"

	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// A module is one capability of the Core, with its own state behind this
// small interface: failover (failover.go), queries (tree, ping, query;
// queries.go), admin (admin.go), reservations (reserve.go, with the values
// queries see, values.go, and the calendars, calendar.go), applications
// (apps.go) and monitoring (monitor.go). The Core keeps the lifecycle, the
// relations (handshake, failure detection; heartbeats are the small beats
// module) and the dispatch, and tells every module the same things at the
// same points, looping over Core.modules in their fixed order (failover,
// heartbeats, queries, admin, reservations, applications, monitoring):
//   - handle: a message for it (Core.dispatch offers each message to the
//     modules in turn; a module takes the bodies it owns, requests from
//     clients or relations and replies to what it sent);
//   - tick: time passed (Core.Tick; failover is wrapped in untilStop, so
//     it neither ticks nor has a deadline while the manager stops);
//   - relationEnded: a relation went down, left or was removed
//     (Core.relationEnded, the one place that cleans up what waits on a
//     relation);
//   - deadline: when its tick next has something to do (Core.NextDeadline).
//
// The end of a runtime call a module made (Core.call) comes back to it
// through Core.callers, by the call's kind (call.go).
//
// A module sees the Core through env (env.go: the clock, the config, its
// peer id, the relation set, send, reply, new ids, runtime calls, publish,
// the log, the metrics), not *Core; one whose work crosses another
// capability's gets an interface that embeds env and names the hooks and
// events it uses (queriesEnv, reservationsEnv, appsEnv, monitorEnv, and
// adminEnv, the widest: an admin command is the operator's hand on the
// whole manager), which *Core answers, asking the module that knows
// (hooks.go). A request one module serves for another goes through
// Core.ask, as a client's would, with an origin whose answer function
// takes the reply. Failover (failover.go) gets its own interface
// separately.
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
