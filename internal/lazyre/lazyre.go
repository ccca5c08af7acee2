package lazyre

import (
	"regexp"
	"regexp/syntax"
	"sync"
)

// RE is a regular expression compiled on first use.
type RE struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

// New returns expr as an RE. It panics if expr does not parse, as
// regexp.MustCompile does, but leaves the compiling to the first match.
func New(expr string) *RE {
	if _, err := syntax.Parse(expr, syntax.Perl); err != nil {
		panic(`lazyre: New(` + expr + `): ` + err.Error())
	}
	return &RE{expr: expr}
}

// Regexp returns the compiled expression, compiling it the first time.
func (r *RE) Regexp() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.expr) })
	return r.re
}

// MatchString reports whether s contains a match of the expression.
func (r *RE) MatchString(s string) bool { return r.Regexp().MatchString(s) }

// String returns the source text of the expression.
func (r *RE) String() string { return r.expr }
