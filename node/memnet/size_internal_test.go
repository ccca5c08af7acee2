package memnet

import (
	"runtime"
	"testing"
	"unsafe"
)

// A simulated grid holds a Node per manager: at a million managers each
// size class above costs 128 MB. Its header (objects over 512 bytes that
// hold pointers carry 8 bytes) is counted. Raise the bound only on
// purpose, and say what it costs in sim/README.md.
func TestNodeFitsItsSizeClass(t *testing.T) {
	const class = 1152
	if size := unsafe.Sizeof(Node{}) + 8; size > class {
		t.Errorf("memnet.Node takes %d bytes with its header, over its size class of %d", size, class)
	}
	const n = 4096
	keep := make([]*Node, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = &Node{}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > class+16 {
		t.Errorf("memnet.Node takes %d bytes an object as allocated, over its size class of %d", per, class)
	}
	runtime.KeepAlive(keep)
}
