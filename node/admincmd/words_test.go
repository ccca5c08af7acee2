package admincmd

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		// Plain words, spaces and tabs.
		{"status", []string{"status"}},
		{"remove-inferior gm162", []string{"remove-inferior", "gm162"}},
		{"  a  b\t c  ", []string{"a", "b", "c"}},
		{"\ta\t\tb\t", []string{"a", "b"}},
		{"add-superior /ip4/10.0.0.2/tcp/4001/p2p/12D3KooWabc",
			[]string{"add-superior", "/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWabc"}},
		{"set heartbeat.interval 500ms", []string{"set", "heartbeat.interval", "500ms"}},
		{"añ 日本 €", []string{"añ", "日本", "€"}},
		{"\uFFFD", []string{"\uFFFD"}}, // a real U+FFFD is valid UTF-8

		// Single quotes: literal.
		{"'a b'", []string{"a b"}},
		{`'a\b'`, []string{`a\b`}},
		{`'a\'`, []string{`a\`}},
		{`set 'abc\'`, []string{"set", `abc\`}},
		{`'a"b'`, []string{`a"b`}},
		{"'a\tb'", []string{"a\tb"}},
		{"''", []string{""}},
		{"''''", []string{""}},
		{"a '' b", []string{"a", "", "b"}},
		{"'' ''", []string{"", ""}},

		// Double quotes: only \" and \\ are escapes.
		{`"a b"`, []string{"a b"}},
		{`"a\"b"`, []string{`a"b`}},
		{`"a\\b"`, []string{`a\b`}},
		{`"a\\\"b"`, []string{`a\"b`}},
		{`"a\nb"`, []string{`a\nb`}},
		{`"\'"`, []string{`\'`}},
		{`"\ "`, []string{`\ `}},
		{`"it's"`, []string{"it's"}},
		{`""`, []string{""}},
		{`"" x`, []string{"", "x"}},
		{"\"a\tb\"", []string{"a\tb"}},

		// Backslash outside quotes: the next character, literally.
		{`a\ b`, []string{"a b"}},
		{`\'`, []string{"'"}},
		{`\"`, []string{`"`}},
		{`\\`, []string{`\`}},
		{`\a`, []string{"a"}},
		{"\\\t", []string{"\t"}},
		{`\é`, []string{"é"}},
		{`\ \ `, []string{"  "}},

		// Adjacent parts join.
		{`a'b c'd`, []string{"ab cd"}},
		{`"a"'b'`, []string{"ab"}},
		{`a"b"'c'\ d e`, []string{"abc d", "e"}},
		{`x''y`, []string{"xy"}},
		{`'it'\''s'`, []string{"it's"}},
	}
	for _, tt := range tests {
		got, err := Words(tt.in)
		if err != nil {
			t.Errorf("Words(%q): %v", tt.in, err)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Words(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestWordsLimits(t *testing.T) {
	line := strings.Repeat("a", MaxLine)
	if w, err := Words(line); err != nil || len(w) != 1 || len(w[0]) != MaxLine {
		t.Errorf("Words of MaxLine bytes: %d words, %v", len(w), err)
	}
	line = strings.TrimSuffix(strings.Repeat("a ", MaxWords), " ")
	if w, err := Words(line); err != nil || len(w) != MaxWords {
		t.Errorf("Words of MaxWords words: %d words, %v", len(w), err)
	}
}

func TestWordsErrors(t *testing.T) {
	tests := []struct {
		in  string
		pos int
		msg string
	}{
		{"", 0, "empty command"},
		{"  \t ", 0, "empty command"},

		{"set 'abc", 4, "unterminated single quote opened at byte 4"},
		{"set 'abc\\ ", 4, "unterminated single quote opened at byte 4"},
		{"'", 0, "unterminated single quote opened at byte 0"},
		{`set "abc`, 4, "unterminated double quote opened at byte 4"},
		{`set "abc\"`, 4, "unterminated double quote opened at byte 4"},
		{`set "abc\`, 4, "unterminated double quote opened at byte 4"},
		{`"`, 0, "unterminated double quote opened at byte 0"},
		{`a"b'c`, 1, "unterminated double quote opened at byte 1"},

		{`set a\`, 5, "trailing backslash at byte 5"},
		{`\`, 0, "trailing backslash at byte 0"},
		{`a \\\`, 4, "trailing backslash at byte 4"},

		{"set\nx", 3, "a newline at byte 3: one command per string"},
		{"status\n", 6, "a newline at byte 6: one command per string"},
		{"'a\nb'", 2, "a newline at byte 2: one command per string"},
		{"\"a\nb\"", 2, "a newline at byte 2: one command per string"},
		{"a\\\nb", 2, "a newline at byte 2: one command per string"},

		{"a\rb", 1, "control character U+000D at byte 1"},
		{"a\x00", 1, "control character U+0000 at byte 1"},
		{"a\x7f", 1, "control character U+007F at byte 1"},
		{"\x1b[31m", 0, "control character U+001B at byte 0"},
		{"'\x01'", 1, "control character U+0001 at byte 1"},
		{"\"\x1f\"", 1, "control character U+001F at byte 1"},
		{"\\\x08", 1, "control character U+0008 at byte 1"},
		{"a\vb", 1, "control character U+000B at byte 1"},

		{"\xff", 0, "invalid UTF-8 at byte 0"},
		{"ab\xff", 2, "invalid UTF-8 at byte 2"},
		{"'\xc3'", 1, "invalid UTF-8 at byte 1"},
		{"\"\xe2\x82\"", 1, "invalid UTF-8 at byte 1"},
		{"\\\xff", 1, "invalid UTF-8 at byte 1"},
		{"x \xed\xa0\x80", 2, "invalid UTF-8 at byte 2"}, // a surrogate
		{"'abc\xff", 4, "invalid UTF-8 at byte 4"},       // before the missing quote

		{strings.Repeat("a", 70000), MaxLine, "command is 70000 bytes; the limit is 65536"},
		{strings.Repeat("a", MaxLine+1), MaxLine, "command is 65537 bytes; the limit is 65536"},
		{strings.Repeat("a ", MaxWords+1), 2 * MaxWords, "more than 256 words: word 257 starts at byte 512"},
		{strings.Repeat("'' ", MaxWords) + "x", 3 * MaxWords, "more than 256 words: word 257 starts at byte 768"},
	}
	for _, tt := range tests {
		name := tt.in
		if len(name) > 40 {
			name = fmt.Sprintf("%.20q… (%d bytes)", tt.in, len(tt.in))
		}
		got, err := Words(tt.in)
		if err == nil {
			t.Errorf("Words(%s) = %q, want an error", name, got)
			continue
		}
		if got != nil {
			t.Errorf("Words(%s) returned words with an error", name)
		}
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("Words(%s): %v does not wrap ErrSyntax", name, err)
		}
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Words(%s): %T is not a *SyntaxError", name, err)
			continue
		}
		if se.Pos != tt.pos || se.Msg != tt.msg || err.Error() != tt.msg {
			t.Errorf("Words(%s): pos %d %q, want pos %d %q", name, se.Pos, err, tt.pos, tt.msg)
		}
	}
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"status", "status"},
		{"/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWabc", "/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWabc"},
		{"日本", "日本"},
		{"", "''"},
		{"a b", "'a b'"},
		{"a\tb", "'a\tb'"},
		{`a\b`, `'a\b'`},
		{`a"b`, `'a"b'`},
		{"it's", `"it's"`},
		{`it's "x"`, `"it's \"x\""`},
		{`'\\\\`, `''\''\\\\'`}, // four backslashes cost more than one '
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestQuoteRoundTrip(t *testing.T) {
	words := []string{
		"", " ", "\t", "'", `"`, `\`, "''", `""`, `\\`, `\'`, `\"`, `'"`, `"'`,
		"a b", "it's", `say "hi"`, `C:\dir\file`, `'\''`, `a'b"c\d e	f`,
		"日本 語", "\uFFFD", "-x", "#", "$HOME", "*", "~",
	}
	for _, w := range words {
		got, err := Words(Quote(w))
		if err != nil || !slices.Equal(got, []string{w}) {
			t.Errorf("Words(Quote(%q)) = %q, %v (quoted %q)", w, got, err, Quote(w))
		}
	}
	line := Join(words)
	got, err := Words(line)
	if err != nil || !slices.Equal(got, words) {
		t.Errorf("Words(Join(%q)) = %q, %v", words, got, err)
	}
}

func TestJoin(t *testing.T) {
	if got := Join(nil); got != "" {
		t.Errorf("Join(nil) = %q", got)
	}
	got := Join([]string{"set", "motd", "hello world", ""})
	if want := "set motd 'hello world' ''"; got != want {
		t.Errorf("Join = %q, want %q", got, want)
	}
}

// A word can need more bytes quoted than the input spent on it, since the
// input may switch quoting inside the word; near MaxLine, Join of the words
// of a valid line can then be too long for Words.
func TestJoinLongerThanInput(t *testing.T) {
	n := 30000
	line := `"` + strings.Repeat("'", n) + `"'` + strings.Repeat(`\`, n) + `'`
	words, err := Words(line)
	if err != nil || len(words) != 1 || len(words[0]) != 2*n {
		t.Fatalf("Words: %d words, %v", len(words), err)
	}
	joined := Join(words)
	if len(joined) <= MaxLine {
		t.Fatalf("Join is %d bytes", len(joined))
	}
	if _, err := Words(joined); !errors.Is(err, ErrSyntax) {
		t.Errorf("Words(Join) of %d bytes: %v", len(joined), err)
	}
	// Shorter, the same words round-trip.
	n = 1000
	line = `"` + strings.Repeat("'", n) + `"'` + strings.Repeat(`\`, n) + `'`
	words, _ = Words(line)
	if again, err := Words(Join(words)); err != nil || !slices.Equal(again, words) {
		t.Errorf("round trip: %v", err)
	}
}
