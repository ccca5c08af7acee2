package text

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"0B", 0},
		{"1B", 1},
		{"1KB", 1000},
		{"1.5KB", 1500},
		{"1 KiB", 1024},
		{"512MiB", 512 << 20},
		{"16GiB", 16 << 30},
		{"1.5GB", 1_500_000_000},
		{"1.5 GiB", 3 << 29},
		{"2TB", 2_000_000_000_000},
		{"1TiB", 1 << 40},
		{"0.5MiB", 1 << 19},
		{"007MB", 7_000_000},
		{"8388607TiB", 8388607 << 40},
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "KB", "1", "1kb", "1Kb", "1 ", "1  KB", " 1KB", "1KB ", "1.KB", ".5KB", "-1KB", "+1KB", "1e3KB", "1,5GB", "1_000KB", "1.0001B", "8388608TiB", "1PB", strings.Repeat("1", 31) + "B"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestFirstInvalidUTF8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{{"", -1}, {"abc", -1}, {"héllo", -1}, {"\uFFFD ok", -1}, {"ab\xffcd", 2}, {"é\xc3", 2}} {
		if got := FirstInvalidUTF8(tc.in); got != tc.want {
			t.Errorf("FirstInvalidUTF8(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"abc", "abc", 0},
		{"abc", "abd", 1}, {"abc", "ab", 1}, {"ab", "abc", 1}, {"abc", "acb", 1},
		{"ca", "abc", 3},                          // optimal string alignment, not full Damerau
		{"kitten", "sitting", 3}, {"日本", "本日", 1}, // runes, not bytes
	}
	for _, tt := range tests {
		if got := EditDistance(tt.a, tt.b); got != tt.d {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.d)
		}
	}
}

func TestHuman(t *testing.T) {
	for in, want := range map[string]string{
		"relations: would close a cycle: gm152 is an ancestor of gm164": "would close a cycle: gm152 is an ancestor of gm164",
		"node: manager stopped":                  "manager stopped",
		"gm152: reservation x is not this one's": "gm152: reservation x is not this one's",
		"dial failed: relations: x":              "dial failed: relations: x",
	} {
		if got := Human(errors.New(in)); got != want {
			t.Errorf("Human(%q) = %q, want %q", in, got, want)
		}
	}
}
