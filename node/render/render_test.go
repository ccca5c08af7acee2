package render

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/wire"
)

func TestNumber(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{134217728, "134217728"}, {0, "0"}, {-3, "-3"}, {128, "128"}, {2.5, "2.5"},
		{1.0 / 3, "0.333333"}, {1e20, "1e+20"}, {-2.25e-7, "-2.25e-07"},
	} {
		if got := Number(tc.f); got != tc.want {
			t.Errorf("Number(%v) = %q, want %q", tc.f, got, tc.want)
		}
	}
	res := Resources(&wire.ResourcesReply{Values: &wire.Offer{Name: "m", NetMbps: 1e6, CpuUtil: -1}})
	if !strings.Contains(res, "net_mbps   1000000\n") {
		t.Errorf("a whole link speed prints in full:\n%s", res)
	}
}

// An ended reservation shows when it ended, not when the manager will
// forget it; a live one shows when it expires.
func TestReservationListWhen(t *testing.T) {
	now := time.Date(2025, 1, 2, 12, 10, 0, 0, time.Local)
	ms := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	out := ReservationList([]*wire.Reservation{
		{Id: "a-1-x", State: wire.ReservationState_RESERVATION_STATE_COMMITTED, ExpiresUnixMs: ms(5 * time.Minute), UpdatedUnixMs: ms(-time.Minute)},
		{Id: "a-2-x", State: wire.ReservationState_RESERVATION_STATE_RELEASED, Reason: "released by its holder",
			UpdatedUnixMs: ms(-9 * time.Minute), ExpiresUnixMs: ms(51 * time.Minute)},
		{Id: "a-3-x", State: wire.ReservationState_RESERVATION_STATE_EXPIRED, Reason: "hold timed out",
			UpdatedUnixMs: ms(-2 * time.Second), ExpiresUnixMs: ms(time.Hour)},
	}, now)
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[0], "WHEN") || strings.Contains(lines[0], "EXPIRES") {
		t.Errorf("header: %s", lines[0])
	}
	for i, want := range []string{"expires 12:15:00 (in 5m)", "ended 12:01:00 (9m ago)", "ended 12:09:58 (2s ago)"} {
		if !strings.Contains(lines[i+1], want) {
			t.Errorf("line %d lacks %q:\n%s", i+1, want, out)
		}
	}
	if strings.Contains(out, "13:") || strings.Contains(out, "in 51m") || strings.Contains(out, "in 1h") {
		t.Errorf("an ended record shows when it will be forgotten:\n%s", out)
	}
	if got := Until(now.UnixMilli(), now); got != "12:10:00 (now)" {
		t.Errorf("Until(now) = %q", got)
	}
}

// Status shows the last DefaultEvents events unless asked for more.
func TestStatusEvents(t *testing.T) {
	st := &wire.StatusReply{Name: "m"}
	for i := range 64 {
		st.Events = append(st.Events, &wire.RelationEvent{MsAgo: uint64(64-i) * 1000, Name: fmt.Sprintf("e%02d", i), What: "up"})
	}
	count := func(s string) int { return strings.Count(s, ": up\n") }
	if s := Status(st); count(s) != DefaultEvents || !strings.Contains(s, "e63: up") || strings.Contains(s, "e53: up") ||
		!strings.Contains(s, "recent events (the last 10 of 64):") {
		t.Errorf("Status shows %d events:\n%s", count(s), s)
	}
	if s := StatusEvents(st, 0, "hint"); count(s) != 64 || strings.Contains(s, "hint") {
		t.Errorf("StatusEvents(0) shows %d events:\n%s", count(s), s)
	}
	if s := StatusEvents(st, 3, "--events N shows more"); count(s) != 3 || !strings.Contains(s, "(the last 3 of 64; --events N shows more)") {
		t.Errorf("StatusEvents(3):\n%s", s)
	}
	st.Events = st.Events[:4]
	if s := Status(st); count(s) != 4 || !strings.Contains(s, "recent events:\n") {
		t.Errorf("few events are all shown:\n%s", s)
	}
}

