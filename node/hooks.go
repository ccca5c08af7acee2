package node

import (
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/reservation"
	"github.com/gridmgr/gridmgr/wire"
)

// The Core's side of the hooks modules have into each other's
// capabilities (the interfaces that embed env): each asks the module that
// knows, so that no module names another.

// reservation is reservation id as it stands at now: leases past their
// time lapse first (appsEnv).
func (c *Core) reservation(now time.Time, id string) (reservation.Reservation, bool) {
	return c.res.get(now, id)
}

// liveReservations are the ids of the reservations live now, sorted,
// never nil (appsEnv).
func (c *Core) liveReservations() []string { return c.res.liveIDs() }

// reservationPB is r as a client sees it (appsEnv).
func (c *Core) reservationPB(r *reservation.Reservation) *wire.Reservation {
	return c.res.reservationToPB(r)
}

// instances are the application instances here as the runtime last
// reported them to the monitor (appsEnv).
func (c *Core) instances() map[string]appSeen { return c.mon.apps }

// reservationsEnded tells the applications module that rs ended
// (reservationsEnv).
func (c *Core) reservationsEnded(rs []reservation.Reservation) { c.apps.reservationsEnded(rs) }

// reservationReleased tells the applications module that r was released
// at o's request (reservationsEnv).
func (c *Core) reservationReleased(now time.Time, o origin, r reservation.Reservation) {
	c.apps.released(now, o, r)
}

// The adminEnv hooks: what an admin command does to the manager.

// drain sets whether new reservations are refused, and says what it was.
func (c *Core) drain(on bool) (was bool) {
	was, c.res.drained = c.res.drained, on
	return was
}

// shutdown asks the runtime to stop the manager, for reason.
func (c *Core) shutdown(reason string) { c.rd.Shutdown = reason }

// audit appends rec to the audit log (written before the answer leaves).
func (c *Core) audit(rec AuditRecord) { c.rd.Audit = append(c.rd.Audit, rec) }

// dial asks the runtime for a channel to peer.
func (c *Core) dial(peer string, addrs []string) {
	c.rd.Dials = append(c.rd.Dials, Dial{Peer: peer, Addrs: addrs})
}

// setConfig puts cfg in force (the failure detector's too) and hands it
// to the runtime, which applies what it owns.
func (c *Core) setConfig(cfg config.Config) {
	own := OwnOf(&cfg)
	c.cfg, c.own, c.cfgOwned = &cfg, &own, true
	c.live = cfg.Liveness()
	copied := cfg
	c.rd.Config = &copied
}

// savedAttrs are the attributes and users set at runtime, made empty if
// there were none.
func (c *Core) savedAttrs() *SavedAttributes {
	if c.attrs == nil {
		c.attrs = &SavedAttributes{}
	}
	return c.attrs
}

// attributesChanged: the attributes set at runtime are to be saved.
func (c *Core) attributesChanged() { c.attrDirty = true }
