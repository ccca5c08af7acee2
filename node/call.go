package node

import (
	"fmt"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// CallKind is a kind of work the Core asks its runtime to do: the one
// way for a module to have something done outside the Core (run a
// plugin, act on applications, read the event archive; later jobs) and
// hear back. A new kind adds a constant here, a request type, a runner
// in the runtimes that serve it and an answer in unserved for those that
// do not — no new Ready field, Input kind or Core method.
type CallKind uint8

// Kinds of Call, with what Call.Req and CallDone.Result hold.
const (
	// CallPlugin runs an admin command plugin. Req: PluginCall; Result:
	// PluginResult; an error wrapping ErrPluginNotFound: no such plugin.
	CallPlugin CallKind = iota + 1
	// CallApp acts on applications. Req: AppCall; Result: *wire.AppReply,
	// or, for a call with Ended, []*wire.AppRemoval (what was removed,
	// maybe none). An *AppError gives the refusal's code.
	CallApp
	// CallArchive reads the event archive. Req: ArchiveCall; Result:
	// *wire.EventsReply. An *AppError gives the refusal's code.
	CallArchive
	// CallJob does the job queue's work (jobs.go): JobLoad, JobSave,
	// JobHas, JobBlob, JobGet, JobWhy, or a jobs.Act. Result: what each
	// names.
	CallJob

	callKinds // the number of kinds + 1: the size of tables by kind
)

func (k CallKind) String() string {
	switch k {
	case CallPlugin:
		return "plugin"
	case CallApp:
		return "app"
	case CallArchive:
		return "archive"
	case CallJob:
		return "job"
	}
	return fmt.Sprintf("CallKind(%d)", uint8(k))
}

// Call asks the runtime to do work of a Kind (Ready.Calls). A Call with an
// ID is answered: the runtime reports its end with the Input Done makes
// (InputCallDone), which the Core routes to the module that made the
// call. A Call without an ID (0) is only told: nothing is reported.
type Call struct {
	ID   uint64 // unique per Kind among the calls waiting for an answer
	Kind CallKind
	Req  any // the request; its type depends on Kind
}

// CallDone is the end of a Call: its Result (its type depends on Kind),
// or Err.
type CallDone struct {
	ID     uint64
	Kind   CallKind
	Result any
	Err    error
}

// Done is the Input that reports the end of call: result, or err.
func (c Call) Done(result any, err error) Input {
	return Input{Kind: InputCallDone, Done: CallDone{ID: c.ID, Kind: c.Kind, Result: result, Err: err}}
}

// Runner does one kind of Call for an Applier (Applier.SetRunner). Run
// must return at once; it reports each call with an ID, from any
// goroutine, as call.Done(…) through the runtime's inbox.
type Runner interface {
	Run(call Call)
}

// PluginResult is what a plugin that ran left: its standard output and
// exit code.
type PluginResult struct {
	Output   string
	ExitCode int
}

// unserved is the answer to a call of kind when the runtime has no runner
// for it.
func unserved(kind CallKind) error {
	switch kind {
	case CallPlugin:
		return fmt.Errorf("%w: this manager runs no plugins", ErrPluginNotFound)
	case CallApp:
		return AppErrorf(wire.ErrorReply_CODE_UNSUPPORTED, "%s", noAppsMsg)
	case CallArchive:
		return AppErrorf(wire.ErrorReply_CODE_UNAVAILABLE,
			"this manager keeps no event archive (its properties file has no [archive] enabled = true)")
	case CallJob:
		return errNoJobs
	}
	return AppErrorf(wire.ErrorReply_CODE_UNSUPPORTED, "this manager does not serve %s calls", kind)
}

// call asks the runtime for work of kind (id 0: no answer wanted); the
// answer comes back through CallDone to the module that owns kind.
func (c *Core) call(kind CallKind, id uint64, req any) {
	c.rd.Calls = append(c.rd.Calls, Call{ID: id, Kind: kind, Req: req})
}

// CallDone reports the end of a Call (Ready.Calls): the Core hands it to
// the module that made the call. An unknown or already answered call is
// ignored.
func (c *Core) CallDone(now time.Time, d CallDone) {
	c.dl.ok = false // see NextDeadline
	c.now = now
	if d.Kind < callKinds && c.callers[d.Kind] != nil {
		c.callers[d.Kind](now, d)
	}
}
