package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestDurationFlag(t *testing.T) {
	const day = 24 * time.Hour
	for _, tc := range []struct {
		in     string
		lo, hi time.Duration
		want   time.Duration
		err    string
	}{
		{"5s", positive, 0, 5 * time.Second, ""},
		{"30d", positive, 0, 30 * day, ""},
		{"1d12h", positive, 0, 36 * time.Hour, ""},
		{"90d", positive, 90 * day, 90 * day, ""},
		{"0s", 0, 0, 0, ""},
		{"0s", positive, 0, 0, "must be positive"},
		{"-5s", positive, 0, 0, "must be positive"},
		{"-1m", 0, 0, 0, "must not be negative"},
		{"91d", positive, 90 * day, 0, "at most 90d"},
		{"2h", 0, time.Hour, 0, "at most 1h"},
		{"500ms", time.Second, 0, 0, "at least 1s"},
		{"5", positive, 0, 0, "missing unit: want a duration such as 500ms, 5s, 2m, 1h30m or 7d"},
		{"5x", positive, 0, 0, `unknown unit "x"`},
	} {
		d := time.Duration(-1)
		f := &durationFlag{d: &d, lo: tc.lo, hi: tc.hi}
		err := f.Set(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q in [%v, %v]: %v, %v; want an error with %q", tc.in, tc.lo, tc.hi, d, err, tc.err)
		case tc.err != "" && d != -1:
			t.Errorf("%q: refused, yet set to %v", tc.in, d)
		case tc.err == "" && (err != nil || d != tc.want):
			t.Errorf("%q in [%v, %v]: %v, %v; want %v", tc.in, tc.lo, tc.hi, d, err, tc.want)
		}
	}
}

func TestCountFlag(t *testing.T) {
	for _, tc := range []struct {
		in     string
		lo, hi int64
		want   int64
		err    string
	}{
		{"10", 1, 1000, 10, ""},
		{"1k", 1, 1000, 1000, ""},
		{"10k", 1, 2_000_000, 10_000, ""},
		{"1.5M", 1, 2_000_000, 1_500_000, ""},
		{"10_000", 1, 2_000_000, 10_000, ""},
		{"0", 0, 255, 0, ""},
		{"0", 1, 1000, 0, "out of range: want 1 to 1000"},
		{"-1", 0, 1000, 0, "out of range: want 0 to 1000"},
		{"1001", 1, 1000, 0, "out of range: want 1 to 1000"},
		{"99999999999", 1, 1000, 0, "out of range: want 1 to 1000"},
		{"99999999999999999999", 1, 1000, 0, "out of range: want 1 to 1000"},
		{"3M", 1, 2_000_000, 0, "out of range: want 1 to 2M (k: thousands, M: millions)"},
		{"x", 1, 1000, 0, "not a whole number: want 1 to 1000"},
		{"1.5", 1, 1000, 0, "not a whole number: want 1 to 1000"},
		{"10m", 1, 2_000_000, 0, `unknown suffix "m" (k: thousands, M: millions): want 1 to 2M`},
	} {
		n := int64(-7)
		f := &countFlag[int64]{n: &n, lo: tc.lo, hi: tc.hi}
		err := f.Set(tc.in)
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err && !strings.HasPrefix(err.Error(), tc.err)):
			t.Errorf("%q in [%d, %d]: %d, %v; want the error %q", tc.in, tc.lo, tc.hi, n, err, tc.err)
		case tc.err != "" && n != -7:
			t.Errorf("%q: refused, yet set to %d", tc.in, n)
		case tc.err == "" && (err != nil || n != tc.want):
			t.Errorf("%q in [%d, %d]: %d, %v; want %d", tc.in, tc.lo, tc.hi, n, err, tc.want)
		}
	}
	// Other integer types hold the same.
	var u uint
	if err := (&countFlag[uint]{n: &u, lo: 1, hi: 1000}).Set("1k"); err != nil || u != 1000 {
		t.Errorf("uint: %d, %v", u, err)
	}
}

