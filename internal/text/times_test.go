package text

import (
	"testing"
	"time"
)

func TestMessageTimes(t *testing.T) {
	at := time.Date(2026, 11, 25, 15, 9, 24, 0, time.FixedZone("CET", 3600))
	if got := MessageTime(at); got != "2026-11-25T14:09:24Z" {
		t.Fatalf("MessageTime = %q", got)
	}
	show := func(t, prev time.Time) string {
		if prev.IsZero() {
			return "<" + t.Format("15:04") + ">"
		}
		return "<" + t.Format("15:04") + " after " + prev.Format("15:04") + ">"
	}
	for _, tc := range []struct{ in, want string }{
		{"no time here", "no time here"},
		{"not enough free from 2026-11-25T15:09:24Z to 2026-11-25T17:09:24Z (cpus: asked 16)",
			"not enough free from <15:09> to <17:09 after 15:09> (cpus: asked 16)"},
		{"the window 2026-11-25T15:09:24Z–2026-11-25T17:09:24Z is already over", "the window <15:09>–<17:09 after 15:09> is already over"},
		{"lapses at 2026-11-25T15:09:24Z.", "lapses at <15:09>."},
		{"ended at 2026-11-25T15:09:24Z, and 2026-11-25T16:00:00Z", "ended at <15:09>, and <16:00>"},
		// Not written by MessageTime: left alone.
		{`bad expression: timestamp("2026-11-25T15:09:24Z") < now`, `bad expression: timestamp("2026-11-25T15:09:24Z") < now`},
		{"'2026-11-25T15:09:24Z'", "'2026-11-25T15:09:24Z'"},
		{"x2026-11-25T15:09:24Z", "x2026-11-25T15:09:24Z"},
		{"2026-11-25T15:09:24Zulu", "2026-11-25T15:09:24Zulu"},
		{"12026-11-25T15:09:24Z", "12026-11-25T15:09:24Z"},
		{"2026-11-25T15:09:24.5Z", "2026-11-25T15:09:24.5Z"},
		{"2026-11-25T15:09:24+01:00", "2026-11-25T15:09:24+01:00"},
		{"2026-13-45T99:09:24Z", "2026-13-45T99:09:24Z"},
		// A time after one left alone is not its span's end.
		{`"2026-11-25T15:09:24Z" to 2026-11-25T16:00:00Z`, `"2026-11-25T15:09:24Z" to <16:00>`},
	} {
		if got := MessageTimes(tc.in, show); got != tc.want {
			t.Errorf("MessageTimes(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
}
