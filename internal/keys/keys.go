package keys

import (
	"cmp"
	"slices"
)

// Sorted returns m's keys in ascending order, or nil if m is empty.
func Sorted[M ~map[K]V, K cmp.Ordered, V any](m M) []K {
	if len(m) == 0 {
		return nil
	}
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
