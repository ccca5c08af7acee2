package relations

import (
	"fmt"
	"math"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Role is what the peer of a relation is to us.
type Role uint8

const (
	// Superior: the peer is above us; we dialled it and asked to be its inferior.
	Superior Role = iota + 1
	// Inferior: the peer is below us; it dialled us.
	Inferior
)

func (r Role) String() string {
	switch r {
	case Superior:
		return "superior"
	case Inferior:
		return "inferior"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// State is the liveness of a relation as we see it.
type State uint8

const (
	// Connecting: no channel yet, or the handshake is not done.
	Connecting State = iota + 1
	// Up: handshake done and heard from within the grace of one interval.
	Up
	// Suspect: at least one heartbeat missed, fewer than the limit (or
	// more, while an indirect probe holds it: Relation.HeldUntil).
	Suspect
	// Down: heartbeat.misses heartbeats missed, the channel was lost, or
	// the peer refused us.
	Down
)

func (s State) String() string {
	switch s {
	case Connecting:
		return "connecting"
	case Up:
		return "up"
	case Suspect:
		return "suspect"
	case Down:
		return "down"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Live reports whether messages can flow on a relation in this state.
func (s State) Live() bool { return s == Up || s == Suspect }

// Ancestor is a manager above us. Depth 1 is a direct superior. The
// JSON names are those of relations.json (SavedAncestor). A relation's
// chain (Relation.Ancestors) is replaced, never changed in place: a saved
// snapshot shares it.
type Ancestor struct {
	Peer  string   `json:"peer"`
	Name  string   `json:"name,omitempty"`
	Addrs []string `json:"addrs"`
	Depth int      `json:"depth"`
}

// rttSamples is how many sent heartbeats we remember to match echoes.
const rttSamples = 8

// Relation is one superior or inferior and everything we know about it.
// The Set owns relations; callers read the fields and change them only
// through Set and Relation methods.
type Relation struct {
	Peer  string
	Name  string   // as the peer told us, or "" until the handshake
	Addrs []string // transport multiaddrs without /p2p
	// The one-byte fields sit together (Role to rttSeen): in place among
	// the others they padded the struct past the 576-byte size class (568
	// bytes and the allocator's 8-byte header), and a simulated million
	// managers hold two million relations.
	Role       Role
	Configured bool // a superior named by the properties file
	// Origin is why a superior is ours (configured, adopted, fallback,
	// admin).
	Origin Origin
	// Standby marks a failed superior that another one replaced but that
	// we keep dialling (prefer_configured_superior): it is not declared
	// failed again while it stays away.
	Standby bool
	// State is the relation's state, entered at Since.
	State    State
	Dialling bool // a dial is in flight (superiors)
	rttSeen  bool // RTT holds a measurement
	// Trial is, while we try this superior in place of a failed one, the
	// failed superior's peer id; "" once it took us (or for any other
	// relation). A trial that fails drops the relation and moves on.
	Trial string
	// trialDeadline is when a trial that has not been welcomed is given
	// up (TrialDeadline).
	trialDeadline stamp
	// StandsFor is the failed superior this one replaced ("" if none): with
	// prefer_configured_superior, it is let go once that one is back.
	StandsFor string
	// restoredAt is when a superior saved by an earlier run was restored
	// (RestoredAt).
	restoredAt stamp
	// heldUntil: until then a silent superior stays suspect (HeldUntil).
	heldUntil stamp

	since     stamp // when State was entered
	lastHeard stamp // zero: never heard
	RTT       time.Duration
	LastError string // why the last dial, handshake or channel failed

	// PeerInterval is the heartbeat interval the peer says it uses (0:
	// unknown); its silence is judged by the longer of it and ours.
	PeerInterval time.Duration

	// Ancestors are a superior's own ancestors, as it last reported them.
	Ancestors []Ancestor

	// Dialling (superiors).
	Backoff  Backoff
	nextDial stamp // when to dial next; zero: not scheduled (NextDial)
	Attempts int   // failed dials or handshakes since the last success

	// Handshake: when a dialled channel must have been welcomed by
	// (HandshakeDeadline).
	handshakeDeadline stamp

	// Heartbeats: the last rttSamples sent on this channel (for the
	// echoes), small and free of pointers (a simulated million managers
	// hold two million of them).
	sendSeq uint64
	sent    [rttSamples]sentBeat
	recvSeq uint64 // last seq heard from the peer
	recvAt  stamp  // when we heard it
	probeAt stamp  // when a handshake message awaiting its answer was sent

	// t0 is the origin of the relation's times, the first one it stored.
	t0 time.Time
}

// A stamp is one of a relation's times, kept as an offset from the
// relation's t0: 8 bytes instead of a time.Time's 24 (with nine of them,
// the 576-byte size class becomes 448, and a simulated million managers
// hold two million relations). 0 is the zero time; a time at or after t0
// is its offset plus one, one before t0 its (negative) offset. Offsets
// are exact to the nanosecond within ±292 years of t0, and keep t0's
// monotonic clock reading, as time.Time.Add does.
type stamp int64

// at is the time s stands for.
func (r *Relation) at(s stamp) time.Time {
	switch {
	case s == 0:
		return time.Time{}
	case s > 0 && s < math.MaxInt64:
		return r.t0.Add(time.Duration(s - 1))
	}
	return r.t0.Add(time.Duration(s))
}

// stamp is t as a stamp; the first time stored sets t0.
func (r *Relation) stamp(t time.Time) stamp {
	if t.IsZero() {
		return 0
	}
	if r.t0.IsZero() {
		r.t0 = t
	}
	d := t.Sub(r.t0)
	if d >= 0 && d < math.MaxInt64 {
		d++
	}
	return stamp(d)
}

// Since is when State was entered.
func (r *Relation) Since() time.Time { return r.at(r.since) }

// LastHeard is when the peer was last heard; zero: never.
func (r *Relation) LastHeard() time.Time { return r.at(r.lastHeard) }

// SetLastHeard sets LastHeard (Heard is what a message does).
func (r *Relation) SetLastHeard(t time.Time) { r.lastHeard = r.stamp(t) }

// NextDial is when to dial next; zero: not scheduled.
func (r *Relation) NextDial() time.Time { return r.at(r.nextDial) }

// SetNextDial schedules the next dial at t (zero: none).
func (r *Relation) SetNextDial(t time.Time) { r.nextDial = r.stamp(t) }

// HandshakeDeadline is when a dialled channel must have been welcomed by
// (zero: no handshake under way).
func (r *Relation) HandshakeDeadline() time.Time { return r.at(r.handshakeDeadline) }

// SetHandshakeDeadline sets HandshakeDeadline.
func (r *Relation) SetHandshakeDeadline(t time.Time) { r.handshakeDeadline = r.stamp(t) }

// TrialDeadline is when a trial that has not been welcomed is given up.
func (r *Relation) TrialDeadline() time.Time { return r.at(r.trialDeadline) }

// RestoredAt is when a superior saved by an earlier run was restored
// (zero for others): if it is never heard, it is declared failed
// FailAfter later, counted from then, so a manager that restarts while
// its superior is gone moves on (to the saved ancestors) instead of
// waiting for it forever.
func (r *Relation) RestoredAt() time.Time { return r.at(r.restoredAt) }

// SetRestoredAt sets RestoredAt.
func (r *Relation) SetRestoredAt(t time.Time) { r.restoredAt = r.stamp(t) }

// HeldUntil: until then a silent superior stays suspect instead of going
// down, because an indirect probe found it alive through another
// manager: the silence is our link's (set by Failover).
func (r *Relation) HeldUntil() time.Time { return r.at(r.heldUntil) }

// SetHeldUntil sets HeldUntil.
func (r *Relation) SetHeldUntil(t time.Time) { r.heldUntil = r.stamp(t) }

type sentBeat struct {
	seq uint64
	at  stamp // when it was sent
}

// lastSent is when the last heartbeat on this channel was sent, zero if
// none was.
func (r *Relation) lastSent() time.Time {
	if r.sendSeq == 0 {
		return time.Time{}
	}
	return r.at(r.sent[r.sendSeq%rttSamples].at)
}

// DisplayName is the peer's name, or a short form of its id before we know it.
func (r *Relation) DisplayName() string {
	if r.Name != "" {
		return r.Name
	}
	return text.ShortPeer(r.Peer)
}

// Heard records traffic from the peer: any message counts as life.
func (r *Relation) Heard(now time.Time) {
	if now.After(r.LastHeard()) {
		r.lastHeard = r.stamp(now)
	}
}

// HeartbeatDue reports whether a heartbeat should be sent now.
func (r *Relation) HeartbeatDue(now time.Time, interval time.Duration) bool {
	return r.State.Live() && (r.sendSeq == 0 || now.Sub(r.lastSent()) >= interval)
}

// NextHeartbeat is when the next heartbeat on a live relation is due (now
// or earlier when one is due now), zero when it is not live.
func (r *Relation) NextHeartbeat(now time.Time, interval time.Duration) time.Time {
	if !r.State.Live() {
		return time.Time{}
	}
	if r.sendSeq == 0 {
		return now // none sent on this channel yet: due now
	}
	return r.lastSent().Add(interval)
}

// Beat is the heartbeat bookkeeping sent to the peer: our sequence number and
// the echo of the peer's last heartbeat with how long we held it.
type Beat struct {
	Seq     uint64
	EchoSeq uint64
	Hold    time.Duration
}

// NextBeat records that a heartbeat is sent now and returns its fields.
func (r *Relation) NextBeat(now time.Time) Beat {
	r.sendSeq++
	r.sent[r.sendSeq%rttSamples] = sentBeat{seq: r.sendSeq, at: r.stamp(now)}
	b := Beat{Seq: r.sendSeq}
	if r.recvSeq != 0 {
		b.EchoSeq = r.recvSeq
		if h := now.Sub(r.at(r.recvAt)); h > 0 {
			b.Hold = h
		}
	}
	return b
}

// StartProbe records that a handshake message (hello, welcome) left now;
// EndProbe, on its answer, turns it into the first round-trip sample so the
// RTT is known before heartbeats echo.
func (r *Relation) StartProbe(now time.Time) { r.probeAt = r.stamp(now) }

// EndProbe takes the round-trip sample of a pending probe, if any.
func (r *Relation) EndProbe(now time.Time) {
	if p := r.at(r.probeAt); !p.IsZero() && !now.Before(p) {
		r.ObserveRTT(now.Sub(p))
	}
	r.probeAt = 0
}

// OnBeat records a heartbeat from the peer and, when it echoes one of ours
// that we still remember, updates the smoothed round trip (TCP's 1/8 gain).
// The first heartbeat after our welcome answers the welcome's probe.
func (r *Relation) OnBeat(now time.Time, b Beat) {
	r.Heard(now)
	r.EndProbe(now)
	if b.Seq > r.recvSeq {
		r.recvSeq = b.Seq
		r.recvAt = r.stamp(now)
	}
	if b.EchoSeq == 0 {
		return
	}
	s := r.sent[b.EchoSeq%rttSamples]
	if s.seq != b.EchoSeq {
		return
	}
	sample := now.Sub(r.at(s.at)) - b.Hold
	if sample < 0 {
		return // the peer's clock ran faster than ours; ignore
	}
	r.ObserveRTT(sample)
}

// ObserveRTT folds one round-trip measurement into the smoothed RTT.
func (r *Relation) ObserveRTT(sample time.Duration) {
	if !r.rttSeen {
		r.RTT = sample
	} else {
		r.RTT += (sample - r.RTT) / 8
	}
	r.rttSeen = true
}

// resetChannel forgets per-channel heartbeat state; called when a channel
// opens or closes.
func (r *Relation) resetChannel() {
	r.sendSeq = 0
	r.sent = [rttSamples]sentBeat{}
	r.recvSeq = 0
	r.recvAt = 0
	r.handshakeDeadline = 0
}
