package text

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	const day = 24 * time.Hour
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0}, {"0s", 0}, {"500ms", 500 * time.Millisecond}, {"5s", 5 * time.Second},
		{"1.5h", 90 * time.Minute}, {"2h45m", 2*time.Hour + 45*time.Minute}, {"1µs", time.Microsecond},
		{"-5s", -5 * time.Second}, {"+5s", 5 * time.Second},
		{"7d", 7 * day}, {"14d", 14 * day}, {"30d", 30 * day}, {"100d", 100 * day}, {"0d", 0},
		{"1.5d", 36 * time.Hour}, {"0.25d", 6 * time.Hour}, {"1d12h", 36 * time.Hour},
		{"1d1h30m", 25*time.Hour + 30*time.Minute}, {"-1d", -day}, {"-1d12h", -36 * time.Hour}, {"+2d", 2 * day},
		{"106751d", 106751 * day},
	} {
		got, err := ParseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, err string }{
		{"", "empty"},
		{"5", "missing unit"},
		{"5x", `unknown unit "x": use ms, s, m, h or d`},
		{"1h5x", `unknown unit "x"`},
		{"5D", `unknown unit "D"`},
		{"5 s", `unknown unit " s"`},
		{" 5s", "spaces"},
		{"d", "before d give a number of days"},
		{".5d", "before d give a number of days"},
		{"1.d", "before d give a number of days"},
		{"1e3d", "before d give a number of days"},
		{"1h2d", "before d give a number of days"},
		{"--1d", "before d give a number of days"},
		{"1d-5h", "without a sign"},
		{"1d2d", "days once"},
		{"1dd", "days once"},
		{"1d5", "missing unit"},
		{"106752d", "too long"},
		{"106751d24h", "too long"},
		{"99999999999h", "too long"},
		{"99999999999999999999s", "too long"},
		{"tomorrow", "not a duration"}, {"mmm", "not a duration"}, {"m5", "not a duration"},
		{"1h30", "missing unit"},
	} {
		got, err := ParseDuration(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseDuration(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	const day = 24 * time.Hour
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {5 * time.Second, "5s"}, {500 * time.Millisecond, "500ms"}, {1500 * time.Millisecond, "1.5s"},
		{90 * time.Second, "1m30s"}, {4 * time.Hour, "4h"}, {90 * time.Minute, "1h30m"}, {time.Hour + 30*time.Second, "1h30s"},
		{7 * day, "7d"}, {36 * time.Hour, "1d12h"}, {90 * day, "90d"}, {-5 * time.Second, "-5s"}, {-36 * time.Hour, "-1d12h"},
		{time.Minute + 500*time.Millisecond, "1m500ms"},
	} {
		got := FormatDuration(tc.d)
		if got != tc.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
		if back, err := ParseDuration(got); err != nil || back != tc.d {
			t.Errorf("ParseDuration(FormatDuration(%v)) = %v, %v", tc.d, back, err)
		}
	}
	for _, d := range []time.Duration{math.MaxInt64, math.MinInt64 + 1, 1, -1, 25*time.Hour + time.Nanosecond} {
		if back, err := ParseDuration(FormatDuration(d)); err != nil || back != d {
			t.Errorf("%d: %q reads back as %v, %v", d, FormatDuration(d), back, err)
		}
	}
}

// Any text is a duration or an error in words, never a panic, and a
// duration it gives is written back by FormatDuration as the same.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"5s", "7d", "1.5d", "1d12h", "-1d", "106751d23h", "1d-5h", "d", "1e9d", "0.0000000001d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if strings.HasPrefix(err.Error(), "time:") {
				t.Fatalf("%q: Go's own error reaches the user: %v", s, err)
			}
			return
		}
		if back, err := ParseDuration(FormatDuration(d)); err != nil || back != d {
			t.Fatalf("%q = %v: %q reads back as %v, %v", s, d, FormatDuration(d), back, err)
		}
	})
}

func TestParseCount(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"12", 12}, {"007", 7}, {"10000", 10000}, {"10_000", 10000}, {"1_000_000", 1_000_000},
		{"10k", 10_000}, {"10K", 10_000}, {"1.5k", 1500}, {"2M", 2_000_000}, {"1.5M", 1_500_000}, {"0.001M", 1000},
		{"-1", -1}, {"+3", 3}, {"-2k", -2000}, {"9223372036854775807", math.MaxInt64},
	} {
		got, err := ParseCount(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseCount(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, err string }{
		{"", "empty"},
		{"x", "not a whole number"},
		{"1.5", "not a whole number"},
		{"1.0005k", "not a whole number"},
		{"10m", `unknown suffix "m" (k: thousands, M: millions)`},
		{"1G", `unknown suffix "G"`},
		{"10kk", `unknown suffix`},
		{"k", "not a whole number"},
		{"1e3", "not a whole number"},
		{"1 000", "not a whole number"},
		{"1,000", "not a whole number"},
		{"_1", "_ goes between digits"},
		{"1__0", "_ goes between digits"},
		{"1_", "_ goes between digits"},
		{"9223372036854775808", "too large"},
		{"99999999999999M", "too large"},
		{strings.Repeat("9", 40), "too large"},
		{"0x10", "not a whole number"}, {"10x", `unknown suffix "x"`},
		{"--1", "not a whole number"}, {"1.5k5", "not a whole number"},
	} {
		got, err := ParseCount(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseCount(%q) = %d, %v; want an error with %q", tc.in, got, err, tc.err)
		}
	}
}

func TestParseCountTooLarge(t *testing.T) {
	for _, in := range []string{"9223372036854775808", "99999999999999M", strings.Repeat("9", 40)} {
		if _, err := ParseCount(in); !errors.Is(err, ErrTooLarge) {
			t.Errorf("ParseCount(%q): %v, want ErrTooLarge (the caller says its bounds)", in, err)
		}
	}
}

func TestFormatCount(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0"}, {12, "12"}, {1000, "1000"}, {65536, "65536"}, {10000, "10k"}, {500_000, "500k"}, {2_000_000, "2M"}, {-10000, "-10k"}, {1 << 40, "1099511627776"}} {
		if got := FormatCount(tc.n); got != tc.want {
			t.Errorf("FormatCount(%d) = %q, want %q", tc.n, got, tc.want)
		}
		if back, err := ParseCount(FormatCount(tc.n)); err != nil || back != tc.n {
			t.Errorf("ParseCount(FormatCount(%d)) = %d, %v", tc.n, back, err)
		}
	}
}

func TestFormatMeasured(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{611*time.Microsecond + 400, "611µs"},
		{275*time.Millisecond + 12345*time.Nanosecond, "275.01ms"},
		{457831 * time.Microsecond, "457.83ms"},
		{33*time.Second + 567*time.Millisecond, "33.57s"},
		{65*time.Second + 400*time.Millisecond, "1m5s"},
		{time.Hour + 200*time.Millisecond, "1h"},
		{-1500 * time.Millisecond, "-1.5s"},
		{0, "0s"},
	} {
		if got := FormatMeasured(c.d); got != c.want {
			t.Errorf("FormatMeasured(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
