// Package keys lists a map's keys in order, for the pure cores' loops
// that must visit a map in the same order on every run.
//
// Sorted(m) is slices.Sorted(maps.Keys(m)) without the iterators: those
// put their closures' state on the heap at every call, even for an
// empty map, and the cores call it on every tick of every manager (at
// 100,000 simulated managers, about half a gigabyte of garbage in a
// run). An empty map costs nothing; any other one, the returned slice.
// The caller owns the slice.
package keys
