package text

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Durations and counts as people write them on a command line. Every
// duration flag of the CLI reads its value with ParseDuration, and every
// count flag with ParseCount, so that what one flag accepts, all do.

// day is the unit d of ParseDuration: 24 hours (a calendar day across a
// change of daylight saving time may be 23 or 25).
const day = 24 * time.Hour

// maxDays is the most days a time.Duration holds.
const maxDays = int64(math.MaxInt64 / int64(day))

// durationHint says what a duration looks like, for messages.
const durationHint = "a duration such as 500ms, 5s, 2m, 1h30m or 7d"

// ParseDuration parses a duration as Go writes them (300ms, 1.5h, 2h45m,
// -5s; units ns, us, µs, ms, s, m, h), and in days too: 7d, 1.5d, 1d12h
// (days first, then Go's units). Its errors say what was wrong in plain
// words, without the value (the caller names the flag and the value).
// Whether a negative or zero duration means something is the caller's to
// say.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("empty: want " + durationHint)
	}
	if strings.TrimSpace(s) != s {
		return 0, errors.New("spaces around it: want " + durationHint)
	}
	days, rest, ok := strings.Cut(s, "d")
	if !ok {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, durationErr(s, err)
		}
		return d, nil
	}
	neg := false
	switch {
	case strings.HasPrefix(days, "-"):
		neg, days = true, days[1:]
	case strings.HasPrefix(days, "+"):
		days = days[1:]
	}
	if !isDecimal(days) {
		return 0, errors.New("before d give a number of days, such as 7d or 1.5d")
	}
	r, ok := new(big.Rat).SetString(days)
	if !ok {
		return 0, errors.New("before d give a number of days, such as 7d or 1.5d")
	}
	if r.Cmp(big.NewRat(maxDays, 1)) > 0 {
		return 0, fmt.Errorf("too long: at most %dd", maxDays)
	}
	r.Mul(r, big.NewRat(int64(day), 1))
	total := new(big.Int).Quo(r.Num(), r.Denom()).Int64() // truncated to the nanosecond, as Go does
	if rest != "" {
		if rest[0] == '-' || rest[0] == '+' {
			return 0, errors.New("after the days give more time without a sign, such as 1d12h")
		}
		if strings.Contains(rest, "d") {
			return 0, errors.New("days once, first: write 1d12h, not 1d1d")
		}
		d, err := time.ParseDuration(rest)
		if err != nil {
			return 0, durationErr(rest, err)
		}
		if int64(d) > math.MaxInt64-total {
			return 0, fmt.Errorf("too long: at most %dd", maxDays)
		}
		total += int64(d)
	}
	if neg {
		total = -total
	}
	return time.Duration(total), nil
}

