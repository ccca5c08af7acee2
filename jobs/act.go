package jobs

import (
	"fmt"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// ActKind is a kind of work the queue asks its runtime to do.
type ActKind uint8

// Kinds of Act, with the fields of Act they read and of Result they fill.
const (
	// ActMatch asks the grid for offers that meet Spec (its requirement,
	// rank, amounts) now, or, when nothing is free now or Begin is ahead,
	// for the earliest window of Lease from Begin (before the deadline);
	// the queue books the window for a job whose begin is ahead, and says
	// when it would begin for one that waits for what frees first.
	// Result: Offers, best first, and Window (zero: now); none: Why (and
	// PolicyOnly when every manager that could have offered refused the
	// user by its policy).
	ActMatch ActKind = iota + 1
	// ActReserve reserves Spec's amounts at the first of Offers that
	// takes them, committed with a lease of Lease, as RequestID (a retry
	// of the same act must reuse it: the owner then answers the same
	// reservation). Result: Attempt (peer, name, addrs, reservation,
	// lease end).
	ActReserve
	// ActStage renews Attempt's reservation for Lease, sends Spec's
	// bundle to Attempt's manager (unless it has it), installs it on
	// Attempt's reservation and puts Spec's inputs into its in dir.
	// Result: Instance. An instance of the same reservation already there
	// (a stage or start done before the submit manager restarted) is
	// answered as it is: Instance, and Status when it is not just
	// installed (it was started: it is not started again).
	ActStage
	// ActStart starts Attempt.Instance with Spec's args and env. An
	// instance already started (a retry) is not an error.
	ActStart
	// ActPoll asks Attempt's manager for Attempt.Instance's status.
	// Result: Status.
	ActPoll
	// ActFetch brings back Spec's outputs, stdout and stderr of
	// Attempt.Instance into the try's own spool (nothing is the job's
	// result yet). Result: Files (what came back), Missing (outputs the
	// program did not write).
	ActFetch
	// ActAccept makes the files ActFetch brought back for Try the job's
	// results and drops those of its other tries. Idempotent.
	ActAccept
	// ActClean stops and removes Attempt.Instance (if any) and, with
	// Release, releases Attempt.Reservation. Idempotent: what is already
	// gone is not an error.
	ActClean
	// ActForget deletes what the runtime keeps of Job (its record, its
	// spool).
	ActForget
)

func (k ActKind) String() string {
	switch k {
	case ActMatch:
		return "match"
	case ActReserve:
		return "reserve"
	case ActStage:
		return "stage"
	case ActStart:
		return "start"
	case ActPoll:
		return "poll"
	case ActFetch:
		return "fetch"
	case ActAccept:
		return "accept"
	case ActClean:
		return "clean"
	case ActForget:
		return "forget"
	}
	return fmt.Sprintf("ActKind(%d)", uint8(k))
}

// Act is one piece of work for the runtime. Every Act but ActForget is
// answered by a Result with its ID (Queue.Done); the runtime must do the
// Saves of the Ready that carried an Act before it starts the Act.
type Act struct {
	ID        uint64
	Kind      ActKind
	Job       string
	User      string
	Try       uint32
	Spec      *wire.JobSpec    // read only
	Attempt   *wire.JobAttempt // a copy
	Offers    []*wire.Offer    // ActReserve
	RequestID string           // ActReserve
	Lease     time.Duration    // ActReserve, ActStage
	Release   bool             // ActClean
	// Begin, for ActMatch, is when the job may start (zero: now); the
	// runtime looks for the earliest window from then when nothing is
	// free at once. For ActReserve it is the window's begin (zero: now).
	Begin time.Time
	// Avoid, for ActMatch, are managers the queue will not take an offer
	// from (lost there; spread siblings there): the runtime asks for that
	// many more offers.
	Avoid []string
}

// FailKind says how an Act failed, which decides what the queue does.
type FailKind uint8

const (
	// Unreachable: the manager did not answer (down, partitioned,
	// timeout). The queue tries again until the job's lost_after has
	// passed since it last heard from the manager.
	Unreachable FailKind = iota + 1
	// Gone: the reservation or the instance is no longer there (released,
	// expired, removed). The placement is given up.
	Gone
	// Refused: the manager would not take the request (not enough free,
	// busy): another offer or a later match may.
	Refused
	// Forbidden: the manager's policy or access list refuses the user.
	Forbidden
	// Broken: anything else (the bundle would not install, a local error):
	// the try failed.
	Broken
)

func (k FailKind) String() string {
	switch k {
	case Unreachable:
		return "unreachable"
	case Gone:
		return "gone"
	case Refused:
		return "refused"
	case Forbidden:
		return "forbidden"
	case Broken:
		return "broken"
	}
	return fmt.Sprintf("FailKind(%d)", uint8(k))
}

// Failure is why an Act did not succeed.
type Failure struct {
	Kind FailKind
	Msg  string
}

func (f *Failure) Error() string { return f.Msg }

// Fail makes a Failure.
func Fail(kind FailKind, format string, args ...any) *Failure {
	return &Failure{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Status is an instance's state as its manager reports it.
type Status struct {
	State      string // installed, running, paused, stopped, exited, failed, oom-killed
	Exit       string // "exit 1", "signal KILL", "oom-killed", ""
	ExitCode   int32  // with Exited
	Exited     bool   // the program ended by itself with ExitCode
	CPUSeconds float64
	MemBytes   int64
}

// Ended says whether the program is no longer running.
func (s Status) Ended() bool {
	switch s.State {
	case "exited", "failed", "oom-killed", "stopped":
		return true
	}
	return false
}

// Result is the end of an Act.
type Result struct {
	ID         uint64
	Err        *Failure
	Offers     []*wire.Offer
	Window     time.Time // ActMatch: the offers are for a window beginning then (zero: now)
	Why        string
	PolicyOnly bool
	Attempt    *wire.JobAttempt
	Instance   string
	Status     Status
	Files      []*wire.JobFile
	Missing    []string
}
