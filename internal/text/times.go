package text

import (
	"regexp"
	"time"
)

// MessageTime is how a message names a time when its reader may be
// elsewhere: a manager's refusal is written where the manager runs, with
// no idea of the zone of the person who reads it. It is RFC 3339 in UTC,
// to the second: "2026-11-25T15:09:24Z". The pure core (reservation, the
// node's Core) writes every time of its messages so, and the CLI shows
// each in its own form and zone (MessageTimes), as it shows the times of
// its listings.
func MessageTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// messageTime matches what MessageTime writes.
var messageTime = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z`)

// MessageTimes returns msg with each time MessageTime wrote replaced by
// show(t, prev). prev is the time just before t when the two name a span
// ("A–B", "A to B"), so that the end may be shown relative to the
// beginning; else it is zero. A time that is part of a longer token, or
// inside quotes (an expression echoed back, timestamp("…")), is left as
// it is: it was not written by MessageTime.
func MessageTimes(msg string, show func(t, prev time.Time) string) string {
	locs := messageTime.FindAllStringIndex(msg, -1)
	if len(locs) == 0 {
		return msg
	}
	var out []byte
	last := 0
	var prev time.Time
	prevEnd := -1
	for _, l := range locs {
		s, e := l[0], l[1]
		if s > 0 && boundary(msg[s-1]) || e < len(msg) && boundary(msg[e]) {
			prevEnd = -1
			continue
		}
		t, err := time.Parse(time.RFC3339, msg[s:e])
		if err != nil { // 2026-13-45T99:…: not a time
			prevEnd = -1
			continue
		}
		before := time.Time{}
		if prevEnd >= 0 {
			switch msg[prevEnd:s] {
			case "–", "-", " – ", " to ":
				before = prev
			}
		}
		out = append(out, msg[last:s]...)
		out = append(out, show(t, before)...)
		last, prev, prevEnd = e, t, e
	}
	return string(append(out, msg[last:]...))
}

// boundary says whether c next to a time makes it part of something else:
// a letter, a digit, a quote, or more of a timestamp.
func boundary(c byte) bool {
	switch {
	case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		return true
	}
	switch c {
	case '"', '\'', '`', '_', ':', '+':
		return true
	}
	return false
}
