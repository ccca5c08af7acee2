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
//   - the one input kept across is a heartbeat from a live inferior,
//     which only moves that inferior's silence deadline later
//     (beatKeepsDeadline): when that deadline is not the earliest, the
//     earliest stays what it was.
type deadlineCache struct {
	ok       bool
	at, from time.Time
	// hits and kept count the answers from the cache and the heartbeats
	// it was kept across (for tests: DeadlineCacheStats).
	hits, kept uint32
}

// checkDeadline panics if the cached deadline is not what a full
// computation at now says (CheckDeadlines).
func (c *Core) checkDeadline(now time.Time) {
	if full := c.nextDeadline(now); !full.Equal(c.dl.at) {
		panic(fmt.Sprintf("node: %s: cached NextDeadline %v (computed at %v) but %v at %v",
			c.cfg.Name, c.dl.at, c.dl.from, full, now))
	}
}

// beatKeep is what Step needs to tell, after a heartbeat, that the
// cached deadline still holds.
type beatKeep struct {
	r        *relations.Relation
	interval time.Duration
}

// beatKeepsDeadline reports, before Step handles env from peer, whether
// the cached deadline can survive it: env is a heartbeat from an inferior
// that is Up, whose silence deadline (relations.Liveness.SuspectAt) is
// later than the cached earliest. Handling it then moves that deadline
// later still (LastHeard only grows) and changes nothing else a deadline
// is made of, provided the inferior stays Up with the same interval
// (beatKeep.still).
func (c *Core) beatKeepsDeadline(peer string, env *wire.Envelope) *beatKeep {
	if !c.dl.ok || c.dl.at.IsZero() {
		return nil
	}
	if _, ok := env.Body.(*wire.Envelope_Heartbeat); !ok || env.GetHeartbeat() == nil {
		return nil
	}
	if _, ok := c.pendingIn[peer]; ok {
		return nil
	}
	r := c.set.Get(peer)
	if r == nil || r.Role != relations.Inferior || r.State != relations.Up {
		return nil
	}
	if !c.live.SuspectAt(r).After(c.dl.at) {
		return nil
	}
	c.keep = beatKeep{r: r, interval: r.PeerInterval}
	return &c.keep
}

// still reports whether, after the heartbeat, the inferior is still the
// same relation, Up, with the same interval.
func (k *beatKeep) still(c *Core, peer string) bool {
	r := k.r
	return c.set.Get(peer) == r && r.Role == relations.Inferior && r.State == relations.Up &&
		r.PeerInterval == k.interval && c.jobs.state != jobsReady
}
