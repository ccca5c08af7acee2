package node

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/admincmd"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/relations"
	"github.com/gridmgr/gridmgr/wire"
)

// Bounds on what a peer may put in a message, checked before the Core acts.
const (
	maxNameLen   = 64
	maxAddrs     = 32
	maxAddrLen   = 256
	maxReasonLen = 1024
)

// unknownBody returns the field number of the body of env when this
// version does not know it (a newer peer sent a message added to the oneof
// since): the body is then kept among the unknown fields. 0 means env's
// body is known, or env has none at all.
func unknownBody(env *wire.Envelope) protowire.Number {
	if env == nil || env.Body != nil {
		return 0
	}
	b := env.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0
		}
		if typ == protowire.BytesType && num > 3 {
			return num // a message field: id, reply_to and trace_id are 1 to 3
		}
		if m := protowire.ConsumeFieldValue(num, typ, b[n:]); m < 0 {
			return 0
		} else {
			b = b[n+m:]
		}
	}
	return 0
}

// validateEnvelope rejects envelopes whose fields exceed the bounds above or
// that carry no body. The frame size limit of the transport bounds the rest.
// Bodies this version does not know are the caller's (unknownBody).
func validateEnvelope(env *wire.Envelope) error {
	if env == nil || env.Body == nil {
		return fmt.Errorf("%w: the envelope has no body", ErrBadMessage)
	}
	if !validTrace(env.TraceId) {
		return fmt.Errorf("%w: trace_id %s: at most 64 letters, digits, '-' or '_'", ErrBadMessage, text.QuoteShort(env.TraceId))
	}
	if err := validateCalendarMsg(env); err != nil {
		return err
	}
	switch b := env.Body.(type) {
	case *wire.Envelope_Hello:
		h := b.Hello
		if err := checkName("hello.name", h.Name); err != nil {
			return err
		}
		if err := checkAddrs("hello.addrs", h.Addrs); err != nil {
			return err
		}
		return checkAncestors("hello.ancestors", h.Ancestors)
	case *wire.Envelope_Welcome:
		w := b.Welcome
		if err := checkName("welcome.name", w.Name); err != nil {
			return err
		}
		if err := checkAddrs("welcome.addrs", w.Addrs); err != nil {
			return err
		}
		return checkAncestors("welcome.ancestors", w.Ancestors)
	case *wire.Envelope_Heartbeat:
		return checkAncestors("heartbeat.ancestors", b.Heartbeat.Ancestors)
	case *wire.Envelope_Refuse:
		return checkText("refuse.reason", b.Refuse.Reason, maxReasonLen)
	case *wire.Envelope_Goodbye:
		return checkText("goodbye.reason", b.Goodbye.Reason, maxReasonLen)
	case *wire.Envelope_PingRequest:
		return checkText("ping_request.peer", b.PingRequest.Peer, maxAddrLen)
	case *wire.Envelope_IndirectProbe:
		if err := checkText("indirect_probe.from", b.IndirectProbe.From, maxAddrLen); err != nil {
			return err
		}
		return checkText("indirect_probe.target", b.IndirectProbe.Target, maxAddrLen)
	case *wire.Envelope_IndirectProbeReply:
		if err := checkText("indirect_probe_reply.target", b.IndirectProbeReply.Target, maxAddrLen); err != nil {
			return err
		}
		return checkText("indirect_probe_reply.reason", b.IndirectProbeReply.Reason, maxReasonLen)
	case *wire.Envelope_AdminRequest:
		a := b.AdminRequest
		if err := checkText("admin_request.command", a.Command, admincmd.MaxLine); err != nil {
			return err
		}
		return checkText("admin_request.author", a.Author, maxAddrLen)
	case *wire.Envelope_AdminReply:
		return checkAdminReply(b.AdminReply, 0)
	case *wire.Envelope_Invite:
		inv := b.Invite
		if err := checkName("invite.name", inv.Name); err != nil {
			return err
		}
		if err := checkAddrs("invite.addrs", inv.Addrs); err != nil {
			return err
		}
		if err := checkText("invite.author", inv.Author, maxAddrLen); err != nil {
			return err
		}
		return checkAncestors("invite.ancestors", inv.Ancestors)
	case *wire.Envelope_AppRequest:
		return validateAppRequest(b.AppRequest)
	case *wire.Envelope_InviteReply:
		return checkText("invite_reply.reason", b.InviteReply.Reason, maxReasonLen)
	case *wire.Envelope_QueryRequest:
		q := b.QueryRequest
		if q.Requirement == "" {
			return fmt.Errorf("%w: the query has no requirement (query_request.requirement); give an expression such as cpus_free >= 4, or true for every manager", ErrBadMessage)
		}
		if err := checkText("query_request.requirement", q.Requirement, query.MaxExprLen); err != nil {
			return err
		}
		if err := checkText("query_request.rank", q.Rank, query.MaxExprLen); err != nil {
			return err
		}
		if err := checkText("query_request.user", q.User, maxNameLen); err != nil {
			return err
		}
		return checkAttrs("query_request.attrs", q.Attrs)
	}
	return validateReservationMsg(env)
}

