//go:build linux

package sim

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// vmFlags is the VmFlags line of the mapping holding addr, from
// /proc/self/smaps.
func vmFlags(t *testing.T, addr uintptr) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lo, hi, _ := strings.Cut(f[0], "-")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uintptr(l) <= addr && addr < uintptr(h)
			continue
		}
		if v, ok := strings.CutPrefix(line, "VmFlags:"); ok && in {
			return strings.Fields(v)
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return nil
}

// TestHugePagesMarkTheHeap: with the kernel in "madvise" mode, the heap a
// run reserves, and what the heap grows into later, are marked for huge
// pages ("hg" in VmFlags), and what is marked is the Go heap, not the
// mappings beside it.
func TestHugePagesMarkTheHeap(t *testing.T) {
	if m := thpMode(); m != "madvise" {
		t.Skipf("transparent huge pages are %q here, not \"madvise\": nothing to ask for", m)
	}
	h := reserveHugePages(256 << 20)
	if h == nil {
		t.Fatal("reserveHugePages found no heap mapping to mark")
	}
	// What the heap holds from now on sits in the marked mapping: the
	// pages freed by the reservation are reused first.
	small := make([]byte, 64<<20)
	at := uintptr(unsafe.Pointer(&small[0]))
	if at < h.lo || at >= h.hi {
		t.Fatalf("a new 64 MiB object at %#x, outside the marked heap [%#x, %#x)", at, h.lo, h.hi)
	}
	if f := vmFlags(t, at); !slices.Contains(f, "hg") {
		t.Fatalf("the heap holding a new object is not marked for huge pages: VmFlags %v", f)
	}
	// Growth past the reservation: a mapping of its own until grow marks
	// it. The object may start in the marked range; its end cannot.
	big := make([]byte, (h.hi-h.lo)+(512<<20))
	end := uintptr(unsafe.Pointer(&big[len(big)-1]))
	if end < h.hi {
		t.Fatalf("an object larger than the marked range ends inside it (%#x < %#x)", end, h.hi)
	}
	h.grow()
	if f := vmFlags(t, end); !slices.Contains(f, "hg") {
		t.Fatalf("the heap grown to hold %d MiB is not marked after grow: VmFlags %v (marked [%#x, %#x), object ends at %#x)",
			len(big)>>20, f, h.lo, h.hi, end)
	}
	// Nothing else is marked: the program's own data and the stack.
	var onStack [64]byte
	for what, addr := range map[string]uintptr{
		"the executable's data": uintptr(unsafe.Pointer(&heapMetrics)),
		"a goroutine stack":     uintptr(unsafe.Pointer(&onStack[0])),
	} {
		if f := vmFlags(t, addr); slices.Contains(f, "hg") && !(h.lo <= addr && addr < h.hi) {
			t.Errorf("%s (%#x) is marked for huge pages: %v", what, addr, f)
		}
	}
	runtime.KeepAlive(small)
	runtime.KeepAlive(big)
	t.Logf("marked [%#x, %#x), %d MiB; in huge pages now: %d MiB", h.lo, h.hi, (h.hi-h.lo)>>20, hugePagesResident()>>20)
}

// TestHugePagesRun: a run with HugePages says how much of its memory is
// in huge pages, and gives the same figures as without.
func TestHugePagesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20,000-manager run twice")
	}
	var csv [2]bytes.Buffer
	for i, huge := range []bool{false, true} {
		sc := Quick(QuickOptions{Managers: 20000, Fanout: 16, Shape: "balanced", Kill: 1, Seed: 1, Rest: 2 * time.Second})
		res, err := Run(sc, Options{HugePages: huge})
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteCSV(&csv[i], res.Figures); err != nil {
			t.Fatal(err)
		}
		if huge && thpMode() == "madvise" && res.HugePagesResident == 0 {
			// The kernel may have no free 2 MiB pages to give; say so
			// rather than fail.
			t.Logf("no memory in huge pages at the end of the run")
		}
		t.Logf("huge pages %v: %d MiB resident in huge pages", huge, res.HugePagesResident>>20)
	}
	if !bytes.Equal(csv[0].Bytes(), csv[1].Bytes()) {
		t.Fatalf("figures differ with huge pages:\n%s\nwithout:\n%s", csv[1].String(), csv[0].String())
	}
}

// The run asks only where it should: the kernel's mode is the bracketed
// word ("madvise" only), and strict overcommit ("2") means no
// reservation, whatever the spacing.
func TestHugePagesOnlyWhereAsked(t *testing.T) {
	for text, want := range map[string]string{
		"always [madvise] never\n": "madvise",
		"[always] madvise never\n": "always",
		"always madvise [never]\n": "never",
		"":                         "",
		"always madvise never\n":   "",
		"[]\n":                     "",
	} {
		if got := thpModeOf([]byte(text)); got != want {
			t.Errorf("mode of %q: %q, want %q", text, got, want)
		}
	}
	for text, want := range map[string]bool{"2\n": true, "0\n": false, "1": false, " 2 ": true, "": false} {
		if got := strictOvercommitOf([]byte(text)); got != want {
			t.Errorf("strict overcommit of %q: %v, want %v", text, got, want)
		}
	}
	if thpMode() != "madvise" && reserveHugePages(1<<20) != nil {
		t.Errorf("reserved huge pages under mode %q", thpMode())
	}
}
