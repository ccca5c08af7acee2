package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/text"
)

// The values of gridmgr's flags that are durations, times and counts: each
// kind is read by one parser, so that what one flag accepts, all do (7d
// for every duration, 10k for every count), and each flag checks its
// bounds as it is parsed, before any manager is asked. A bad value is a
// usage error (exit 2) that names the flag and the value.

// positive is the least duration of the flags for which zero or less
// means nothing (--timeout, --duration).
const positive = time.Nanosecond

// durationFlag is a duration flag: Go's units and days (text.ParseDuration)
// within [lo, hi] (hi 0: no upper bound).
type durationFlag struct {
	d      *time.Duration
	lo, hi time.Duration
}

func (f *durationFlag) String() string {
	if f.d == nil {
		return text.FormatDuration(0)
	}
	return text.FormatDuration(*f.d)
}

func (f *durationFlag) Set(s string) error {
	d, err := text.ParseDuration(s)
	if err != nil {
		return err
	}
	switch {
	case d < f.lo && f.lo == positive:
		return errors.New("must be positive")
	case d < f.lo && f.lo == 0:
		return errors.New("must not be negative")
	case d < f.lo:
		return fmt.Errorf("at least %s", text.FormatDuration(f.lo))
	case f.hi > 0 && d > f.hi:
		return fmt.Errorf("at most %s", text.FormatDuration(f.hi))
	}
	*f.d = d
	return nil
}

func (f *durationFlag) metavar() string { return "DURATION" }

// duration defines a duration flag within [lo, hi] (hi 0: none).
func (fs *flagSet) duration(name string, def, lo, hi time.Duration, usage string) *time.Duration {
	d := def
	fs.Var(&durationFlag{d: &d, lo: lo, hi: hi}, name, usage)
	return &d
}

// countFlag is a count flag: a whole number, 10k or 2M (text.ParseCount),
// within [lo, hi].
type countFlag[T ~int | ~int64 | ~uint] struct {
	n      *T
	lo, hi int64
}

func (f *countFlag[T]) String() string {
	if f.n == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*f.n), 10)
}

func (f *countFlag[T]) Set(s string) error {
	n, err := text.ParseCount(s)
	switch {
	case errors.Is(err, text.ErrTooLarge), err == nil && (n < f.lo || n > f.hi):
		return fmt.Errorf("out of range: want %s", countRange(f.lo, f.hi))
	case err != nil:
		return fmt.Errorf("%v: want %s", err, countRange(f.lo, f.hi))
	}
	*f.n = T(n)
	return nil
}

func (f *countFlag[T]) metavar() string { return "N" }

// countRange says a count's bounds: "1 to 1000", "1 to 2M (k: thousands,
// M: millions)".
func countRange(lo, hi int64) string {
	s := text.FormatCount(lo) + " to " + text.FormatCount(hi)
	if hi >= 10_000 {
		s += " (k: thousands, M: millions)"
	}
	return s
}

// countVar defines a count flag within [lo, hi]; its usage says the bounds.
// The default may lie outside them when it means "not given".
func countVar[T ~int | ~int64 | ~uint](fs *flagSet, name string, def T, lo, hi int64, usage string) *T {
	n := def
	fs.Var(&countFlag[T]{n: &n, lo: lo, hi: hi}, name, fmt.Sprintf("%s; %s to %s", usage, text.FormatCount(lo), text.FormatCount(hi)))
	return &n
}

// timeFlag is a time flag (--begin, --from, --to, --since, --until): its
// text, checked as it is parsed and read against the command's now with
// at. ahead says how a bare duration and a clock time read: ahead (a
// window to book) or back (events archived).
type timeFlag struct {
	s     string
	ahead bool
}

func (f *timeFlag) String() string { return f.s }

func (f *timeFlag) Set(s string) error {
	if _, err := parseTime(s, time.Now(), f.ahead); err != nil {
		return err
	}
	f.s = s
	return nil
}

func (f *timeFlag) metavar() string { return "WHEN" }

// at is the time the flag names, seen from now (zero: not given).
func (f *timeFlag) at(name string, now time.Time) (time.Time, error) {
	t, err := parseTime(f.s, now, f.ahead)
	if err != nil {
		return time.Time{}, usageErr("--%s %q: %v", name, f.s, err)
	}
	return t, nil
}

// when defines a time flag.
func (fs *flagSet) when(name, def string, ahead bool, usage string) *timeFlag {
	f := &timeFlag{s: def, ahead: ahead}
	fs.Var(f, name, usage)
	return f
}

// aheadForms and backForms say which forms the time flags accept.
const (
	aheadForms = "now, +2h or +3d (from now), -1h (ago), 2026-11-23T09:00 or 2026-11-23 09:00 (local time), RFC 3339, or 09:00 (the next 09:00)"
	backForms  = "1h or 2d (ago), now, 2026-11-23T09:00 or 2026-11-23 09:00 (local time), RFC 3339, or 15:04 (the last 15:04)"
)

// parseTime reads every time flag of the CLI: "now"; "+D" (D from now) or
// "-D" (D ago), D any duration text.ParseDuration reads (2h, 3d, 1d12h); a
// date and time, local unless it names its zone; or a clock time, the
// next one to come (ahead) or the last one past (back). A bare duration
// is D ago back, and a mistake ahead (a time ahead is written +D). ""
// is the zero time: not given. Its errors do not name the flag.
func parseTime(s string, now time.Time, ahead bool) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return time.Time{}, nil
	case s == "now":
		return now, nil
	case s[0] == '+' || s[0] == '-':
		d, err := text.ParseDuration(s[1:])
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("after %c give a duration, such as %c2h or %c3d", s[0], s[0], s[0])
		}
		if s[0] == '-' {
			return now.Add(-d), nil
		}
		return now.Add(d), nil
	}
	if t, clock, ok := parseWhen(s, now); ok {
		switch {
		case clock && ahead && !t.After(now):
			t = t.AddDate(0, 0, 1) // the next one to come
		case clock && !ahead && t.After(now):
			t = t.AddDate(0, 0, -1) // the last one past
		}
		return t, nil
	}
	if d, err := text.ParseDuration(s); err == nil {
		if ahead {
			return time.Time{}, fmt.Errorf("a time ahead is written +%s (from now)", s)
		}
		return now.Add(-d), nil
	}
	if ahead {
		return time.Time{}, errors.New("give " + aheadForms)
	}
	return time.Time{}, errors.New("give " + backForms)
}

// parseWhen reads a date and time (local unless it names its zone), or a
// clock time such as 15:04, which is today's (clock is then true).
func parseWhen(s string, now time.Time) (t time.Time, clock, ok bool) {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, false, true
		}
	}
	for _, layout := range []string{"15:04", "15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			now = now.In(time.Local)
			return time.Date(now.Year(), now.Month(), now.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.Local), true, true
		}
	}
	return time.Time{}, false, false
}
