package reservation

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ActionKind says what the driver of a Coordinator must do.
type ActionKind uint8

// Action kinds.
const (
	ActHold    ActionKind = iota + 1 // ask candidate Target for a hold
	ActCommit                        // commit reservation ID at Target
	ActRelease                       // release reservation ID at Target
)

var actionNames = [...]string{"", "hold", "commit", "release"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) && k != 0 {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", uint8(k))
}

// Action is one request the driver must send: Hold asks candidate Target
// for a hold (ID is empty); Commit and Release act on the reservation ID
// that Target granted.
type Action struct {
	Kind   ActionKind
	Target int
	ID     string
}

func (a Action) String() string {
	if a.ID == "" {
		return fmt.Sprintf("%s %d", a.Kind, a.Target)
	}
	return fmt.Sprintf("%s %d %s", a.Kind, a.Target, a.ID)
}

// Granted is one reservation of a co-reservation: the candidate that
// granted it and its reservation number.
type Granted struct {
	Target int
	ID     string
}

// ErrCoordPending is what Result returns (wrapped) before Done.
var ErrCoordPending = errors.New("co-reservation not finished")

// CoordError is the error Result returns when a co-reservation failed.
// Unwrap gives the answers that made it fail and the release failures, so
// errors.As and CodeOf see the managers' codes.
type CoordError struct {
	Timeout bool    // the deadline passed before every reservation was committed
	Causes  []error // refusals, the failed commit, failed releases, each naming its candidate
	msg     string
}

func (e *CoordError) Error() string   { return e.msg }
func (e *CoordError) Unwrap() []error { return e.Causes }

type coordPhase uint8

const (
	coordHolding    coordPhase = iota + 1 // phase 1: collecting holds
	coordCommitting                       // phase 2: every hold is in, commits sent
	coordSucceeded                        // every commit answered ok
	coordFailed                           // gave up: everything granted is released
)

type coordFail uint8

const (
	failRefused coordFail = iota + 1 // not enough candidates would hold
	failCommit                       // a commit failed
	failTimeout                      // the deadline passed
)

// coordCand is what the coordinator knows of one candidate. A "sent" flag
// means the action was issued (queued for Actions or already returned by
// it); an issued action stays outstanding until its answer is reported.
type coordCand struct {
	holdSent, holdDone bool
	holdErr            error
	id                 string // reservation granted (also a stray one, see OnHold)
	used               bool   // id counts towards the co-reservation (not a late or stray grant)

	commitSent, commitDone, committed bool
	commitErr                         error

	releaseSent, releaseDone bool
	releaseErr               error
}

// Coordinator is the pure coordinator of a co-reservation: count
// reservations at count distinct managers out of an ordered list of
// candidates (best first), all committed or none. Like the ledger it does
// no I/O, starts no goroutine and reads no clock: a driver tells it what
// happened (OnHold, OnCommit, OnRelease, Tick, each with the current time),
// then sends the requests that Actions returns, and repeats until Done.
// It is not safe for concurrent use; the driver serialises calls.
//
// Two phases. Phase 1 asks the first count candidates for a hold at once;
// each refusal is replaced by the next unused candidate, as long as count
// holds remain possible; when they do not, it gives up. Phase 2 starts only
// when exactly count holds are granted: it commits them all at once. A
// failed commit, or the deadline passing in either phase, aborts: every
// reservation granted (held, committed or with its commit in flight) is
// released, and so is every hold granted afterwards. At most one release is
// sent per reservation; a release that fails is not retried and the
// reservation is left to lapse by itself (reported in Result's error).
//
// The driver must answer every action it sends, exactly once, in any
// order: a lost request or reply is reported as an error. Done becomes true
// once the outcome is settled and every action sent has been answered.
//
// What the coordinator cannot protect against is its own death: it keeps
// no state anywhere. If it dies during phase 1 or between the phases, the
// holds it obtained lapse at each manager by their hold timeout (which is
// why the deadline must be shorter than the hold timeout). If it dies
// during phase 2, the reservations already committed are leases that stay
// until their lease end unless renewed, and the rest lapse as holds. The
// same holds for a release that fails, and for a hold whose grant was lost
// on the way back (the coordinator never learned its number).
type Coordinator struct {
	n, count int
	deadline time.Time
	names    []string

	cands     []coordCand
	next      int // first candidate never asked
	granted   int // used holds granted
	committed int // used reservations committed
	phase     coordPhase

	fail        coordFail
	failTarget  int // the failed commit
	heldAtFail  int
	commAtFail  int
	waitingFail []Action // unanswered holds and commits when the deadline passed

	queue []Action // issued, not yet returned by Actions
}

