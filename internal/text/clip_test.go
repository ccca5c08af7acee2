package text

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 0, ""},
		{"", 5, ""},
		{"abc", 3, "abc"},
		{"abc", 5, "abc"},
		{"abcd", 3, "abc…"},
		{"abc", 0, "…"},
		{"abc", -1, "…"},
		// "é" is 2 bytes, "€" 3, "😀" 4: a cut inside one goes back to its start.
		{"héllo", 1, "h…"},
		{"héllo", 2, "h…"},
		{"héllo", 3, "hé…"},
		{"a€b", 2, "a…"},
		{"a€b", 3, "a…"},
		{"a€b", 4, "a€"[:4] + "…"},
		{"a€b", 5, "a€b"},
		{"😀😀", 4, "😀…"},
		{"😀😀", 7, "😀…"},
		{"😀😀", 8, "😀😀"},
		{"€", 2, "…"},
		// Invalid UTF-8: each bad byte is a rune of its own.
		{"a\xffb", 2, "a\xff…"},
		{"\x80\x80\x80", 2, "\x80\x80…"},
	} {
		if got := Clip(tc.in, tc.n); got != tc.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestClipKeepsRunes checks every cut of a string of mixed widths: the
// result is valid UTF-8, a prefix of the input plus the mark, and at most
// n bytes before the mark.
func TestClipKeepsRunes(t *testing.T) {
	s := "aé€😀b" + strings.Repeat("ü", 3)
	for n := 0; n <= len(s)+1; n++ {
		got := Clip(s, n)
		if !utf8.ValidString(got) {
			t.Errorf("Clip(%q, %d) = %q: not valid UTF-8", s, n, got)
		}
		if n >= len(s) {
			if got != s {
				t.Errorf("Clip(%q, %d) = %q, want it unchanged", s, n, got)
			}
			continue
		}
		head, ok := strings.CutSuffix(got, ClipMark)
		if !ok || !strings.HasPrefix(s, head) || len(head) > n {
			t.Errorf("Clip(%q, %d) = %q: want a prefix of at most %d bytes and %q", s, n, got, n, ClipMark)
		}
	}
}
