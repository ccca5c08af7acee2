package main

import (
	"strings"
	"testing"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/wire"
)

// Usage errors of the job subcommands exit 2 and say what to give,
// before any manager is asked.
func TestJobUsage(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"job"}, "say what to do: submit, q, why"},
		{[]string{"job", "sumbit"}, `did you mean "submit"?`},
		{[]string{"job", "-d", "x", "q"}, "name the subcommand first, then its flags: gridmgr job q -d x"},
		{[]string{"job", "submit"}, "say which job file to submit"},
		{[]string{"job", "submit", "/nonexistent/job.toml"}, "cannot read /nonexistent/job.toml"},
		{[]string{"job", "why"}, "give one job (CLUSTER[INDEX])"},
		{[]string{"job", "why", "a[1]", "b[2]"}, `unexpected argument "b[2]"`},
		{[]string{"job", "q", "gm1.2[x]"}, `"gm1.2[x]" is not a job: write CLUSTER or CLUSTER[INDEX]`},
		{[]string{"job", "hold", "-d", "x"}, "name the jobs"},
		{[]string{"job", "rm", "gm1.2[01]"}, "is not a job"},
		{[]string{"job", "log", "-f", "--json", "gm1.2"}, "-f prints lines as they come: not with --json"},
		{[]string{"job", "wait"}, "name the jobs"},
		{[]string{"job", "q", "-d", "/nonexistent"}, "-d: no manager running with data dir /nonexistent"},
	}
	for _, tc := range cases {
		code, out, errb := run(t, tc.args...)
		if code != exitUsage || !strings.Contains(errb, tc.want) {
			t.Errorf("%v: exit %d\n%s%s\nwant %q", tc.args, code, out, errb, tc.want)
		}
	}
	// Errors name the subcommand.
	if _, _, errb := run(t, "job", "why"); !strings.HasPrefix(errb, "gridmgr job why: ") {
		t.Errorf("job why: %q", errb)
	}
	// Help: every subcommand explains itself, and the list names them.
	code, out, _ := run(t, "job", "-h")
	for _, s := range jobCommands {
		if !strings.Contains(out, "  "+s.name+" ") {
			t.Errorf("job -h does not list %s", s.name)
		}
		if c, o, _ := run(t, "job", s.name, "-h"); c != 0 || !strings.HasPrefix(o, "Usage: gridmgr job "+s.name+" ") {
			t.Errorf("job %s -h: exit %d\n%s", s.name, c, o)
		}
	}
	if code != 0 {
		t.Errorf("job -h: exit %d", code)
	}
	if _, out, _ := run(t, "help"); !strings.Contains(out, "  job ") {
		t.Errorf("help does not list job:\n%s", out)
	}
}

// A bad job file is a usage error naming the file and line, before any
// manager is dialled.
func TestJobSubmitBadFile(t *testing.T) {
	dir := t.TempDir()
	f := writeFile(t, dir, "job.toml", "program = \"run\"\ncpus = \"two\"\n")
	code, _, errb := run(t, "job", "submit", "-d", t.TempDir(), f)
	// The manager is asked for first (no addr file): the target's error.
	if code != exitUsage || !strings.Contains(errb, "-d: no manager running") {
		t.Fatalf("exit %d: %s", code, errb)
	}
}

func TestRenderJobs(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	rep := &wire.JobReply{More: 3, Jobs: []*wire.JobInfo{
		{Id: "gm152.17[0]", State: wire.JobState_JOB_STATE_RUNNING, Manager: "gm160", SinceUnixMs: now.Add(-12 * time.Second).UnixMilli(), Tries: 1},
		{Id: "gm152.17[1]", State: wire.JobState_JOB_STATE_HELD, Manager: "gm162", SinceUnixMs: now.Add(-90 * time.Minute).UnixMilli(), Tries: 2,
			Exited: true, ExitCode: 1, Reason: strings.Repeat("long reason ", 20)},
		{Id: "gm152.17[2]", State: wire.JobState_JOB_STATE_STAGING_OUT, SinceUnixMs: now.Add(-2 * time.Minute).UnixMilli()},
	}}
	out := renderJobs(rep, now)
	for _, w := range []string{"JOB          STATE        WHERE  SINCE    TRIES  EXIT    REASON",
		"gm152.17[0]  running      gm160  12s ago  1      -",
		"gm152.17[1]  held         gm162  2h ago   2      exit 1  long reason",
		"gm152.17[2]  staging_out  -      2m ago", "…\n", "3 more not listed"} {
		if !strings.Contains(out, w) {
			t.Errorf("no %q in\n%s", w, out)
		}
	}
	if got := renderJobs(&wire.JobReply{}, now); got != "no jobs\n" {
		t.Errorf("empty: %q", got)
	}
}

func TestRenderSubmittedAndWhy(t *testing.T) {
	s := &client.Submitted{Cluster: "gm152.17", Count: 20, IDs: []string{"gm152.17[0]", "gm152.17[19]"}}
	if got := renderSubmitted("job.toml", s); got != "submitted job.toml as gm152.17 (20 jobs: gm152.17[0] … gm152.17[19])\n" {
		t.Errorf("%q", got)
	}
	if got := renderSubmitted("j.toml", &client.Submitted{Cluster: "gm1.2", Count: 1, IDs: []string{"gm1.2"}, Duplicate: true}); !strings.HasPrefix(got, "submitted j.toml as gm1.2; a retry") {
		t.Errorf("%q", got)
	}
	why := renderWhy("gm1.2", &wire.JobReply{
		Jobs: []*wire.JobInfo{{Id: "gm1.2", State: wire.JobState_JOB_STATE_IDLE, Reason: "no manager offers what it asks"}},
		Why: &wire.QueryReply{Visited: 6, Offers: []*wire.Offer{{Name: "gm160"}},
			Verdicts: []*wire.Verdict{{Name: "gm162", Why: "requirement", Detail: "clause `arch == \"arm64\"` false"}}},
	}, time.Now())
	for _, w := range []string{"gm1.2: idle", "no manager offers what it asks", "now 1 manager(s) would offer what it asks: gm160", "why not:", "(6 managers looked)"} {
		if !strings.Contains(why, w) {
			t.Errorf("no %q in\n%s", w, why)
		}
	}
}

func TestRenderJobLog(t *testing.T) {
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.Local).UnixMilli()
	rep := &wire.JobReply{Jobs: []*wire.JobInfo{{Id: "gm1.2", Log: []*wire.JobLogEntry{
		{TimeUnixMs: at, Type: "submitted", Detail: "by alice"},
		{TimeUnixMs: at + 1000, Type: "exited", Manager: "gm160", Try: 1, Detail: "exit 0"},
	}}}}
	shown := map[string]int{}
	out := renderJobLog(rep, shown)
	if !strings.Contains(out, "2026-05-01 10:00:00  submitted  -      by alice\n") || !strings.Contains(out, "exited     gm160  try 1 exit 0") {
		t.Errorf("%s", out)
	}
	if again := renderJobLog(rep, shown); again != "" {
		t.Errorf("shown again: %q", again)
	}
}
