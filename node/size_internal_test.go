package node

import (
	"testing"
	"unsafe"

	"github.com/gridmgr/gridmgr/relations"
)

// A simulated grid holds a million of each of these: a field added that
// takes one past its allocation size class costs the whole next class
// (64 or 128 bytes a manager). Raise a bound only on purpose, and say
// what it costs at 1,000,000 managers (sim/README.md). An object of more
// than 512 bytes that holds pointers carries an 8-byte header in its
// allocation (Go 1.22 and later), counted here: a 576-byte Relation took
// the 640-byte class.
func TestPerManagerStructsFitTheirSizeClass(t *testing.T) {
	for _, c := range []struct {
		name      string
		size, max uintptr
	}{
		{"node.Core", unsafe.Sizeof(Core{}), 768},
		{"node.reservations", unsafe.Sizeof(reservations{}), 640},
		{"relations.Relation (two a manager)", unsafe.Sizeof(relations.Relation{}), 576},
		{"node.Applier", unsafe.Sizeof(Applier{}), 416},
	} {
		if alloc := allocSize(c.size); alloc > c.max {
			t.Errorf("%s is %d bytes (%d allocated), over its size class of %d", c.name, c.size, alloc, c.max)
		}
	}
}

// allocSize is what the allocator takes for an object of size bytes with
// pointers before rounding to a size class: the object, and the header
// of objects over 512 bytes (runtime's minSizeForMallocHeader).
func allocSize(size uintptr) uintptr {
	if size > 512 {
		return size + 8
	}
	return size
}

// The Driver's inbox is a channel of inboxSize Inputs: a ring that a
// manager writes through, slot by slot, whenever inputs queue while its
// Core is busy, so in time all of it is resident. At 416 bytes (the host's
// values held inline) it was 1.7 MB of an idle daemon's 4 MB of heap.
func TestInputIsSmall(t *testing.T) {
	if size := unsafe.Sizeof(Input{}); size > 256 {
		t.Errorf("node.Input is %d bytes, over 256: the inbox's ring of %d is %d KB", size, inboxSize, size*inboxSize/1024)
	}
}
