// ExprError and its wording: positions in the source, the snippet with a
// caret, and CEL's messages made shorter and given suggestions.

package query

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"cel.dev/cel-go/cel"

	"github.com/gridmgr/gridmgr/internal/text"
)

// Issue is one problem CEL found in an expression.
type Issue struct {
	Line, Col int // 1-based; Col counts characters (runes)
	Msg       string
}

// ExprError is a compile error of an expression.
type ExprError struct {
	Kind      Kind
	Src       string
	Line, Col int    // 1-based position of the first issue; Col counts characters
	Msg       string // the first issue
	// Issues holds every issue CEL reported, the first one included.
	Issues []Issue
}

// Error renders the first issue on one line, then the source line it is
// on and a caret under its column, e.g.
//
//	requirement: 1:19: undeclared reference to 'cpu' (did you mean 'cpus'?)
//	  cpus_free >= 4 && cpu > 2
//	                    ^
func (e *ExprError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d:%d: %s", e.Kind, e.Line, e.Col, e.Msg)
	if line, caret, ok := srcSnippet(e.Src, e.Line, e.Col); ok {
		b.WriteString("\n  ")
		b.WriteString(line)
		b.WriteString("\n  ")
		b.WriteString(caret)
	}
	return b.String()
}

// Unwrap returns ErrExpr.
func (e *ExprError) Unwrap() error { return ErrExpr }

// snippetWidth is the most characters of a source line Error shows.
const snippetWidth = 100

// srcSnippet returns source line `line` (tabs and other control characters
// shown as spaces, cut to a window of snippetWidth characters around col)
// and a caret line pointing at col.
func srcSnippet(src string, line, col int) (string, string, bool) {
	if line < 1 {
		return "", "", false
	}
	lines := strings.Split(src, "\n")
	if line > len(lines) {
		return "", "", false
	}
	rs := []rune(strings.TrimSuffix(lines[line-1], "\r"))
	for i, r := range rs {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Zs, r) {
			rs[i] = ' '
		}
	}
	c := max(col-1, 0) // 0-based caret position in rs
	start, end, pre, post := 0, len(rs), "", ""
	if len(rs) > snippetWidth {
		start = max(0, min(c-snippetWidth/2, len(rs)-snippetWidth))
		end = start + snippetWidth
		if start > 0 {
			pre = "..."
		}
		if end < len(rs) {
			post = "..."
		}
	}
	text := pre + string(rs[start:end]) + post
	caret := strings.Repeat(" ", len(pre)+c-start) + "^"
	return text, caret, true
}

// exprErr builds an *ExprError with one issue.
func exprErr(kind Kind, src string, line, col int, msg string) *ExprError {
	return &ExprError{Kind: kind, Src: src, Line: line, Col: col, Msg: msg,
		Issues: []Issue{{Line: line, Col: col, Msg: msg}}}
}

// issuesErr converts CEL's issues into an *ExprError.
func issuesErr(kind Kind, src string, iss *cel.Issues) *ExprError {
	e := &ExprError{Kind: kind, Src: src}
	for _, ce := range iss.Errors() {
		line, col := ce.Location.Line(), ce.Location.Column()+1
		if line < 1 {
			line, col = srcStart(src)
		}
		col = max(col, 1)
		e.Issues = append(e.Issues, Issue{Line: line, Col: col, Msg: oneLine(improveMsg(ce.Message))})
	}
	if len(e.Issues) == 0 {
		e.Issues = []Issue{{Line: 1, Col: 1, Msg: oneLine(strings.TrimSpace(iss.String()))}}
	}
	first := e.Issues[0]
	e.Line, e.Col, e.Msg = first.Line, first.Col, first.Msg
	if e.Msg == "" {
		e.Msg = "invalid expression"
		e.Issues[0].Msg = e.Msg
	}
	return e
}

// oneLine escapes the control characters (newlines, tabs) that CEL may
// quote from the source into a message, so the message stays one line.
func oneLine(msg string) string {
	if !strings.ContainsFunc(msg, unicode.IsControl) {
		return msg
	}
	var b strings.Builder
	for _, r := range msg {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// improveMsg rewrites some of CEL's messages: it shortens syntax errors,
// drops the empty container and adds a suggestion to undeclared
// references and undefined fields.
func improveMsg(msg string) string {
	if rest, ok := strings.CutPrefix(msg, "Syntax error: "); ok {
		return "syntax error: " + improveSyntax(rest)
	}
	msg = strings.Replace(msg, " (in container '')", "", 1)
	if strings.HasPrefix(msg, "found no matching overload for '_==_'") ||
		strings.HasPrefix(msg, "found no matching overload for '_!=_'") {
		if strings.Contains(msg, "(int, double)") || strings.Contains(msg, "(double, int)") {
			msg += " (== does not mix int and double: write 2.0 for a double, or convert with double())"
		}
		return msg
	}
	if strings.Contains(msg, "did you mean") {
		return msg
	}
	for _, c := range []struct {
		prefix  string
		options []string
	}{
		{"undeclared reference to '", Identifiers()},
		{"undefined field '", requestFields},
	} {
		rest, ok := strings.CutPrefix(msg, c.prefix)
		if !ok {
			continue
		}
		name, _, ok := strings.Cut(rest, "'")
		if !ok {
			continue
		}
		if s := suggest(name, c.options); s != "" {
			msg += " (did you mean '" + s + "'?)"
		}
	}
	return msg
}

// improveSyntax shortens ANTLR's messages: "mismatched input '<EOF>'
// expecting {a dozen tokens}" becomes "unexpected end of expression".
func improveSyntax(msg string) string {
	for _, p := range []string{"mismatched input ", "extraneous input "} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			tok, expect, _ := strings.Cut(rest, " expecting ")
			msg = "unexpected " + tok
			// A short expectation helps ("expecting ')'"); a set of
			// every token that may start an expression does not.
			if expect != "" && !strings.HasPrefix(expect, "{") {
				msg += ", expecting " + expect
			}
			break
		}
	}
	msg = strings.ReplaceAll(msg, "'<EOF>'", "end of expression")
	return strings.ReplaceAll(msg, "<EOF>", "end of expression")
}

// suggest returns the option nearest to word within a small edit
// distance, or "".
func suggest(word string, options []string) string {
	d := 2
	if len(word) <= 3 {
		d = 1
	}
	if s := text.Closest(word, options, d); s != "" {
		return s
	}
	// A different case only (CPUS, Mem) is always worth suggesting.
	for _, o := range options {
		if strings.EqualFold(o, word) {
			return o
		}
	}
	return ""
}

// srcPosition returns the 1-based line and character column of byte offset
// off in src.
func srcPosition(src string, off int) (line, col int) {
	line, col = 1, 1
	for _, r := range src[:off] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// srcStart returns the position of the first non-space character of
// src (1:1 if there is none).
func srcStart(src string) (line, col int) {
	i := strings.IndexFunc(src, func(r rune) bool { return !unicode.IsSpace(r) })
	if i < 0 {
		return 1, 1
	}
	return srcPosition(src, i)
}
