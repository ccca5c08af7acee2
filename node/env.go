package node

import (
	"log/slog"
	"time"

	"github.com/gridmgr/gridmgr/config"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// env is what a module sees of the Core: the services every capability
// needs, and nothing of the Core's fields or of the other modules. *Core
// implements it. A module whose work crosses another capability's gets a
// small interface of its own that embeds env and adds the few hooks it
// needs, each named for what it asks (monitorEnv, appsEnv), which *Core
// implements by asking the module that knows.
type env interface {
	// clock is the time of the input being handled.
	clock() time.Time
	// conf is the config in force (changed by admin set); read only.
	// Its Name, Hostname, Superiors and Attributes are not read: they
	// are name and ownFields.
	conf() *config.Config
	// name is this manager's name.
	name() string
	// ownFields are the manager's own fields of the config; read only.
	ownFields() *Own
	// me is this manager's peer id.
	me() string
	// relations is the relation set. Modules read it; only the Core and
	// failover change it.
	relations() *relations.Set
	// send queues env for peer's mesh channel.
	send(peer string, env *wire.Envelope)
	// reply answers o (its channel, or o.answer).
	reply(o origin, env *wire.Envelope)
	// replyErr answers o with an error.
	replyErr(o origin, code wire.ErrorReply_Code, msg string)
	// newID is a fresh envelope id for a request sent.
	newID() uint64
	// call asks the runtime for work (call.go).
	call(kind CallKind, id uint64, req any)
	// publish produces a monitoring event (monitor.go).
	publish(now time.Time, kind wire.EventKind, typ, trace string, body func(ev *wire.Event))
	// logger is the Core's log.
	logger() *slog.Logger
	// meter receives counts and timings.
	meter() Metrics
}

func (c *Core) clock() time.Time          { return c.now }
func (c *Core) conf() *config.Config      { return c.cfg } // read only: ownConfig to change it; not for own's fields
func (c *Core) name() string              { return c.own.Name }
func (c *Core) ownFields() *Own           { return c.own } // read only: replaced whole to change it
func (c *Core) me() string                { return c.self }
func (c *Core) relations() *relations.Set { return c.set }
func (c *Core) logger() *slog.Logger      { return c.log }
func (c *Core) meter() Metrics            { return c.metrics }
func (c *Core) listenAddrs() []string     { return c.addrs }
func (c *Core) randomID() uint64          { return c.rng.Uint64() }
func (c *Core) expressions() *query.Cache { return c.exprs }

// wake notes that a module has something due at t, for WakeAt.
func (c *Core) wake(t time.Time) {
	if c.wakeAt.IsZero() || t.Before(c.wakeAt) {
		c.wakeAt = t
	}
}

// WakeAt is the earliest time a module asked to be ticked since the
// last Tick (zero: none): a runtime that looks again only within a tick
// interval after an input should look then instead when it is sooner.
// It is cheap, unlike NextDeadline. (A job queue asks for a Tick 20 ms
// after a change; a tick interval may be 100 ms.)
func (c *Core) WakeAt() time.Time { return c.wakeAt }

// answerRuntimeErr answers o with an error the runtime reported for a
// Call: an *AppError gives the code; any other error is UNAVAILABLE.
func answerRuntimeErr(e env, o origin, err error) {
	code := wire.ErrorReply_CODE_UNAVAILABLE
	if ae, ok := err.(*AppError); ok {
		code = ae.Code
	}
	e.replyErr(o, code, e.name()+": "+err.Error())
}

// runtimeDone takes call id out of calls (the runtime answered it) and
// returns its origin, ok when the caller is to send the reply; not ok
// when the call is unknown (answered already) or err is set, which it
// answers as an error itself.
func runtimeDone(e env, calls map[uint64]origin, id uint64, err error) (origin, bool) {
	o, ok := calls[id]
	if !ok {
		return origin{}, false
	}
	delete(calls, id)
	if err != nil {
		answerRuntimeErr(e, o, err)
		return origin{}, false
	}
	return o, true
}
