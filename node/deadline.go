package node

import (
	"fmt"
	"time"

	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// CheckDeadlines makes every NextDeadline answered from the cache also
// compute the deadline afresh and panic if the two differ. It is for
// tests (node's, memnet's and the simulator's set it): set it before any
// Core runs, never while one does.
var CheckDeadlines bool

// deadlineCache is NextDeadline's last answer. The runtime asks after
// every input (memnet after every event, and Tick asks once more before
// it acts), and most of the time nothing that the answer depends on has
// changed since.
//
// at, computed at from, holds while ok for any now at or after from:
//   - every input that may change what the deadline is made of (every
//     exported method that changes the Core: Step, Tick, Connected, ...)
//     clears ok, and the next call recomputes;
//   - a deadline at or before from may depend on now (a heartbeat never
//     sent is due "now", a suspect heard again is due "now"), and so may
//     the job queue's deadline (it moves a late summary to now): those are
//     not kept;
//   - the one input kept across is a heartbeat from a relation that is
//     Up, which only moves that relation's silence deadline later
//     (beatKeepsDeadline): when that deadline is not the earliest, the
//     earliest stays what it was; when it is, only the relations' silence
//     deadlines (relations.Set.NextCheck) are computed again, and the
//     earliest is the earlier of those and rest, everything else, which
//     the beat did not change. From a superior, only if handling it
//     sent and closed nothing (a changed ancestor chain is pushed down at
//     once, which moves the inferiors' next heartbeats).
type deadlineCache struct {
	ok bool
	// handshakes: a handshake was under way at the last computation
	// (Tick skips handshakeTimeouts when none is: NextDeadline, which
	// Tick asks first, leaves this true to what the Core is then).
	handshakes bool
	at, from   time.Time
	rest       time.Time // the earliest deadline but the relations' silence
	// hits and kept count the answers from the cache and the heartbeats
	// it was kept across (for tests: DeadlineCacheStats).
	hits, kept uint32
}

// checkDeadline panics if the cached deadline is not what a full
// computation at now says (CheckDeadlines).
func (c *Core) checkDeadline(now time.Time) {
	if full := c.nextDeadline(now); !full.Equal(c.dl.at) {
		panic(fmt.Sprintf("node: %s: cached NextDeadline %v (computed at %v) but %v at %v",
			c.own.Name, c.dl.at, c.dl.from, full, now))
	}
}

// beatKeep is what Step needs to tell, after a heartbeat, that the
// cached deadline still holds.
type beatKeep struct {
	r            *relations.Relation
	role         relations.Role
	interval     time.Duration
	msgs, closes int  // what the Ready held before (a superior's beat)
	earliest     bool // the relation's silence deadline is the cached one
}

// beatKeepsDeadline reports, before Step handles env from peer, whether
// the cached deadline can survive it: env is a heartbeat from a relation
// that is Up. Handling it moves the relation's silence deadline
// (relations.Liveness.SuspectAt) later (LastHeard only grows) and changes
// nothing else a deadline is made of (if that deadline was the cached
// earliest, beatKeep.earliest, Step computes the relations' part again),
// provided the relation stays Up with the same interval and, for a
// superior (neither a candidate on trial nor a standby), handling it sent
// and closed nothing (beatKeep.still). A superior's other deadlines
// (failure, probes: relations.Failover) are for superiors that are not
// Up, and the RTT a beat measures is in none.
func (c *Core) beatKeepsDeadline(peer string, env *wire.Envelope) (beatKeep, bool) {
	if !c.dl.ok || c.dl.at.IsZero() {
		return beatKeep{}, false
	}
	if _, ok := env.Body.(*wire.Envelope_Heartbeat); !ok || env.GetHeartbeat() == nil {
		return beatKeep{}, false
	}
	if _, ok := c.pendingIn[peer]; ok {
		return beatKeep{}, false
	}
	r := c.set.Get(peer)
	if r == nil || r.State != relations.Up || r.Role == relations.Superior && (r.Trial != "" || r.Standby) {
		return beatKeep{}, false
	}
	return beatKeep{r: r, role: r.Role, interval: r.PeerInterval, msgs: len(c.rd.Messages), closes: len(c.rd.Closes),
		earliest: !c.live.SuspectAt(r).After(c.dl.at)}, true
}

// still reports whether, after the heartbeat, the relation is still the
// same, in the same role, Up, with the same interval, and a superior's
// beat sent and closed nothing.
func (k *beatKeep) still(c *Core, peer string) bool {
	r := k.r
	if c.set.Get(peer) != r || r.Role != k.role || r.State != relations.Up || r.PeerInterval != k.interval || c.jobs.state == jobsReady {
		return false
	}
	return r.Role == relations.Inferior ||
		r.Trial == "" && !r.Standby && len(c.rd.Messages) == k.msgs && len(c.rd.Closes) == k.closes
}