// maxAdminOutput bounds one manager's admin output (a plugin's is cut
// shorter by the runtime).
const maxAdminOutput = 1 << 20

func checkAdminReply(r *wire.AdminReply, depth int) error {
	if depth > 1 {
		return fmt.Errorf("%w: admin_reply nested too deep", ErrBadMessage)
	}
	if err := checkText("admin_reply.output", r.Output, maxAdminOutput); err != nil {
		return err
	}
	if err := checkText("admin_reply.name", r.Name, maxNameLen); err != nil {
		return err
	}
	for _, x := range r.Replies {
		if err := checkAdminReply(x, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func checkText(field, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrBadMessage, field, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrBadMessage, field)
	}
	return nil
}

func checkName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrBadMessage, field)
	}
	return checkText(field, s, maxNameLen)
}

func checkAddrs(field string, addrs []string) error {
	if len(addrs) > maxAddrs {
		return fmt.Errorf("%w: %s has %d entries, limit %d", ErrBadMessage, field, len(addrs), maxAddrs)
	}
	for i, a := range addrs {
		if textOK(a, maxAddrLen) {
			continue // the field's name is built only for an error
		}
		if err := checkText(fmt.Sprintf("%s[%d]", field, i), a, maxAddrLen); err != nil {
			return err
		}
	}
	return nil
}

// textOK is what checkText accepts, without building an error.
func textOK(s string, max int) bool { return len(s) <= max && utf8.ValidString(s) }

// ancestorOK is what checkAncestors accepts of one entry, without
// building the field names of its errors (it runs on every heartbeat
// from a superior).
func ancestorOK(a *wire.Ancestor) bool {
	if a.Peer == "" || len(a.Peer) > maxAddrLen || !textOK(a.Name, maxNameLen) ||
		len(a.Addrs) > maxAddrs || a.Depth < 1 || a.Depth > relations.MaxAncestors {
		return false
	}
	for _, addr := range a.Addrs {
		if !textOK(addr, maxAddrLen) {
			return false
		}
	}
	return true
}

func checkAncestors(field string, anc []*wire.Ancestor) error {
	if len(anc) > relations.MaxAncestors {
		return fmt.Errorf("%w: %s has %d entries, limit %d", ErrBadMessage, field, len(anc), relations.MaxAncestors)
	}
	for i, a := range anc {
		if ancestorOK(a) {
			continue
		}
		f := fmt.Sprintf("%s[%d]", field, i)
		if a.Peer == "" || len(a.Peer) > maxAddrLen {
			return fmt.Errorf("%w: %s.peer is empty or too long", ErrBadMessage, f)
		}
		if err := checkText(f+".name", a.Name, maxNameLen); err != nil {
			return err
		}
		if err := checkAddrs(f+".addrs", a.Addrs); err != nil {
			return err
		}
		if a.Depth < 1 || a.Depth > relations.MaxAncestors {
			return fmt.Errorf("%w: %s.depth %d is out of range 1..%d", ErrBadMessage, f, a.Depth, relations.MaxAncestors)
		}
	}
	return nil
}

