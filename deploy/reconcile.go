// Ended and Reconcile: instances removed when their reservation ends,
// and, at a start, brought in line with the reservations still live and
// restarted if they should run.

package deploy

import (
	"slices"

	"github.com/gridmgr/gridmgr/deploy/runner"
	"github.com/gridmgr/gridmgr/wire"
)

// Ended removes the instances of reservations that ended, and says what
// it did to each: what it was doing, and how many changes were undone
// (or why it could not be removed; it is tried again at the next start).
func (e *Executor) Ended(reservations []string) []*wire.AppRemoval {
	var out []*wire.AppRemoval
	for _, id := range e.ids(func(r *Record) bool { return slices.Contains(reservations, r.Reservation) }) {
		rm := &wire.AppRemoval{Id: id}
		if r := e.get(id); r != nil {
			ai := e.instance(r, nil)
			rm.App, rm.Version, rm.State = ai.App, ai.Version, ai.State
		}
		out = append(out, rm)
		n, err := e.Remove(id)
		rm.Undone = uint32(n)
		if err != nil {
			rm.Error = err.Error()
			e.log.Error("removing an application whose reservation ended", "instance", id, "err", err)
			continue
		}
		rm.Removed = true
		e.log.Info("reservation ended: application removed", "instance", id, "changes_undone", n)
	}
	return out
}

// Reconcile removes the instances of reservations not in live (they
// ended while the manager was down) and restarts those that should run
// and do not (the host rebooted).
func (e *Executor) Reconcile(live []string) {
	e.Ended(e.reservationsNotIn(live))
	if e.run == nil {
		return
	}
	for _, id := range e.ids(func(r *Record) bool { return r.Started }) {
		if st, err := e.run.Status(id); err == nil && (st.State == runner.StateRunning || st.State == runner.StatePaused) {
			continue
		}
		if st, err := e.run.Status(id); err == nil && st.State != "" && st.State != runner.StateStopped {
			continue // it ended by itself (failed, oom-killed): that stays shown
		}
		if _, err := e.restart(id); err != nil {
			e.log.Warn("restarting an application after the host restarted", "instance", id, "err", err)
		}
	}
}

func (e *Executor) reservationsNotIn(live []string) []string {
	var out []string
	for _, id := range e.ids(func(r *Record) bool { return !slices.Contains(live, r.Reservation) }) {
		out = append(out, e.get(id).Reservation)
	}
	return out
}
