package node

import (
	"time"

	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// publish produces a monitoring event of kind and typ (the monitor
// numbers it); body fills its body.
func (c *Core) publish(now time.Time, kind wire.EventKind, typ, trace string, body func(ev *wire.Event)) {
	c.mon.publish(now, kind, typ, trace, body)
}

// emit adds a numbered event to Ready.Publish (monitorEnv).
func (c *Core) emit(ev *wire.Event) {
	c.rd.Publish = append(c.rd.Publish, ev)
	c.metrics.Published(ev.Kind)
}

// lifecycle says when the manager started and whether it is stopping
// (monitorEnv).
func (c *Core) lifecycle() (time.Time, bool) { return c.started, c.stopping }

// publishRelation publishes a relation event about peer.
func (c *Core) publishRelation(now time.Time, typ, peer, name string, role relations.Role, from, to relations.State, cause string) {
	c.publish(now, wire.EventKind_EVENT_KIND_RELATION, typ, "", func(ev *wire.Event) {
		ev.Body = &wire.Event_Relation{Relation: &wire.RelationChange{
			Peer: peer, Name: name, Role: roleToPB(role),
			From: stateToPB(from), To: stateToPB(to), Cause: cause,
		}}
	})
}

// publishReservation publishes a reservation event (r nil for a refusal).
func publishReservation(e env, now time.Time, typ, trace string, r *reservation.Reservation, holder reservation.Holder, amounts []*wire.Amount, reason string) {
	e.meter().Reservation(typ)
	e.publish(now, wire.EventKind_EVENT_KIND_RESERVATION, typ, trace, func(ev *wire.Event) {
		rc := &wire.ReservationChange{HolderPeer: holder.Peer, User: holder.User, Amounts: amounts, Reason: reason}
		if r != nil {
			rc.Id, rc.HolderPeer, rc.User = r.ID, r.Holder.Peer, r.Holder.User
			rc.Amounts = amountsToPB(r.Amounts)
			rc.ExpiresUnixMs = r.Expires.UnixMilli()
			rc.Group = r.Group
			rc.StartUnixMs, rc.EndUnixMs, rc.Window = msOf(r.Start), msOf(r.End), r.Window
			if rc.Reason == "" {
				rc.Reason = r.Reason
			}
		}
		ev.Body = &wire.Event_Reservation{Reservation: rc}
	})
}

// publishAdmin publishes that an admin command which asks for a change ran.
func publishAdmin(e env, now time.Time, rec AuditRecord) {
	e.publish(now, wire.EventKind_EVENT_KIND_ADMIN, "command", "", func(ev *wire.Event) {
		ev.Body = &wire.Event_Admin{Admin: &wire.AdminRun{Author: rec.Author, Command: rec.Command, Ok: rec.OK, Detail: rec.Result}}
	})
}
