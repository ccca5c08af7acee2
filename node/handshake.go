package node

import (
	"fmt"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// stepHandshake handles the first message on an inbound channel: it must be
// a Hello asking us to be the sender's superior.
func (c *Core) stepHandshake(now time.Time, peer string, env *wire.Envelope) error {
	c.notPending(peer)
	if inv := env.GetInvite(); inv != nil {
		c.adm.onInvite(now, peer, inv)
		return nil
	}
	if env.GetIndirectProbe() != nil {
		// A channel opened to ask whether we reach a peer (the asker may
		// be a relation of ours that is down, a former inferior).
		c.fo.probeMsg(now, peer, env)
		return nil
	}
	h := env.GetHello()
	if h == nil {
		c.refuse(peer, wire.Refuse_CODE_BAD_HELLO, fmt.Sprintf("expected hello, got %T", env.Body))
		return fmt.Errorf("%w: first message from %s is %T, not hello", ErrProtocol, text.ShortPeer(peer), env.Body)
	}
	if c.stopping {
		c.refuse(peer, wire.Refuse_CODE_SHUTTING_DOWN, c.own.Name+" is shutting down")
		return nil
	}
	if h.ProtocolVersion != ProtocolVersion {
		reason := fmt.Sprintf("protocol version %d is not supported (this manager speaks %d)", h.ProtocolVersion, ProtocolVersion)
		c.refuse(peer, wire.Refuse_CODE_BAD_HELLO, reason)
		return fmt.Errorf("%w: %s from %s", ErrProtocol, reason, h.Name)
	}
	if h.Role != wire.Role_ROLE_INFERIOR {
		reason := fmt.Sprintf("role %v is not supported in a hello", h.Role)
		c.refuse(peer, wire.Refuse_CODE_BAD_HELLO, reason)
		return fmt.Errorf("%w: %s from %s", ErrProtocol, reason, h.Name)
	}
	if err := c.set.CheckInferior(peer); err != nil {
		code := wire.Refuse_CODE_CYCLE
		if peer == c.self {
			code = wire.Refuse_CODE_SELF
		}
		c.refuse(peer, code, text.Human(err))
		c.log.Warn("refused inferior", "peer", h.Name, "reason", err)
		c.event(now, peer, h.Name, "refused as inferior: "+text.Human(err))
		return nil
	}
	r := c.set.AddInferior(now, peer, h.Name, h.Addrs)
	if ch, ok := c.set.SetState(now, r, relations.Up, "hello accepted"); ok {
		c.onChange(now, ch)
	} else {
		// A new channel replaced a live one (the inferior restarted
		// before we noticed): start its heartbeat bookkeeping afresh.
		c.set.SetState(now, r, relations.Connecting, "re-hello")
		c.set.SetState(now, r, relations.Up, "hello accepted")
	}
	r.StartProbe(now) // answered by the inferior's first heartbeat
	c.adm.inferiorUp(now, r)
	c.send(peer, &wire.Envelope{Body: &wire.Envelope_Welcome{Welcome: &wire.Welcome{
		ProtocolVersion: ProtocolVersion,
		Name:            c.own.Name,
		Addrs:           c.addrs,
		Ancestors:       ancestorsToPB(c.set.Ancestors()),
		Version:         c.cfg.Version,
	}}})
	return nil
}

func (c *Core) refuse(peer string, code wire.Refuse_Code, reason string) {
	c.send(peer, &wire.Envelope{Body: &wire.Envelope_Refuse{Refuse: &wire.Refuse{Code: code, Reason: reason}}})
	c.closeChan(peer, "refused: "+reason)
}

// stepWelcome handles the answer to our Hello on a channel we dialled.
func (c *Core) stepWelcome(now time.Time, r *relations.Relation, env *wire.Envelope) error {
	switch b := env.Body.(type) {
	case *wire.Envelope_Welcome:
		w := b.Welcome
		anc := ancestorsFromPB(w.Ancestors)
		if err := c.set.CheckSuperiorChain(r.Peer, anc); err != nil {
			why := text.Human(err)
			c.send(r.Peer, &wire.Envelope{Body: &wire.Envelope_Goodbye{Goodbye: &wire.Goodbye{Reason: why}}})
			c.closeChan(r.Peer, why)
			r.LastError = why
			c.log.Warn("superior would close a cycle, not joining", "peer", w.Name, "err", err)
			c.set.SetState(now, r, relations.Down, why)
			c.scheduleRedial(now, r)
			return nil
		}
		r.Name = w.Name
		if len(w.Addrs) > 0 {
			r.Addrs = relations.MergeAddrs(r.Addrs, w.Addrs)
		}
		r.Ancestors = anc
		attempts := r.Attempts
		r.Attempts, r.LastError = 0, ""
		r.SetNextDial(time.Time{})
		r.Backoff.Reset()
		r.EndProbe(now)
		ch, _ := c.set.SetState(now, r, relations.Up, "welcomed")
		if attempts > 0 {
			ch.Cause = fmt.Sprintf("welcomed after %d failed attempt(s)", attempts)
		}
		c.onChange(now, ch)
		// Heartbeat at once: it tells the superior we are up and gives it
		// its first round-trip sample.
		c.sendBeat(now, r, nil)
		c.adm.superiorUp(now, r)
		c.fo.superiorUp(now, r)
		c.pushChain(now)
		return nil
	case *wire.Envelope_Refuse:
		rf := b.Refuse
		r.LastError = fmt.Sprintf("refused (%s): %s", strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(rf.Code.String(), "CODE_"), "_", " ")), rf.Reason)
		c.log.Warn("superior refused this manager", "peer", r.DisplayName(), "code", rf.Code.String(), "reason", rf.Reason)
		if r.Trial == "" { // a candidate's refusal is told by trialFailed
			c.event(now, r.Peer, r.DisplayName(), r.LastError)
		}
		c.closeChan(r.Peer, "refused")
		c.set.SetState(now, r, relations.Down, r.LastError)
		c.scheduleRedial(now, r)
		return nil
	}
	c.closeChan(r.Peer, "bad handshake")
	r.LastError = fmt.Sprintf("expected welcome, got %T", env.Body)
	c.set.SetState(now, r, relations.Down, r.LastError)
	c.scheduleRedial(now, r)
	return fmt.Errorf("%w: %s from %s", ErrProtocol, r.LastError, r.DisplayName())
}

// notPending: peer's inbound channel no longer waits for its hello. The
// map goes when it is empty (most managers take one inbound channel per
// inferior, at start, and keep them).
func (c *Core) notPending(peer string) {
	delete(c.pendingIn, peer)
	if len(c.pendingIn) == 0 {
		c.pendingIn = nil
	}
}
