package main

import (
	"strings"
	"testing"
	"time"
)

// parseTime reads every time flag: ahead (--begin, --from, --to) and back
// (--since, --until) differ only in what a bare duration and a clock time
// mean.
func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 30, 0, 0, time.Local)
	const day = 24 * time.Hour
	for _, c := range []struct {
		in    string
		ahead bool
		want  time.Time
		err   string
	}{
		{"", true, time.Time{}, ""},
		{"now", true, now, ""},
		{" now ", true, now, ""},
		{"+2h", true, now.Add(2 * time.Hour), ""},
		{"+100d", true, now.Add(100 * day), ""},
		{"+1d12h", true, now.Add(36 * time.Hour), ""},
		{"+1.5d", true, now.Add(36 * time.Hour), ""},
		{"+0s", true, now, ""},
		{"-1h", true, now.Add(-time.Hour), ""},
		{"2026-11-26T09:00", true, time.Date(2026, 11, 26, 9, 0, 0, 0, time.Local), ""},
		{"2026-11-26T09:00:30", true, time.Date(2026, 11, 26, 9, 0, 30, 0, time.Local), ""},
		{"2026-11-26 09:00", true, time.Date(2026, 11, 26, 9, 0, 0, 0, time.Local), ""},
		{"2026-11-26", true, time.Date(2026, 11, 26, 0, 0, 0, 0, time.Local), ""},
		{"2026-11-26T09:00:00Z", true, time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC), ""},
		{"2026-11-26T09:00:00+01:00", true, time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC), ""},
		{"11:00", true, time.Date(2026, 11, 25, 11, 0, 0, 0, time.Local), ""},
		{"09:00", true, time.Date(2026, 11, 26, 9, 0, 0, 0, time.Local), ""}, // the next 09:00: tomorrow
		{"10:30", true, time.Date(2026, 11, 26, 10, 30, 0, 0, time.Local), ""},
		{"11:00:30", true, time.Date(2026, 11, 25, 11, 0, 30, 0, time.Local), ""},
		{"2h", true, time.Time{}, "a time ahead is written +2h (from now)"},
		{"7d", true, time.Time{}, "a time ahead is written +7d (from now)"},
		{"+-2h", true, time.Time{}, "after + give a duration, such as +2h or +3d"},
		{"+2x", true, time.Time{}, "after + give a duration"},
		{"+", true, time.Time{}, "after + give a duration"},
		{"-", true, time.Time{}, "after - give a duration"},
		{"tomorrow", true, time.Time{}, "give now, +2h or +3d (from now)"},
		{"2026-02-30", true, time.Time{}, "give now"},
		{"24:00", true, time.Time{}, "give now"},

		{"1h", false, now.Add(-time.Hour), ""},
		{"2d", false, now.Add(-2 * day), ""},
		{"1d12h", false, now.Add(-36 * time.Hour), ""},
		{"-30m", false, now.Add(-30 * time.Minute), ""},
		{"now", false, now, ""},
		{"2026-11-23T09:00", false, time.Date(2026, 11, 23, 9, 0, 0, 0, time.Local), ""},
		{"09:00", false, time.Date(2026, 11, 25, 9, 0, 0, 0, time.Local), ""},
		{"15:04", false, time.Date(2026, 11, 24, 15, 4, 0, 0, time.Local), ""}, // the last 15:04: yesterday's
		{"1x", false, time.Time{}, "give 1h or 2d (ago)"},
		{"yesterday", false, time.Time{}, "give 1h or 2d (ago)"},
	} {
		got, err := parseTime(c.in, now, c.ahead)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q (ahead %v): %v, %v; want an error with %q", c.in, c.ahead, got, err, c.err)
		case c.err == "" && (err != nil || !got.Equal(c.want)):
			t.Errorf("%q (ahead %v): %v, %v; want %v", c.in, c.ahead, got, err, c.want)
		}
	}
}

// FuzzParseBegin: any text is a time or an error in words, never a
// panic, in either direction; a time from "+D" is never before now nor
// one from "-D" after it; a clock time ahead is after now and one back
// not; what a time flag accepts as it is parsed it reads the same later.
func FuzzParseBegin(f *testing.F) {
	for _, s := range []string{"now", "+2h", "+0s", "2026-11-26T09:00", "09:00", "2h", "", "+9999999h", "24:00", "2026-02-30",
		"+100d", "-1d12h", "+106751d", "7d", "15:04:05", "+1.5d", "-"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 25, 10, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		for _, ahead := range []bool{true, false} {
			got, err := parseTime(s, now, ahead)
			if err != nil {
				if strings.Contains(err.Error(), "time:") {
					t.Fatalf("%q: Go's own error reaches the user: %v", s, err)
				}
				continue
			}
			trimmed := strings.TrimSpace(s)
			if strings.HasPrefix(trimmed, "+") && got.Before(now) {
				t.Fatalf("%q: %v is before now", s, got)
			}
			if strings.HasPrefix(trimmed, "-") && got.After(now) {
				t.Fatalf("%q: %v is after now", s, got)
			}
			if _, clock, ok := parseWhen(trimmed, now); ok && clock && ahead == !got.After(now) {
				t.Fatalf("%q (ahead %v): clock time %v on the wrong side of now", s, ahead, got)
			}
			f := &timeFlag{ahead: ahead}
			if err := f.Set(s); err != nil {
				t.Fatalf("%q: parses, but the flag refuses it: %v", s, err)
			}
			if again, err := f.at("begin", now); err != nil || !again.Equal(got) {
				t.Fatalf("%q: the flag reads %v, %v; parseTime %v", s, again, err, got)
			}
		}
	})
}
