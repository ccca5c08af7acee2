package render

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

// EventKind is the word of an event kind: "relation", "utilization".
func EventKind(k wire.EventKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "EVENT_KIND_"))
}

// Event is one monitoring event on one line: time (local, to the
// millisecond), producer, kind/type, and what it is about.
//
//	09:14:03.120 gm160  relation/down gm154 (superior): channel lost
func Event(ev *wire.Event) string {
	t := time.UnixMilli(ev.TimeUnixMs).Format("2006-01-02 15:04:05.000")
	s := fmt.Sprintf("%s %-8s %s/%s", t, ev.Manager, EventKind(ev.Kind), ev.Type)
	switch b := ev.Body.(type) {
	case *wire.Event_Relation:
		r := b.Relation
		s += fmt.Sprintf(" %s (%s)", nameOr(r.Name, r.Peer), strings.ToLower(strings.TrimPrefix(r.Role.String(), "ROLE_")))
		if r.Cause != "" {
			s += ": " + OneLine(r.Cause)
		}
	case *wire.Event_Reservation:
		r := b.Reservation
		if r.Id != "" {
			s += " " + r.Id
		}
		if len(r.Amounts) > 0 {
			s += " " + Amounts(r.Amounts)
		}
		who := r.User
		if who == "" {
			who = text.ShortPeer(r.HolderPeer)
		}
		if who != "" {
			s += " for " + who
		}
		if r.Window {
			s += ", window " + Window(&wire.Reservation{StartUnixMs: r.StartUnixMs, EndUnixMs: r.EndUnixMs}, time.UnixMilli(ev.TimeUnixMs))
		}
		if r.Reason != "" && (ev.Type == "refused" || ev.Type == "expired") {
			s += ": " + OneLine(Message(r.Reason, time.UnixMilli(ev.TimeUnixMs)))
		}
	case *wire.Event_App:
		a := b.App
		s += " " + a.Instance
		if a.State != ev.Type {
			s += " " + a.State
		}
		if a.CpuSeconds > 0 || a.MemBytes > 0 {
			s += fmt.Sprintf(" (cpu %.1fs, mem %s)", a.CpuSeconds, Bytes(uint64(max(a.MemBytes, 0))))
		}
		if a.Detail != "" {
			s += ": " + OneLine(a.Detail)
		}
	case *wire.Event_Admin:
		a := b.Admin
		res := "ok"
		if !a.Ok {
			res = "refused"
		}
		s += fmt.Sprintf(" %q by %s: %s", a.Command, text.ShortPeer(a.Author), res)
		if !a.Ok && a.Detail != "" {
			s += " (" + OneLine(a.Detail) + ")"
		}
	case *wire.Event_Job:
		s += " " + Job(ev.Type, b.Job)
	case *wire.Event_Utilization:
		u := b.Utilization
		util := "?"
		if u.CpuUtil >= 0 {
			util = fmt.Sprintf("%.0f%%", 100*u.CpuUtil)
		}
		s += fmt.Sprintf(" cpu %s, free %s, %d reservations, %d/%d apps running; subtree %d managers, free %s",
			util, Amounts(u.Free), u.Reservations, u.Running, u.Instances, u.SubtreeManagers, Amounts(u.SubtreeFree))
	}
	if ev.TraceId != "" {
		s += " [trace " + ev.TraceId + "]"
	}
	return s
}

// JobState is a job state's word, as jobs.StateName gives it: "idle",
// "staging-out".
func JobState(s wire.JobState) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATE_")), "_", "-")
}

// jobImplied is the state a job event's type leaves the job in when
// saying it would repeat the type.
var jobImplied = map[string]string{"started": "running", "submitted": "idle", "unheld": "idle"}

// Job is what a job event says after its kind and type: the job, its try
// and where it runs, its user, its state if the type does not say it,
// and the log line's detail unless it repeats them.
//
//	gm152.17[3] try 1 at gm160 for alice
//	gm152.17[3] try 1 at gm160 for alice, now staging-out: exit 1
//	gm152.17[5] try 2 at gm162 for alice: try 2 failed (exit 3); retries spent
//	gm160.4[2] (node left of gm160.2) try 1 at gm152 for alice
func Job(typ string, j *wire.JobChange) string {
	j = &wire.JobChange{Id: plain(j.Id), User: plain(j.User), State: j.State, Manager: plain(j.Manager), Try: j.Try, Detail: plain(j.Detail), ExitCode: j.ExitCode,
		Dag: plain(j.Dag), Node: plain(j.Node)}
	s := j.Id
	if j.Node != "" && j.Dag != "" && j.Dag != j.Id {
		s += fmt.Sprintf(" (node %s of %s)", j.Node, j.Dag)
	}
	if j.Try > 0 {
		s += fmt.Sprintf(" try %d", j.Try)
	}
	if j.Manager != "" {
		s += " at " + j.Manager
	}
	if j.User != "" {
		s += " for " + j.User
	}
	if st := JobState(j.State); j.State != wire.JobState_JOB_STATE_UNSPECIFIED && st != typ && jobImplied[typ] != st {
		s += ", now " + st
	}
	switch d := j.Detail; {
	case d != "" && d != fmt.Sprintf("try %d at %s", j.Try, j.Manager) && d != "by "+j.User:
		s += ": " + OneLine(d)
	case d == "" && j.ExitCode != 0:
		s += fmt.Sprintf(" (exit code %d)", j.ExitCode)
	}
	return s
}

// plain is user text for a terminal: a line break a space, any other
// control character (an escape sequence's ESC) a '?'.
func plain(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return ' '
		case unicode.IsControl(r):
			return '?'
		}
		return r
	}, s)
}

func nameOr(name, peer string) string {
	if name != "" {
		return name
	}
	return text.ShortPeer(peer)
}
