//go:build linux

package sim

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Huge pages for the run's heap (Options.HugePages).
//
// A run touches gigabytes of managers in an order no cache follows: at a
// million managers many memory accesses miss the TLB too, which with
// 4 KiB pages covers a few MiB. Transparent huge pages (2 MiB) cover a
// thousand times as much, but most distributions enable them only where
// a program asks (the kernel's "madvise" mode), and Go's runtime does not
// ask for its heap. So a run asks for it: it has the runtime map, at
// once, the heap the run will need (one allocation of that size, let go
// at once; its pages are never touched, so none is resident), marks the
// mapping (and the heap's below it) MADV_HUGEPAGE, and marks each later growth of the heap found
// at the run's progress checks. The pages then fault in as huge pages as
// the managers fill them. Measured at 1,000,000 managers: see
// sim/README.md, "Huge pages".
//
// Only in "madvise" mode: under "always" the kernel does it already, and
// under "never" (or without THP) nothing would come of it. Not under
// strict overcommit (vm.overcommit_memory 2) either: there the mapping
// is charged in full though untouched, and a refusal would end the
// process.

// thpMode is the kernel's transparent huge page mode: "always",
// "madvise", "never", or "" if it has none.
func thpMode() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return ""
	}
	return thpModeOf(b)
}

// thpModeOf reads the mode from the file's text: the word in brackets.
func thpModeOf(b []byte) string {
	for f := range bytes.FieldsSeq(b) {
		if len(f) > 2 && f[0] == '[' && f[len(f)-1] == ']' {
			return string(f[1 : len(f)-1])
		}
	}
	return ""
}

func strictOvercommit() bool {
	b, err := os.ReadFile("/proc/sys/vm/overcommit_memory")
	return err != nil || strictOvercommitOf(b)
}

func strictOvercommitOf(b []byte) bool { return string(bytes.TrimSpace(b)) == "2" }

// hugePages is the part of the address space known to be the Go heap and
// marked for huge pages: [lo, hi).
type hugePages struct {
	lo, hi uintptr
}

// reserveHugePages has the runtime map at least size bytes of heap and
// marks the heap's mappings for huge pages. nil if the kernel's mode is
// not "madvise" or the mapping cannot be found or marked.
func reserveHugePages(size uint64) *hugePages {
	if thpMode() != "madvise" || size == 0 || strictOvercommit() {
		return nil
	}
	b := make([]byte, size)
	at := uintptr(unsafe.Pointer(&b[0]))
	maps, err := readMaps()
	if err != nil {
		return nil
	}
	// The mapping holding the allocation, and those right below it:
	// the heap from its start (the runtime maps it upwards, in one run
	// of address space, away from the mappings the kernel places).
	var h *hugePages
	for k, m := range maps {
		if at < m.lo || at >= m.hi || !m.heapLike() {
			continue
		}
		lo := k
		for lo > 0 && maps[lo-1].hi == maps[lo].lo && maps[lo-1].heapLike() {
			lo--
		}
		for _, m := range maps[lo : k+1] {
			if advise(m.lo, m.hi) != nil {
				return nil
			}
		}
		h = &hugePages{lo: maps[lo].lo, hi: m.hi}
		break
	}
	runtime.KeepAlive(b)
	// Free the allocation now (its pages stay mapped, and marked, for
	// the managers to come), while the heap is small and a collection
	// costs nothing.
	runtime.GC()
	if h != nil {
		h.grow()
	}
	return h
}

// grow marks what the heap grew into since: the anonymous mappings that
// continue [lo, hi) upwards, as the runtime maps more arena after it.
func (h *hugePages) grow() {
	if h == nil {
		return
	}
	maps, err := readMaps()
	if err != nil {
		return
	}
	for _, m := range maps {
		if m.lo == h.hi && m.heapLike() {
			if advise(m.lo, m.hi) != nil {
				return
			}
			h.hi = m.hi
		}
	}
}

// hugePagesResident is the process's anonymous memory held in huge pages,
// in bytes (AnonHugePages).
func hugePagesResident() uint64 {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("AnonHugePages:")); ok {
			f := bytes.Fields(v)
			if len(f) == 2 && string(f[1]) == "kB" {
				n, _ := strconv.ParseUint(string(f[0]), 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

type mapping struct {
	lo, hi uintptr
	perms  string
	anon   bool // no file, no name
}

// heapLike: what the runtime maps for its heap, private, readable and
// writable, not backed by a file.
func (m mapping) heapLike() bool { return m.anon && m.perms == "rw-p" }

// readMaps reads /proc/self/maps, in address order.
func readMaps() ([]mapping, error) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 5 {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(string(lo), 16, 64)
		h, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, mapping{lo: uintptr(l), hi: uintptr(h), perms: string(f[1]), anon: len(f) == 5})
	}
	return out, sc.Err()
}

func advise(lo, hi uintptr) error {
	_, _, e := unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, unix.MADV_HUGEPAGE)
	if e != 0 {
		return e
	}
	return nil
}
