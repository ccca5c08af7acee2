package lazyre

import (
	"regexp"
	"sync"
	"testing"
)

// TestSameAnswers: an RE matches exactly as the regexp it stands for,
// from many goroutines at once on its first use.
func TestSameAnswers(t *testing.T) {
	const expr = `^[A-Z_][A-Z0-9_]{0,127}$`
	r, want := New(expr), regexp.MustCompile(expr)
	if r.re != nil {
		t.Fatal("New compiled the expression")
	}
	inputs := []string{"", "A", "_X1", "1A", "a", "A-B", string(make([]byte, 200)), "A" + string(repeat('B', 127)), "A" + string(repeat('B', 128))}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, s := range inputs {
				if got := r.MatchString(s); got != want.MatchString(s) {
					t.Errorf("%q: %v, want %v", s, got, !got)
				}
			}
		}()
	}
	wg.Wait()
	if r.String() != expr || r.Regexp().String() != expr {
		t.Errorf("String %q, Regexp %q", r.String(), r.Regexp().String())
	}
}

func repeat(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

// TestBadPatternPanicsAtNew: a pattern that does not parse fails where
// it is declared, as regexp.MustCompile does, not at its first match.
func TestBadPatternPanicsAtNew(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New accepted a pattern that does not parse")
		}
	}()
	New(`^[a-z`)
}

// TestAllocatesLittleUntilUsed: declaring an RE costs a parse, not a
// compiled program (the point of the package).
func TestAllocatesLittleUntilUsed(t *testing.T) {
	const expr = `^[A-Za-z0-9][A-Za-z0-9._-]{0,190}$`
	lazy := testing.AllocsPerRun(5, func() { New(expr) })
	eager := testing.AllocsPerRun(5, func() { regexp.MustCompile(expr) })
	if lazy*10 > eager {
		t.Errorf("New made %v allocations, MustCompile %v: want far fewer", lazy, eager)
	}
}