// Every duration, time and count flag of every command reads its value
// with the one parser of its kind, checks its bounds as it is parsed
// (before any manager is asked), and a bad value is a usage error, exit
// 2, one line that names the flag and the value.
func TestBadFlagValues(t *testing.T) {
	t.Setenv("GRIDMGR_CLIENT_KEY", t.TempDir()+"/client.key")
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Durations: Go's units and days everywhere; negative or zero
		// refused where they mean nothing.
		{[]string{"query", "--duration", "0s", "true"}, `--duration "0s": must be positive`},
		{[]string{"reserve", "--duration", "-2h", "--cpus", "1"}, `--duration "-2h": must be positive`},
		{[]string{"tree", "--timeout", "-5s"}, `--timeout "-5s": must be positive`},
		{[]string{"status", "--timeout", "0"}, `--timeout "0": must be positive`},
		{[]string{"query", "--timeout", "5", "true"}, `--timeout "5": missing unit: want a duration such as 500ms, 5s, 2m, 1h30m or 7d`},
		{[]string{"query", "--horizon", "91d", "true"}, `--horizon "91d": at most 90d`},
		{[]string{"query", "--horizon", "0s", "true"}, `--horizon "0s": must be positive`},
		{[]string{"reserve", "--lease", "-1m", "--cpus", "1"}, `--lease "-1m": must not be negative`},
		{[]string{"reserve", "--hold", "1x", "--cpus", "1"}, `--hold "1x": unknown unit "x"`},
		{[]string{"renew", "--lease", "-1s", "a-1-x"}, `--lease "-1s": must not be negative`},
		{[]string{"demo", "--heartbeat", "0s"}, `--heartbeat "0s": must be positive`},
		{[]string{"demo", "--timeout", "-1s"}, `--timeout "-1s": must be positive`},
		{[]string{"sim", "--rest", "2h"}, `--rest "2h": at most 1h`},
		{[]string{"app", "status", "--timeout", "-5s", "a-1-x.app"}, `--timeout "-5s": must be positive`},
		// Times: one parser, ahead (--begin, --from, --to) or back
		// (--since, --until).
		{[]string{"query", "--begin", "2h", "--duration", "1h", "true"}, `--begin "2h": a time ahead is written +2h (from now)`},
		{[]string{"reserve", "--begin", "+-2h", "--duration", "1h", "--cpus", "1"}, `--begin "+-2h": after + give a duration`},
		{[]string{"calendar", "--from", "tomorrow"}, `--from "tomorrow": give now, +2h or +3d (from now)`},
		{[]string{"calendar", "--to", "+2x"}, `--to "+2x": after + give a duration`},
		{[]string{"events", "--since", "2x"}, `--since "2x": give 1h or 2d (ago)`},
		{[]string{"events", "--until", "soon"}, `--until "soon": give 1h or 2d (ago)`},
		// Counts: k and M everywhere, bounds said.
		{[]string{"query", "--want", "99999999999", "true"}, `--want "99999999999": out of range: want 1 to 1000`},
		{[]string{"query", "--want", "0", "true"}, `--want "0": out of range: want 1 to 1000`},
		{[]string{"query", "--limit", "-1", "true"}, `--limit "-1": out of range: want 1 to 1000`},
		{[]string{"query", "--cpus", "100k", "true"}, `--cpus "100k": out of range: want 0 to 65536 (k: thousands, M: millions)`},
		{[]string{"reserve", "--count", "501", "--all", "true", "--cpus", "1"}, `--count "501": out of range: want 1 to 500`},
		{[]string{"reserve", "--cpus", "-1"}, `--cpus "-1": out of range: want 0 to 65536`},
		{[]string{"reserve", "--token", "gpus=0"}, `--token "gpus=0": "0": the amount must be a whole number from 1 to 1099511627776`},
		{[]string{"reserve", "--token", "gpus=2T"}, `--token "gpus=2T": "2T": the amount must be a whole number`},
		{[]string{"tree", "--depth", "300"}, `--depth "300": out of range: want 0 to 256`},
		{[]string{"status", "--events", "2k"}, `--events "2k": out of range: want 0 to 1000`},
		{[]string{"ping", "--count", "0"}, `--count "0": out of range: want 1 to 1000`},
		{[]string{"watch", "--count", "-1"}, `--count "-1": out of range: want 0 to 1M`},
		{[]string{"events", "--limit", "10001"}, `--limit "10001": out of range: want 1 to 10k`},
		{[]string{"app", "logs", "--tail", "-1", "a-1-x.app"}, `--tail "-1": out of range: want 0 to 100k`},
		{[]string{"sim", "--managers", "3M"}, `--managers "3M": out of range: want 1 to 1M`},
		{[]string{"sim", "--managers", "ten"}, `--managers "ten": not a whole number: want 1 to 1M`},
		{[]string{"sim", "--fanout", "0"}, `--fanout "0": out of range: want 1 to 10k`},
		{[]string{"sim", "--regions", "1k"}, `--regions "1k": out of range: want 1 to 100`},
	} {
		cmd, sub := tc.args[0], tc.args[0]
		if cmd == "app" {
			cmd = "app " + tc.args[1] // each app subcommand's errors name it
			sub = cmd
		}
		code, out, stderr := run(t, tc.args...)
		first, rest, _ := strings.Cut(stderr, "\n")
		if code != exitUsage || out != "" || !strings.HasPrefix(first, "gridmgr "+cmd+": "+tc.want) ||
			rest != "Run 'gridmgr "+sub+" -h' to see its usage and flags.\n" {
			t.Errorf("%v: exit %d, want 2 and\n  gridmgr %s: %s\ngot stdout %q, stderr\n%s", tc.args, code, cmd, tc.want, out, stderr)
		}
	}
}