func ancestorsToPB(anc []relations.Ancestor) []*wire.Ancestor {
	out := make([]*wire.Ancestor, len(anc))
	for i, a := range anc {
		out[i] = &wire.Ancestor{Peer: a.Peer, Name: a.Name, Addrs: a.Addrs, Depth: uint32(a.Depth)}
	}
	return out
}

func ancestorsFromPB(anc []*wire.Ancestor) []relations.Ancestor {
	out := make([]relations.Ancestor, len(anc))
	for i, a := range anc {
		out[i] = relations.Ancestor{Peer: a.Peer, Name: a.Name, Addrs: a.Addrs, Depth: int(a.Depth)}
	}
	return out
}

// sameChain reports whether two ancestor chains are the same (compared on
// every heartbeat from a superior, so without building strings).
func sameChain(a, b []relations.Ancestor) bool {
	return slices.EqualFunc(a, b, func(x, y relations.Ancestor) bool {
		return x.Peer == y.Peer && x.Depth == y.Depth && x.Name == y.Name && slices.Equal(x.Addrs, y.Addrs)
	})
}

// sameChainPB reports whether the chain pb (from a message) is anc, as
// ancestorsFromPB would make it, without making it.
func sameChainPB(pb []*wire.Ancestor, anc []relations.Ancestor) bool {
	return slices.EqualFunc(pb, anc, func(x *wire.Ancestor, y relations.Ancestor) bool {
		return x.Peer == y.Peer && int(x.Depth) == y.Depth && x.Name == y.Name && slices.Equal(x.Addrs, y.Addrs)
	})
}

