package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseBegin(t *testing.T) {
	now := time.Date(2026, 11, 25, 10, 30, 0, 0, time.Local)
	for _, c := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{"now", now, ""},
		{"+2h", now.Add(2 * time.Hour), ""},
		{"2026-11-26T09:00", time.Date(2026, 11, 26, 9, 0, 0, 0, time.Local), ""},
		{"2026-11-26 09:00", time.Date(2026, 11, 26, 9, 0, 0, 0, time.Local), ""},
		{"2026-11-26T09:00:00Z", time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC), ""},
		{"11:00", time.Date(2026, 11, 25, 11, 0, 0, 0, time.Local), ""},
		{"09:00", time.Date(2026, 11, 26, 9, 0, 0, 0, time.Local), ""}, // the next 09:00: tomorrow
		{"2h", time.Time{}, "is written +2h"},
		{"+-2h", time.Time{}, "after + give a duration"},
		{"tomorrow", time.Time{}, "give now, +2h"},
	} {
		got, err := parseBegin("begin", c.in, now)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, %v; want an error with %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || !got.Equal(c.want)):
			t.Errorf("%q: %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	if d, err := parseDays("7d"); err != nil || d != 7*24*time.Hour {
		t.Errorf("7d: %v %v", d, err)
	}
	if _, err := parseDays("7.5d"); err == nil {
		t.Errorf("7.5d parsed")
	}
}

// FuzzParseBegin: any text is a time or a usage error, never a panic; a
// time from "+D" is never before now.
func FuzzParseBegin(f *testing.F) {
	for _, s := range []string{"now", "+2h", "+0s", "2026-11-26T09:00", "09:00", "2h", "", "+9999999h", "24:00", "2026-02-30"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 25, 10, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseBegin("begin", s, now)
		if err == nil && strings.HasPrefix(strings.TrimSpace(s), "+") && got.Before(now) {
			t.Fatalf("%q: %v is before now", s, got)
		}
		_, _ = parseDays(s)
	})
}