// isDecimal says whether s is digits with at most one point among them
// ("7", "1.5", "0.25"; not "", ".5", "1.", "1e3").
func isDecimal(s string) bool {
	whole, frac, point := strings.Cut(s, ".")
	return allDigits(whole) && (!point || allDigits(frac))
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// goDuration matches what time.ParseDuration reads when the number is
// not too large.
var goDuration = regexp.MustCompile(`^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)

// durationErr rewords time.ParseDuration's errors ("time: unknown unit
// \"x\" in duration \"5x\"") for a person.
func durationErr(s string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "missing unit"):
		return errors.New("missing unit: want " + durationHint)
	case strings.Contains(msg, "unknown unit"):
		// time: unknown unit "x" in duration "5x"
		u := ""
		if _, after, ok := strings.Cut(msg, "unknown unit "); ok {
			if q, err := strconv.QuotedPrefix(after); err == nil {
				u, _ = strconv.Unquote(q)
			}
		}
		return fmt.Errorf("unknown unit %s: use ms, s, m, h or d (units are case-sensitive)", QuoteShort(u))
	case goDuration.MatchString(s):
		// Go says "invalid duration" of a number too long to be one.
		return fmt.Errorf("too long: at most %dd", maxDays)
	}
	return errors.New("not a duration: want " + durationHint)
}

// FormatMeasured writes a measured duration (a round trip, an age, a
// silence, a backoff) rounded to a precision that suits its size, then as
// FormatDuration does: 611µs, 275.01ms, 33.57s, 1m5s, 1h. It is the one
// form of a measured duration in the CLI, the UI, events and logs.
func FormatMeasured(d time.Duration) string {
	a := d
	if a < 0 {
		a = -a
	}
	unit := time.Second
	switch {
	case a < time.Millisecond:
		unit = time.Microsecond
	case a < time.Second:
		unit = 10 * time.Microsecond
	case a < time.Minute:
		unit = 10 * time.Millisecond
	}
	return FormatDuration(d.Round(unit))
}

// FormatDuration writes d as people read it and ParseDuration reads it
// back: 5s, 1m30s, 4h, 1h30m, 7d, 1d12h, 500ms (Go's "4h0m0s" without
// its zero units, and whole days in days).
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	sign := ""
	if d < 0 {
		if d == math.MinInt64 {
			return d.String()
		}
		sign, d = "-", -d
	}
	s := ""
	if d >= day {
		s = strconv.FormatInt(int64(d/day), 10) + "d"
		d %= day
		if d == 0 {
			return sign + s
		}
	}
	if h := d / time.Hour; h > 0 {
		s += strconv.FormatInt(int64(h), 10) + "h"
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		s += strconv.FormatInt(int64(m), 10) + "m"
		d -= m * time.Minute
	}
	rest := ""
	if d > 0 {
		rest = d.String() // under a minute: 30s, 1.5s, 500ms
	}
	return sign + s + rest
}

// ErrTooLarge is ParseCount's error for a count too large for an int64.
var ErrTooLarge = errors.New("too large")

// ParseCount parses a count as people write them: a whole number, its
// digits grouped with _ or not (10000, 10_000), or in thousands (k or K)
// or millions (M): 10k, 1.5k, 2M. A leading - makes it negative (whether
// that means something is the caller's to say, as bounds are). Its errors
// say what was wrong without the value, and leave what would do to the
// caller, who knows the bounds.
func ParseCount(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty")
	}
	num, neg := s, false
	switch {
	case strings.HasPrefix(num, "-"):
		num, neg = num[1:], true
	case strings.HasPrefix(num, "+"):
		num = num[1:]
	}
	mult := int64(1)
	switch {
	case strings.HasSuffix(num, "k"), strings.HasSuffix(num, "K"):
		mult, num = 1000, num[:len(num)-1]
	case strings.HasSuffix(num, "M"):
		mult, num = 1_000_000, num[:len(num)-1]
	}
	if strings.HasPrefix(num, "_") || strings.HasSuffix(num, "_") || strings.Contains(num, "__") || strings.Contains(num, "_.") || strings.Contains(num, "._") {
		return 0, errors.New("_ goes between digits, as in 10_000")
	}
	num = strings.ReplaceAll(num, "_", "")
	if !isDecimal(num) {
		if head := strings.TrimRightFunc(num, unicode.IsLetter); head != num && isDecimal(head) {
			return 0, fmt.Errorf("unknown suffix %s (k: thousands, M: millions)", QuoteShort(num[len(head):]))
		}
		return 0, errors.New("not a whole number")
	}
	if len(num) > 30 {
		return 0, ErrTooLarge
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, errors.New("not a whole number")
	}
	r.Mul(r, big.NewRat(mult, 1))
	if !r.IsInt() {
		return 0, errors.New("not a whole number")
	}
	if r.Num().Cmp(big.NewInt(math.MaxInt64)) > 0 {
		return 0, ErrTooLarge
	}
	n := r.Num().Int64()
	if neg {
		n = -n
	}
	return n, nil
}

// FormatCount writes n as ParseCount reads it, in thousands or millions
// when it is a round number of them and at least 10,000: 2M, 10k, 1000,
// 65536.
func FormatCount(n int64) string {
	switch a := max(n, -n); {
	case a >= 1_000_000 && a%1_000_000 == 0:
		return strconv.FormatInt(n/1_000_000, 10) + "M"
	case a >= 10_000 && a%1000 == 0:
		return strconv.FormatInt(n/1000, 10) + "k"
	}
	return strconv.FormatInt(n, 10)
}