// NewCoordinator plans a co-reservation of count of the n candidates
// (indices 0..n-1, best first), to be committed by deadline. The driver
// passes a deadline shorter than the hold timeout, so that holds are
// committed before they lapse. count must be 1..n and deadline set.
func NewCoordinator(n, count int, deadline time.Time) (*Coordinator, error) {
	if n < 1 || count < 1 || count > n {
		return nil, fmt.Errorf("co-reservation of %d of %d candidates: the count must be 1..%d", count, n, max(n, 1))
	}
	if deadline.IsZero() {
		return nil, errors.New("co-reservation without a deadline")
	}
	c := &Coordinator{n: n, count: count, deadline: deadline, cands: make([]coordCand, n), phase: coordHolding}
	for c.next < count {
		c.hold(c.next)
		c.next++
	}
	return c, nil
}

// SetNames names the candidates (names[i] is candidate i, e.g. the
// manager's name) in Result's error text; without it they are "candidate
// i". A slice of another length than n is ignored.
func (c *Coordinator) SetNames(names []string) {
	if len(names) == c.n {
		c.names = slices.Clone(names)
	}
}

func (c *Coordinator) name(i int) string {
	if c.names != nil && c.names[i] != "" {
		return c.names[i]
	}
	return fmt.Sprintf("candidate %d", i)
}