// chainHash identifies what of an ancestor chain its inferiors are told
// again when it changes (pushChain): each ancestor's peer, depth and
// addresses, in order (not names). It is FNV-1a over each field with its
// length, eight bytes at a step (with a shift to carry high bits down), 0
// for no ancestors. The Core keeps it, not the chain as text
// (about 180 bytes per manager of a large grid), and computes it without
// allocating on every heartbeat from a superior (hash/fnv's hashers are
// interfaces that go to the heap, and hash/maphash needs a random seed,
// which the Core may not draw). Two chains with one hash
// (a chance of 2^-64) would only delay the push to the next heartbeat,
// which carries the chain anyway.
func chainHash(anc []relations.Ancestor) uint64 {
	if len(anc) == 0 {
		return 0
	}
	h := uint64(fnvOffset)
	for _, a := range anc {
		h = hashString(h, a.Peer)
		h = mixWord(h, uint64(a.Depth))
		h = mixWord(h, uint64(len(a.Addrs)))
		for _, addr := range a.Addrs {
			h = hashString(h, addr)
		}
	}
	return h
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// mixWord adds v to h. Each step is a bijection of h for a given v, so
// chains that differ in one word never share a hash.
func mixWord(h, v uint64) uint64 {
	h = (h ^ v) * fnvPrime
	return h ^ h>>32
}

// hashString adds s and its length to h, eight bytes at a step (a chain
// is hashed at each heartbeat from a superior: byte by byte, its 300 or
// so bytes took 3 % of a simulated grid's time at rest).
func hashString(h uint64, s string) uint64 {
	h = mixWord(h, uint64(len(s)))
	for len(s) >= 8 {
		h = mixWord(h, uint64(s[0])|uint64(s[1])<<8|uint64(s[2])<<16|uint64(s[3])<<24|
			uint64(s[4])<<32|uint64(s[5])<<40|uint64(s[6])<<48|uint64(s[7])<<56)
		s = s[8:]
	}
	var w uint64
	for i := range len(s) {
		w |= uint64(s[i]) << (8 * i)
	}
	return mixWord(h, w)
}

func stateToPB(s relations.State) wire.RelationState {
	switch s {
	case relations.Connecting:
		return wire.RelationState_RELATION_STATE_CONNECTING
	case relations.Up:
		return wire.RelationState_RELATION_STATE_UP
	case relations.Suspect:
		return wire.RelationState_RELATION_STATE_SUSPECT
	case relations.Down:
		return wire.RelationState_RELATION_STATE_DOWN
	}
	return wire.RelationState_RELATION_STATE_UNSPECIFIED
}

func roleToPB(r relations.Role) wire.Role {
	if r == relations.Superior {
		return wire.Role_ROLE_SUPERIOR
	}
	return wire.Role_ROLE_INFERIOR
}

// status describes this manager and its relations at now.
func (c *Core) status(now time.Time) *wire.StatusReply {
	st := &wire.StatusReply{
		Name:      c.own.Name,
		Peer:      c.self,
		Addrs:     c.addrs,
		Version:   c.cfg.Version,
		UptimeMs:  uint64(max(0, now.Sub(c.started)) / time.Millisecond),
		Ancestors: ancestorsToPB(c.set.Ancestors()),
	}
	v := &c.res.vals
	st.Cpus, st.MemoryBytes = uint32(v.CPUs), uint64(v.Mem)
	st.Hostname, st.Os, st.Arch = v.Hostname, v.OS, v.Arch
	for _, r := range c.set.All() {
		ri := &wire.RelationInfo{
			Peer:         r.Peer,
			Name:         r.Name,
			Role:         roleToPB(r.Role),
			State:        stateToPB(r.State),
			Addrs:        r.Addrs,
			SinceMsAgo:   msAgo(now, r.Since()),
			Heard:        !r.LastHeard().IsZero(),
			RttUs:        uint64(r.RTT / time.Microsecond),
			Configured:   r.Configured,
			DialAttempts: uint32(r.Attempts),
			LastError:    r.LastError,
		}
		if r.Role == relations.Superior {
			ri.Origin = r.Origin.String()
			ri.Standby = r.Standby
			if r.StandsFor != "" {
				ri.StandsFor = text.ShortPeer(r.StandsFor)
				if o := c.set.Get(r.StandsFor); o != nil && o.Name != "" {
					ri.StandsFor = o.Name
				}
			}
		}
		if ri.Heard {
			ri.LastHeardMsAgo = msAgo(now, r.LastHeard())
		}
		if !r.NextDial().IsZero() {
			ri.NextDialMs = uint64(max(0, r.NextDial().Sub(now)) / time.Millisecond)
		}
		st.Relations = append(st.Relations, ri)
	}
	st.Failovers = c.Failovers()
	st.UnknownMessages = c.unknownMsgs
	for _, e := range c.events {
		st.Events = append(st.Events, &wire.RelationEvent{MsAgo: msAgo(now, e.At), Peer: e.Peer, Name: e.Name, What: e.What})
	}
	return st
}

func msAgo(now, t time.Time) uint64 {
	return uint64(max(0, now.Sub(t)) / time.Millisecond)
}

// Bounds of a request's attrs (request.attrs).
const (
	maxReqAttrs    = 32
	maxReqAttrKey  = 64
	maxReqAttrText = 256
)

// checkAttrs bounds a request's attributes.
func checkAttrs(field string, attrs map[string]string) error {
	if len(attrs) > maxReqAttrs {
		return fmt.Errorf("%w: %s has %d entries, limit %d", ErrBadMessage, field, len(attrs), maxReqAttrs)
	}
	for k, v := range attrs {
		if k == "" {
			return fmt.Errorf("%w: %s has an empty key", ErrBadMessage, field)
		}
		if err := checkText(field+" key", k, maxReqAttrKey); err != nil {
			return err
		}
		if err := checkText(field+"."+k, v, maxReqAttrText); err != nil {
			return err
		}
	}
	return nil
}