// What the user found refused is accepted: d for every duration and every
// time ahead, k and M for every count. Without a manager to ask, each of
// these stops at "which manager?", after its flags were read.
func TestGoodFlagValues(t *testing.T) {
	t.Setenv("GRIDMGR_CLIENT_KEY", t.TempDir()+"/client.key")
	for _, args := range [][]string{
		{"query", "--horizon", "14d", "--earliest", "--duration", "30d", "--cpus", "1", "true"},
		{"query", "--begin", "+100d", "--duration", "1d12h", "--want", "1k", "--limit", "1k", "true"},
		{"reserve", "--begin", "+1.5d", "--duration", "30d", "--cpus", "1k", "--token", "licenses=10k"},
		{"reserve", "--all", "true", "--count", "500", "--cpus", "1", "--lease", "7d", "--hold", "0s"},
		{"calendar", "--from", "+2d", "--to", "+1d12h"},
		{"calendar", "--from", "-1d", "--to", "now"},
		{"events", "--since", "2d", "--until", "-1h", "--limit", "10k"},
		{"events", "--since", "2026-11-23T09:00", "--until", "15:04"},
		{"tree", "--timeout", "1d", "--depth", "256"},
		{"watch", "--count", "1M"},
		{"ping", "--count", "1k"},
	} {
		code, _, stderr := run(t, args...)
		if code != exitUsage || !strings.Contains(stderr, "which manager?") {
			t.Errorf("%v: exit %d; want its flags accepted and the target asked for:\n%s", args, code, stderr)
		}
	}
	// sim: --managers 10k is read (and then conflicts with the sweep,
	// before anything runs).
	code, _, stderr := run(t, "sim", "--managers", "10k", "--sweep", "managers=1k,10k")
	if code != exitUsage || !strings.Contains(stderr, "--managers and --sweep managers=… both set") {
		t.Errorf("sim --managers 10k: exit %d\n%s", code, stderr)
	}
}

