package admincmd

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on one command string.
const (
	// MaxLine is the longest command string Words accepts, in bytes.
	MaxLine = 64 << 10
	// MaxWords is the most words (command name included) Words accepts.
	MaxWords = 256
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrSyntax: the command string does not split into words, or the
	// command name is malformed. The error is a *SyntaxError.
	ErrSyntax = errors.New("admin: syntax error")
	// ErrUsage: a built-in command got the wrong number of arguments. The
	// error is a *UsageError.
	ErrUsage = errors.New("admin: wrong number of arguments")
	// ErrUnknown: no such command. The error is an *UnknownError.
	ErrUnknown = errors.New("admin: unknown command")
)

// SyntaxError says where and why a command string is malformed.
type SyntaxError struct {
	Pos int    // byte offset in the command string, 0 ≤ Pos ≤ len(line)
	Msg string // the whole message, position included
}

func (e *SyntaxError) Error() string { return e.Msg }

// Unwrap returns ErrSyntax.
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

func syntaxErr(pos int, format string, args ...any) error {
	return &SyntaxError{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

// Words splits a command string into words, like a POSIX shell without its
// expansions:
//
//   - words are separated by spaces and tabs;
//   - in single quotes every character is literal; a pair of single
//     quotes with nothing between them is an empty word;
//   - in double quotes \" and \\ stand for " and \; a backslash before any
//     other character is kept literally;
//   - outside quotes a backslash takes the next character literally (a
//     space, a quote, a backslash, …);
//   - quoted and unquoted parts with nothing between them are one word:
//     a'b c'd is the word "ab cd".
//
// The string must be valid UTF-8, hold no newline (one command per string)
// and no control character other than tab, be at most MaxLine bytes and
// hold at most MaxWords words. A blank string is an error too. Every error
// is a *SyntaxError wrapping ErrSyntax.
func Words(line string) ([]string, error) {
	if len(line) > MaxLine {
		return nil, syntaxErr(MaxLine, "command is %d bytes; the limit is %d", len(line), MaxLine)
	}
	var (
		words  []string
		word   strings.Builder
		inWord bool
	)
	i := 0
	for i < len(line) {
		c := line[i]
		if c == ' ' || c == '\t' {
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
			i++
			continue
		}
		if !inWord {
			if len(words) == MaxWords {
				return nil, syntaxErr(i, "more than %d words: word %d starts at byte %d", MaxWords, MaxWords+1, i)
			}
			inWord = true
		}
		switch c {
		case '\'':
			open := i
			i++
			for {
				if i >= len(line) {
					return nil, syntaxErr(open, "unterminated single quote opened at byte %d", open)
				}
				if line[i] == '\'' {
					i++
					break
				}
				n, err := char(line, i)
				if err != nil {
					return nil, err
				}
				word.WriteString(line[i : i+n])
				i += n
			}
		case '"':
			open := i
			i++
			for {
				if i >= len(line) {
					return nil, syntaxErr(open, "unterminated double quote opened at byte %d", open)
				}
				if line[i] == '"' {
					i++
					break
				}
				if line[i] == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
					word.WriteByte(line[i+1])
					i += 2
					continue
				}
				n, err := char(line, i)
				if err != nil {
					return nil, err
				}
				word.WriteString(line[i : i+n])
				i += n
			}
		case '\\':
			if i+1 >= len(line) {
				return nil, syntaxErr(i, "trailing backslash at byte %d", i)
			}
			n, err := char(line, i+1)
			if err != nil {
				return nil, err
			}
			word.WriteString(line[i+1 : i+1+n])
			i += 1 + n
		default:
			n, err := char(line, i)
			if err != nil {
				return nil, err
			}
			word.WriteString(line[i : i+n])
			i += n
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	if len(words) == 0 {
		return nil, syntaxErr(0, "empty command")
	}
	return words, nil
}

// char checks the character at line[i] (i < len(line)) and returns its
// length in bytes: a newline, a control character other than tab, or
// invalid UTF-8 is an error at i.
func char(line string, i int) (int, error) {
	c := line[i]
	switch {
	case c == '\n':
		return 0, syntaxErr(i, "a newline at byte %d: one command per string", i)
	case (c < 0x20 && c != '\t') || c == 0x7f:
		return 0, syntaxErr(i, "control character %U at byte %d", rune(c), i)
	case c < utf8.RuneSelf:
		return 1, nil
	}
	r, n := utf8.DecodeRuneInString(line[i:])
	if r == utf8.RuneError && n == 1 {
		return 0, syntaxErr(i, "invalid UTF-8 at byte %d", i)
	}
	return n, nil
}

// Quote returns word written so that Words reads it back as that one word:
// Words(Quote(w)) is []string{w}. A word that needs no quoting comes back
// as is, the empty word as a pair of single quotes. Words cannot hold a newline, another control
// character other than tab, or invalid UTF-8; Quote does not remove them,
// and Words rejects the result.
func Quote(word string) string {
	if word == "" {
		return "''"
	}
	if !strings.ContainsAny(word, " \t'\"\\") {
		return word
	}
	singles := strings.Count(word, "'")
	if singles == 0 {
		return "'" + word + "'"
	}
	// Both ways work; take the shorter. Single quotes cost 3 more bytes per
	// ' (written '\''), double quotes 1 more per " and \.
	if strings.Count(word, `"`)+strings.Count(word, `\`) <= 3*singles {
		var b strings.Builder
		b.Grow(len(word) + 2)
		b.WriteByte('"')
		for i := 0; i < len(word); i++ {
			if word[i] == '"' || word[i] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(word[i])
		}
		b.WriteByte('"')
		return b.String()
	}
	return "'" + strings.ReplaceAll(word, "'", `'\''`) + "'"
}

// Join quotes each word (Quote) and joins them with single spaces, so that
// Words(Join(ws)) equals ws as long as the result stays within MaxLine and
// the words hold no character Words rejects.
func Join(words []string) string {
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Quote(w))
	}
	return b.String()
}
