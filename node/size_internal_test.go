package node

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/gridmgr/gridmgr/config"

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
		{"node.reservations", unsafe.Sizeof(reservations{}), 448},
		{"relations.Relation (two a manager)", unsafe.Sizeof(relations.Relation{}), 448},
		{"node.Applier", unsafe.Sizeof(Applier{}), 416},
		{"node.queries (its seen sets inline)", unsafe.Sizeof(queries{}), 144},
		{"node.admins (its seen set inline)", unsafe.Sizeof(admins{}), 128},
	} {
		if alloc := allocSize(c.size); alloc > c.max {
			t.Errorf("%s is %d bytes (%d allocated), over its size class of %d", c.name, c.size, alloc, c.max)
		}
	}
}

// The premise of the test above, measured: what the allocator takes for
// each of these structs is within the size class the test claims, so a
// runtime that changed its classes or headers shows here.
func TestPerManagerStructsAsAllocated(t *testing.T) {
	const n = 4096
	for _, c := range []struct {
		name string
		max  uint64
		make func() any
	}{
		{"node.Core", 768, func() any { return &Core{} }},
		{"node.reservations", 448, func() any { return &reservations{} }},
		{"relations.Relation", 448, func() any { return &relations.Relation{} }},
		{"node.Applier", 416, func() any { return &Applier{} }},
		{"node.queries", 144, func() any { return &queries{} }},
		{"node.admins", 128, func() any { return &admins{} }},
	} {
		keep := make([]any, n)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range keep {
			keep[i] = c.make()
		}
		runtime.ReadMemStats(&after)
		// Other goroutines may allocate meanwhile: a few bytes an object
		// at most, far below the 64 bytes between classes.
		if per := (after.TotalAlloc - before.TotalAlloc) / n; per > c.max+16 {
			t.Errorf("%s takes %d bytes an object, over its size class of %d", c.name, per, c.max)
		}
		runtime.KeepAlive(keep)
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

// Core.modules makes the list of modules at each call instead of keeping
// it (128 bytes a manager, and 32 for the failover wrapper): that is only
// a saving if making it allocates nothing, every module being a pointer.
func TestModulesCostNoAllocation(t *testing.T) {
	cfg := config.Default()
	cfg.Name = "m"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := NewCore(cfg, "12D3KooWm", nil, rand.New(rand.NewPCG(1, 2)), nil)
	now := time.Unix(1e9, 0)
	c.Start(now)
	var n int
	if a := testing.AllocsPerRun(100, func() {
		for _, m := range c.modules() {
			if !m.deadline(now).IsZero() {
				n++
			}
		}
	}); a != 0 {
		t.Errorf("going over the modules allocates %v times", a)
	}
	if len(c.modules()) != 8 {
		t.Fatal("a module is missing")
	}
}
