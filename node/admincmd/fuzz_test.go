package admincmd

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzWords(f *testing.F) {
	for _, s := range []string{
		"", " ", "\t", "status", "remove-inferior gm162", "help set",
		"add-superior /ip4/10.0.0.2/tcp/4001/p2p/12D3KooWabc",
		`a'b c'd`, `''`, `'' ''`, `"a\"b\\c\d"`, `a\ b\'c\"d\\`, `'it'\''s'`,
		"\xff", "a\xc3", "'\xed\xa0\x80'", "\uFFFD",
		"'abc", `"abc`, `"abc\"`, `"abc\`, `abc\`, `\`, `\\\`, "a\\\n",
		"a\nb", "a\rb", "a\x00b", "\x7f", "'\t'",
		// Long inputs, but far below MaxLine: the length limit itself is
		// tested in TestWordsErrors. A seed near MaxLine makes the fuzzer
		// spend up to a minute minimizing each 64 KiB input that it finds
		// interesting (loop counters differ with the length), for nothing.
		strings.Repeat("a", 4096), strings.Repeat("ab ", 2000),
		strings.Repeat("a'b c'", 700), strings.Repeat(`\'\\`, 1000), strings.Repeat("\"\\\"", 1000),
		strings.Repeat("x ", MaxWords), strings.Repeat("x ", MaxWords+1),
		strings.Repeat("'' ", MaxWords+1),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		words, err := Words(line)
		if err != nil {
			var se *SyntaxError
			if !errors.Is(err, ErrSyntax) || !errors.As(err, &se) {
				t.Fatalf("Words(%q): error %v (%T) is not a *SyntaxError wrapping ErrSyntax", line, err, err)
			}
			if se.Pos < 0 || se.Pos > len(line) {
				t.Fatalf("Words(%q): Pos %d outside [0, %d]", line, se.Pos, len(line))
			}
			if words != nil {
				t.Fatalf("Words(%q): words %q with an error", line, words)
			}
			if _, perr := Parse(line); !errors.Is(perr, ErrSyntax) {
				t.Fatalf("Parse(%q) = %v, want the syntax error of Words", line, perr)
			}
			return
		}
		if len(line) > MaxLine {
			t.Fatalf("Words accepted %d bytes", len(line))
		}
		if len(words) == 0 || len(words) > MaxWords {
			t.Fatalf("Words(%q) gave %d words", line, len(words))
		}
		total := 0
		for _, w := range words {
			if !utf8.ValidString(w) {
				t.Fatalf("Words(%q): word %q is not valid UTF-8", line, w)
			}
			if strings.ContainsFunc(w, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }) {
				t.Fatalf("Words(%q): word %q holds a control character", line, w)
			}
			total += len(w)
		}
		if total > len(line) {
			t.Fatalf("Words(%q): %d bytes of words from %d bytes", line, total, len(line))
		}

		joined := Join(words)
		again, err := Words(joined)
		switch {
		case len(joined) > MaxLine:
			// Quote may need more bytes than the input did; then the
			// length limit, and only it, refuses the result.
			var se *SyntaxError
			if !errors.As(err, &se) || se.Pos != MaxLine {
				t.Fatalf("Words(Join) of %d bytes: %v, want the length error", len(joined), err)
			}
		case err != nil || !slices.Equal(again, words):
			t.Fatalf("Words(%q) = %q; Words(Join = %q) = %q, %v", line, words, joined, again, err)
		}

		// Parse never panics and fails only in the documented ways.
		cmd, err := Parse(line)
		switch {
		case err == nil:
			if cmd.Name != words[0] || len(cmd.Args) != len(words)-1 {
				t.Fatalf("Parse(%q) = %+v, words %q", line, cmd, words)
			}
		case errors.Is(err, ErrSyntax), errors.Is(err, ErrUsage):
		default:
			t.Fatalf("Parse(%q): unexpected error %v", line, err)
		}
	})
}