// Actions returns the requests to send now, ordered by target (and by kind
// for one target); each action is returned once. Call it after every On*
// and Tick.
func (c *Coordinator) Actions() []Action {
	if len(c.queue) == 0 {
		return nil
	}
	out := c.queue
	c.queue = nil
	slices.SortStableFunc(out, func(a, b Action) int {
		return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

func (c *Coordinator) hold(i int) {
	c.cands[i].holdSent = true
	c.queue = append(c.queue, Action{Kind: ActHold, Target: i})
}

func (c *Coordinator) commit(i int) {
	c.cands[i].commitSent = true
	c.queue = append(c.queue, Action{Kind: ActCommit, Target: i, ID: c.cands[i].id})
}

// release issues the (only) release of candidate i's reservation.
func (c *Coordinator) release(i int) {
	cd := &c.cands[i]
	if cd.id == "" || cd.releaseSent {
		return
	}
	cd.releaseSent = true
	c.queue = append(c.queue, Action{Kind: ActRelease, Target: i, ID: cd.id})
}

func (c *Coordinator) active() bool { return c.phase == coordHolding || c.phase == coordCommitting }

// OnHold reports candidate i's answer to its hold: the reservation id, or
// err (a refusal, or a lost request or reply). A grant that arrives after
// the coordinator gave up, or that it does not need, is released. Answers
// for a candidate never asked, and repeated answers, are ignored, with one
// exception: a grant that arrives for a candidate whose hold was already
// answered with an error (a reply reported lost, then delivered after all)
// is released, since its candidate was already replaced or given up on.
func (c *Coordinator) OnHold(now time.Time, i int, id string, err error) {
	defer c.tick(now)
	if i < 0 || i >= c.n || !c.cands[i].holdSent {
		return
	}
	cd := &c.cands[i]
	if cd.holdDone {
		if cd.holdErr != nil && err == nil && id != "" && cd.id == "" {
			cd.id = id
			c.release(i)
		}
		return
	}
	cd.holdDone = true
	if err == nil && id == "" {
		err = errors.New("hold granted without a reservation number")
	}
	if err != nil {
		cd.holdErr = err
		if c.phase == coordHolding {
			if c.next < c.n {
				c.hold(c.next)
				c.next++
			} else {
				c.abort(failRefused)
			}
		}
		return
	}
	cd.id = id
	if c.phase != coordHolding {
		c.release(i)
		return
	}
	cd.used = true
	c.granted++
	if c.granted == c.count {
		c.phase = coordCommitting
		for j := range c.cands {
			if c.cands[j].used {
				c.commit(j)
			}
		}
	}
}

// OnCommit reports the answer to the commit of candidate i's reservation.
// A failed commit aborts the co-reservation (everything is released).
func (c *Coordinator) OnCommit(now time.Time, i int, err error) {
	defer c.tick(now)
	if i < 0 || i >= c.n || !c.cands[i].commitSent || c.cands[i].commitDone {
		return
	}
	cd := &c.cands[i]
	cd.commitDone = true
	if err != nil {
		cd.commitErr = err
		if c.active() {
			c.failTarget = i
			c.abort(failCommit)
		}
		return
	}
	cd.committed = true
	if c.phase == coordCommitting {
		c.committed++
		if c.committed == c.count {
			c.phase = coordSucceeded
		}
	}
}

// OnRelease reports the answer to the release of candidate i's
// reservation. A failed release is not retried.
func (c *Coordinator) OnRelease(now time.Time, i int, err error) {
	defer c.tick(now)
	if i < 0 || i >= c.n || !c.cands[i].releaseSent || c.cands[i].releaseDone {
		return
	}
	c.cands[i].releaseDone = true
	c.cands[i].releaseErr = err
}

// Tick tells the coordinator the time. At or after the deadline, while
// holds or commits are still unanswered, it aborts: every reservation
// granted is released (also one whose commit is in flight, and any hold
// granted later) and Result reports a timeout.
func (c *Coordinator) Tick(now time.Time) { c.tick(now) }

func (c *Coordinator) tick(now time.Time) {
	if !c.active() || now.Before(c.deadline) {
		return
	}
	c.abort(failTimeout)
}

// abort gives up: holds and commits not yet returned by Actions are taken
// back (never sent, never to be answered), and every reservation granted
// is released.
func (c *Coordinator) abort(why coordFail) {
	c.phase, c.fail = coordFailed, why
	c.heldAtFail, c.commAtFail = c.granted, c.committed
	q := c.queue[:0]
	for _, a := range c.queue {
		switch a.Kind {
		case ActHold:
			c.cands[a.Target].holdSent = false
		case ActCommit:
			c.cands[a.Target].commitSent = false
		default:
			q = append(q, a)
		}
	}
	c.queue = q
	for i := range c.cands {
		cd := &c.cands[i]
		if why == failTimeout && cd.holdSent && !cd.holdDone {
			c.waitingFail = append(c.waitingFail, Action{Kind: ActHold, Target: i})
		}
		if why == failTimeout && cd.commitSent && !cd.commitDone {
			c.waitingFail = append(c.waitingFail, Action{Kind: ActCommit, Target: i, ID: cd.id})
		}
		c.release(i)
	}
}

// outstanding counts issued actions still unanswered.
func (c *Coordinator) outstanding() int {
	k := 0
	for i := range c.cands {
		cd := &c.cands[i]
		if cd.holdSent && !cd.holdDone {
			k++
		}
		if cd.commitSent && !cd.commitDone {
			k++
		}
		if cd.releaseSent && !cd.releaseDone {
			k++
		}
	}
	return k
}

// Done reports whether nothing more will happen: the outcome is settled and
// every action issued has been answered.
func (c *Coordinator) Done() bool {
	return !c.active() && c.outstanding() == 0
}

// Result returns the committed reservations, ordered by target, when all
// count are committed. Otherwise it returns the error that made the
// coordinator give up (a *CoordError naming the candidates that refused or
// failed and why, and any release that failed), or, before Done, an error
// wrapping ErrCoordPending.
func (c *Coordinator) Result() (committed []Granted, err error) {
	if !c.Done() {
		return nil, fmt.Errorf("%w: %d of %d held, %d committed, %d answers awaited",
			ErrCoordPending, c.granted, c.count, c.committed, c.outstanding())
	}
	if c.phase == coordSucceeded {
		for i, cd := range c.cands {
			if cd.used && cd.committed {
				committed = append(committed, Granted{Target: i, ID: cd.id})
			}
		}
		return committed, nil
	}
	return nil, c.failure()
}

func (c *Coordinator) failure() *CoordError {
	e := &CoordError{Timeout: c.fail == failTimeout}
	var parts []string
	refusals := func() {
		for i, cd := range c.cands {
			if cd.holdErr != nil {
				err := fmt.Errorf("%s refused: %w", c.name(i), cd.holdErr)
				e.Causes = append(e.Causes, err)
				parts = append(parts, err.Error())
			}
		}
	}
	switch c.fail {
	case failRefused:
		parts = append(parts, fmt.Sprintf("%d of %d held", c.heldAtFail, c.count))
		refusals()
		parts = append(parts, "no candidates left")
	case failCommit:
		cd := c.cands[c.failTarget]
		err := fmt.Errorf("commit of %s at %s failed: %w", cd.id, c.name(c.failTarget), cd.commitErr)
		e.Causes = append(e.Causes, err)
		parts = append(parts, fmt.Sprintf("%d of %d committed", c.commAtFail, c.count), err.Error())
	case failTimeout:
		var w []string
		for _, a := range c.waitingFail {
			w = append(w, fmt.Sprintf("%s from %s", a.Kind, c.name(a.Target)))
		}
		s := fmt.Sprintf("deadline %s passed with %d of %d held, %d committed",
			fmtTime(c.deadline), c.heldAtFail, c.count, c.commAtFail)
		if len(w) > 0 {
			s += " (no answer to " + strings.Join(w, ", ") + ")"
		}
		parts = append(parts, s)
		refusals()
	}
	released := 0
	for i, cd := range c.cands {
		if !cd.releaseSent {
			continue
		}
		switch code := CodeOf(cd.releaseErr); {
		case cd.releaseErr == nil, code == CodeGone, code == CodeNotFound:
			released++ // gone or unknown there: nothing is live
		default:
			left := "it lapses at its hold timeout"
			if cd.committed {
				left = "it stays until its lease ends unless renewed"
			}
			err := fmt.Errorf("release of %s at %s failed: %w (not retried: %s)", cd.id, c.name(i), cd.releaseErr, left)
			e.Causes = append(e.Causes, err)
			parts = append(parts, err.Error())
		}
	}
	if released > 0 {
		parts = append(parts, fmt.Sprintf("%d released", released))
	}
	e.msg = "co-reservation failed: " + strings.Join(parts, "; ")
	return e
}