// Every time for a person has one form, in the zone of now: the clock on
// now's day, the weekday and date before it on another; a window's end
// without its date on its begin's day; and the times a manager's message
// names (RFC 3339 in UTC) read as the listings show them.
func TestTimesOneForm(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	now := time.Date(2026, 11, 25, 10, 30, 0, 0, paris)
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{now, "10:30:00"},
		{now.Add(13*time.Hour + 29*time.Minute + 59*time.Second), "23:59:59"},
		{now.Add(13*time.Hour + 30*time.Minute), "Thu 11-26 00:00:00"},
		{now.Add(-11 * time.Hour), "Tue 11-24 23:30:00"},
		{time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC), "10:00:00"}, // shown in now's zone
		{now.AddDate(1, 0, 0), "Thu 11-25 10:30:00"},
	} {
		if got := Time(tc.t, now); got != tc.want {
			t.Errorf("Time(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
	start, end := now.Add(2*time.Hour), now.Add(4*time.Hour)
	if got := Span(start, end, now); got != "12:30:00–14:30:00" {
		t.Errorf("Span today = %q", got)
	}
	if got := Span(start.Add(24*time.Hour), end.Add(24*time.Hour), now); got != "Thu 11-26 12:30:00–14:30:00" {
		t.Errorf("Span tomorrow = %q", got)
	}
	if got := Span(start.Add(12*time.Hour), end.Add(12*time.Hour), now); got != "Thu 11-26 00:30:00–02:30:00" {
		t.Errorf("Span across midnight = %q", got)
	}
	if got := Span(now.Add(12*time.Hour), end.Add(12*time.Hour), now); got != "22:30:00–Thu 11-26 02:30:00" {
		t.Errorf("Span ending tomorrow = %q", got)
	}
	r := &wire.Reservation{StartUnixMs: start.UnixMilli(), EndUnixMs: end.UnixMilli()}
	listed := Window(r, now)
	if listed != "12:30:00–14:30:00 (begins in 2h)" {
		t.Errorf("Window = %q", listed)
	}
	refusal := Message("b: not enough free from "+text.MessageTime(start)+" to "+text.MessageTime(end)+" (cpus: asked 16, free 8 of 32)", now)
	if refusal != "b: not enough free from 12:30:00 to 14:30:00 (cpus: asked 16, free 8 of 32)" {
		t.Errorf("Message = %q", refusal)
	}
	if got := Message("the window "+text.MessageTime(start)+"–"+text.MessageTime(end)+" is already over", now); !strings.Contains(listed, strings.TrimSuffix(strings.TrimPrefix(got, "the window "), " is already over")) {
		t.Errorf("a refused window %q is not written as the listing writes it: %q", got, listed)
	}
	if got := Until(end.UnixMilli(), now); got != "14:30:00 (in 4h)" {
		t.Errorf("Until = %q", got)
	}
	if got := Until(end.Add(24*time.Hour).UnixMilli(), now); got != "Thu 11-26 14:30:00 (in 1d4h)" {
		t.Errorf("Until tomorrow = %q", got)
	}
}

// A job event is one line: the job, its try and where, its user, its
// state where the type does not say it, the detail unless it repeats
// them; user text cannot break the line or send escape sequences.
func TestJobEvent(t *testing.T) {
	at := time.Date(2026, 3, 4, 12, 0, 1, 0, time.Local)
	ev := func(typ string, j *wire.JobChange) string {
		return Event(&wire.Event{Kind: wire.EventKind_EVENT_KIND_JOB, Type: typ, Manager: "gm152", TimeUnixMs: at.UnixMilli(), Body: &wire.Event_Job{Job: j}})
	}
	const head = "2026-03-04 12:00:01.000 gm152    job/"
	for _, c := range []struct {
		typ  string
		j    *wire.JobChange
		want string
	}{
		{"submitted", &wire.JobChange{Id: "gm152.17[3]", User: "alice", State: wire.JobState_JOB_STATE_IDLE, Detail: "by alice"},
			"submitted gm152.17[3] for alice"},
		{"matched", &wire.JobChange{Id: "gm152.17[3]", User: "alice", State: wire.JobState_JOB_STATE_MATCHED, Detail: "gm160 (of 2: gm160, gm162)"},
			"matched gm152.17[3] for alice: gm160 (of 2: gm160, gm162)"},
		{"started", &wire.JobChange{Id: "gm152.17[3]", User: "alice", State: wire.JobState_JOB_STATE_RUNNING, Manager: "gm160", Try: 1, Detail: "try 1 at gm160"},
			"started gm152.17[3] try 1 at gm160 for alice"},
		{"exited", &wire.JobChange{Id: "gm152.17[3]", User: "alice", State: wire.JobState_JOB_STATE_STAGING_OUT, Manager: "gm160", Try: 1, Detail: "exit 1", ExitCode: 1},
			"exited gm152.17[3] try 1 at gm160 for alice, now staging-out: exit 1"},
		{"exited", &wire.JobChange{Id: "gm152.18", User: "bob", State: wire.JobState_JOB_STATE_STAGING_OUT, Manager: "gm162", Try: 2, ExitCode: 3},
			"exited gm152.18 try 2 at gm162 for bob, now staging-out (exit code 3)"},
		{"retried", &wire.JobChange{Id: "gm152.18", User: "bob", State: wire.JobState_JOB_STATE_IDLE, Manager: "gm162", Try: 2, Detail: "try 2 failed (exit 3); 1 of 3 retries left"},
			"retried gm152.18 try 2 at gm162 for bob, now idle: try 2 failed (exit 3); 1 of 3 retries left"},
		{"held", &wire.JobChange{Id: "gm152.19", User: "carol", State: wire.JobState_JOB_STATE_HELD, Detail: "held by 12D3…Xy9abc"},
			"held gm152.19 for carol: held by 12D3…Xy9abc"},
		{"completed", &wire.JobChange{Id: "gm152.17[3]", User: "alice", State: wire.JobState_JOB_STATE_COMPLETED, Manager: "gm160", Try: 1, Detail: "exit 0 at gm160; 3 files brought back"},
			"completed gm152.17[3] try 1 at gm160 for alice: exit 0 at gm160; 3 files brought back"},
		{"held", &wire.JobChange{Id: "gm152.20", User: "eve\x1b[2J", State: wire.JobState_JOB_STATE_HELD, Detail: "line one\nline two\x07"},
			"held gm152.20 for eve?[2J: line one line two?"},
		{"released", &wire.JobChange{Id: "gm160.4[2]", User: "alice", State: wire.JobState_JOB_STATE_IDLE, Dag: "gm160.2", Node: "left", Detail: "after prepare completed"},
			"released gm160.4[2] (node left of gm160.2) for alice, now idle: after prepare completed"},
		{"dag-failed", &wire.JobChange{Id: "gm160.2", User: "alice", Dag: "gm160.2", Detail: "workflow diamond: failed; node right failed"},
			"dag-failed gm160.2 for alice: workflow diamond: failed; node right failed"},
	} {
		if got := ev(c.typ, c.j); got != head+c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.typ, got, head+c.want)
		}
	}
	if got := JobState(wire.JobState_JOB_STATE_STAGING_OUT); got != "staging-out" {
		t.Errorf("JobState(STAGING_OUT) = %q", got)
	}
}