// An earliest search that finds no window says so, alone, and fails
// (exit 1); one that finds a window shows it and how to book it.
func TestEarliestNoWindowExit1(t *testing.T) {
	a, _ := startPair(t, "")
	at := a.Addr()
	code, out, stderr := run(t, "query", "-n", at, "true", "--earliest", "--cpus", "64", "--duration", "1h", "--horizon", "2d")
	if code != exitFailure || out != "" || strings.Count(stderr, "\n") != 1 ||
		!strings.HasPrefix(stderr, "gridmgr query: no window of 1h in which 1 manager(s) have it free begins between ") ||
		!strings.HasSuffix(stderr, " (--horizon 2d); 2 manager(s) searched\n") {
		t.Errorf("no window: exit %d, want 1 and the message alone\nstdout %q\nstderr %q", code, out, stderr)
	}
	code, out, stderr = run(t, "query", "-n", at, "true", "--earliest", "--cpus", "64", "--duration", "1h", "--json")
	var rep struct {
		Earliest struct{ Found bool }
	}
	if code != exitFailure || stderr != "" || json.Unmarshal([]byte(out), &rep) != nil || rep.Earliest.Found {
		t.Errorf("no window, --json: exit %d, want 1 and the reply\nstdout %s\nstderr %s", code, out, stderr)
	}
	code, out, stderr = run(t, "query", "-n", at, "true", "--earliest", "--cpus", "4", "--duration", "1h", "--want", "2")
	if code != 0 || !strings.HasPrefix(out, "earliest window: ") || !strings.Contains(out, "--count 2 --cpus 4 --begin ") ||
		!strings.Contains(out, " --duration 1h\n") {
		t.Errorf("a window: exit %d\n%s\n%s", code, out, stderr)
	}
}

// A refusal and a listing name the same window in the same form: the
// manager's message (RFC 3339 in UTC on the wire) is shown as the
// listings show times, local, never as RFC 3339. It runs again in a
// process whose zone is 5h30 from UTC, where a time shown in UTC would
// not match.
func TestRefusalAndListingSameTimeForm(t *testing.T) {
	const zone = "Asia/Kolkata"
	if os.Getenv("GRIDMGR_TEST_TZ") == "" {
		if _, err := time.LoadLocation(zone); err == nil {
			cmd := exec.Command(os.Args[0], "-test.run=^TestRefusalAndListingSameTimeForm$")
			cmd.Env = append(os.Environ(), "TZ="+zone, "GRIDMGR_TEST_TZ="+zone)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("in %s: %v\n%s", zone, err, out)
			}
		} else {
			t.Logf("no zone %s on this machine (%v): local time only", zone, err)
		}
	} else if _, off := time.Now().Zone(); off != 5*3600+1800 {
		t.Fatalf("TZ=%s, yet the local offset is %ds", os.Getenv("TZ"), off)
	}
	a, b := startPair(t, "")
	begin := time.Now().Add(time.Hour).Truncate(time.Second)
	when := begin.Format("2006-01-02T15:04:05")
	reserve := []string{"reserve", "-n", a.Addr(), "--at", "b", "--cpus", "4", "--begin", when, "--duration", "2h"}
	if code, out, stderr := run(t, append(reserve, "--commit")...); code != 0 {
		t.Fatalf("reserve: exit %d\n%s\n%s", code, out, stderr)
	}
	code, listing, stderr := run(t, "reservations", "-n", b.Addr())
	window := regexp.MustCompile(`window (\S+(?: \S+ \S+)?)–(\S+(?: \S+ \S+)?) \(begins in`).FindStringSubmatch(listing)
	if code != 0 || window == nil {
		t.Fatalf("reservations: exit %d, no window listed\n%s\n%s", code, listing, stderr)
	}
	code, _, refusal := run(t, reserve...)
	if code != exitFailure || !strings.Contains(refusal, "not enough free from "+window[1]+" to "+window[2]+" ") {
		t.Errorf("the refusal does not name the window as the listing does (%s–%s): exit %d\n%s\nlisting:\n%s", window[1], window[2], code, refusal, listing)
	}
	if rfc := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d`).FindString(refusal); rfc != "" {
		t.Errorf("the refusal shows %s, RFC 3339:\n%s", rfc, refusal)
	}
	if !strings.HasPrefix(window[1], begin.Format("15:04:05")) && !strings.HasSuffix(window[1], begin.Format("15:04:05")) {
		t.Errorf("the listing shows %s for a window that begins at %s local", window[1], begin.Format("15:04:05"))
	}
	// The calendar shows the same begin, too (its end, a row of its own,
	// with its date whenever that is not today's).
	code, cal, stderr := run(t, "calendar", "-n", b.Addr(), "--kind", "cpus", "--to", "+3h")
	if code != 0 || !regexp.MustCompile(`(?m)^  \S+ +committed window  `+regexp.QuoteMeta(window[1])+`  `).MatchString(cal) {
		t.Errorf("calendar: exit %d, want the booking from %s\n%s\n%s", code, window[1], cal, stderr)
	}
}
