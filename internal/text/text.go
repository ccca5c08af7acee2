package text

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FirstInvalidUTF8 returns the byte offset of the first byte of s that is
// not part of valid UTF-8, or -1 if s is valid. Parsers use it to say where
// bad input goes wrong.
func FirstInvalidUTF8(s string) int {
	if utf8.ValidString(s) {
		return -1
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// ParseSize parses a size such as "16GiB", "1.5 GB" or "512MiB" (units B,
// KB, MB, GB, TB, KiB, MiB, GiB, TiB; a plain number is bytes), as the
// properties file's memory keys and the CLI's size flags accept.
func ParseSize(s string) (uint64, error) { return parseSize(s) }

// parseSize parses a size such as "16GiB", "1.5 GB" or "512MiB".
func parseSize(s string) (uint64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intEnd := i
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == intEnd+1 {
			intEnd = 0 // "1." is not a number
		}
	}
	if intEnd == 0 {
		return 0, errors.New("expected a number followed by a unit, such as \"16GiB\" or \"1.5 GB\"")
	}
	num := s[:i]
	if len(num) > 30 {
		return 0, errors.New("number is too long")
	}
	unit := strings.TrimPrefix(s[i:], " ")
	size := int64(0)
	for _, u := range memoryUnits {
		if u.name == unit {
			size = u.size
		}
	}
	if size == 0 {
		if unit == "" {
			return 0, errors.New("missing unit; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB (or an integer for bytes)")
		}
		return 0, fmt.Errorf("unknown unit %s; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB (units are case-sensitive)", QuoteShort(unit))
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, errors.New("invalid number")
	}
	r.Mul(r, new(big.Rat).SetInt64(size))
	if !r.IsInt() {
		return 0, errors.New("not a whole number of bytes")
	}
	if r.Num().Cmp(big.NewInt(math.MaxInt64)) > 0 {
		return 0, errors.New("too large")
	}
	return r.Num().Uint64(), nil
}

// QuoteShort quotes s for a message, clipped (Clip) to 60 bytes if long.
func QuoteShort(s string) string { return strconv.Quote(Clip(s, 60)) }

// Closest returns the option nearest to word by edit distance, if one is
// within maxDist edits and close enough to be a typo of it (fewer edits
// than half its length); else "". Ties go to the earlier option.
func Closest(word string, options []string, maxDist int) string {
	best, bestD := "", maxDist+1
	for _, o := range options {
		if d := EditDistance(word, o); d < bestD && 2*d < len(o) {
			best, bestD = o, d
		}
	}
	return best
}

// EditDistance is the optimal string alignment distance of a and b
// (Levenshtein plus swaps of two neighbours), counted in runes. Every "did
// you mean" of gridmgr uses it.
func EditDistance(as, bs string) int {
	a, b := []rune(as), []rune(bs)
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// Bytes is n bytes for a person: "512 B", "1.5 MiB".
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Size is Bytes of a signed count (a negative one is 0 B).
func Size(n int64) string { return Bytes(uint64(max(n, 0))) }

var memoryUnits = []struct {
	name string
	size int64
}{
	{"B", 1},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
}

// Human is err's message for a person: Go errors of gridmgr's packages
// start with the package's name ("relations: would close a cycle: …"),
// which helps a programmer and means nothing to an operator, so a leading
// package prefix is dropped.
func Human(err error) string {
	s := err.Error()
	for _, p := range []string{"relations: ", "peeraddr: ", "node: ", "reservation: ", "query: ", "client: ", "daemon: ", "p2p: ", "config: "} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			return rest
		}
	}
	return s
}

// DidYouMean is ` (did you mean "X"?)` for the option closest to a
// mistyped word, or "" when none is close.
func DidYouMean(word string, options []string) string {
	if best := Closest(word, options, 2); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}
