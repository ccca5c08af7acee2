package memtrim

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

//go:embed testdata/pages.txt
var pages string // read-only data of the test's executable

// present is how many of the pages of s are mapped in this process,
// from /proc/self/pagemap (bit 63 of each page's entry), and of how many.
func present(t *testing.T, s string) (int, int) {
	t.Helper()
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps := uintptr(os.Getpagesize())
	lo := uintptr(unsafe.Pointer(unsafe.StringData(s))) / ps
	hi := (uintptr(unsafe.Pointer(unsafe.StringData(s))) + uintptr(len(s)) - 1) / ps
	buf := make([]byte, 8*(hi-lo+1))
	if _, err := f.ReadAt(buf, int64(lo*8)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; i < len(buf); i += 8 {
		if binary.LittleEndian.Uint64(buf[i:])>>63 == 1 {
			n++
		}
	}
	return n, len(buf) / 8
}

// The executable's pages the process had faulted in are no longer
// mapped after Executable, and come back, the same, when read again. It
// fails if Executable drops nothing.
func TestExecutableDropsResidentPages(t *testing.T) {
	ms, err := Mappings()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 2 {
		t.Fatalf("read-only mappings of the executable: %v; want its code and its read-only data", ms)
	}
	var span uintptr
	for _, m := range ms {
		span += m.End - m.Start
	}
	sum := crc32.ChecksumIEEE([]byte(pages)) // touches every page
	in, all := present(t, pages)
	if in < all*9/10 {
		t.Fatalf("%d of the %d pages of the embedded data are mapped after reading them all", in, all)
	}
	n, err := Executable()
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(span) {
		t.Errorf("Executable says %d bytes, the mappings span %d", n, span)
	}
	after, _ := present(t, pages)
	t.Logf("read-only mappings %d KiB; the embedded data's %d pages: %d mapped before, %d after", span>>10, all, in, after)
	if after > all/4 {
		t.Errorf("%d of the %d pages are still mapped after Executable", after, all)
	}
	if crc32.ChecksumIEEE([]byte(pages)) != sum || !strings.HasPrefix(pages, "line 000000 ") {
		t.Error("the embedded data reads differently once faulted in again")
	}
	if again, _ := present(t, pages); again < all*9/10 {
		t.Errorf("only %d of %d pages mapped again after reading them", again, all)
	}
}

// Initialised package data lives in a writable private mapping of the
// executable: had Executable dropped that one too, the values written
// since would be back to those of the file. They must stay.
var (
	initialised = [8192]int64{1: 7, 8191: 7}
	written     = map[string]int{"a": 1}
)

func TestWrittenDataSurvives(t *testing.T) {
	for i := range initialised {
		initialised[i] = int64(i) * 3
	}
	written["b"] = 2
	addr := uintptr(unsafe.Pointer(&initialised[0]))
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := parseMaps(data, reflect.ValueOf(Mappings).Pointer())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range exe {
		if addr >= m.Start && addr < m.End {
			t.Fatalf("the written array at %x is in a mapping Executable drops: %+v", addr, m)
		}
	}
	if !bytes.Contains(data, []byte("rw-p")) {
		t.Fatal("no writable mapping at all in /proc/self/maps")
	}
	for i := 0; i < 3; i++ {
		if _, err := Executable(); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range initialised {
		if v != int64(i)*3 {
			t.Fatalf("initialised[%d] = %d after Executable, want %d", i, v, i*3)
		}
	}
	if written["a"] != 1 || written["b"] != 2 {
		t.Fatalf("the map is %v after Executable", written)
	}
}

// Code keeps running, and computes the same, while another goroutine
// drops the executable's pages again and again under it.
func TestCodeRunsOnWhileTrimmed(t *testing.T) {
	buf := bytes.Repeat([]byte("gridmgr "), 1<<16)
	want := sha256.Sum256(buf)
	re := regexp.MustCompile(`^(gm[0-9]+)\.(app-[a-z]+)$`)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if sha256.Sum256(buf) != want {
					errs <- fmt.Errorf("sha256 differs at round %d", i)
					return
				}
				m := re.FindStringSubmatch(fmt.Sprintf("gm%d.app-web", i))
				if len(m) != 3 || m[1] != "gm"+strconv.Itoa(i) || m[2] != "app-web" {
					errs <- fmt.Errorf("regexp at round %d: %q", i, m)
					return
				}
			}
		}()
	}
	for i := 0; i < 50; i++ {
		if _, err := Executable(); err != nil {
			t.Error(err)
			break
		}
		time.Sleep(2 * time.Millisecond) // let the workers fault pages back in between
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestParseMaps(t *testing.T) {
	const maps = `00400000-00c00000 r-xp 00000000 fd:01 4242 /usr/bin/gridmgr (deleted)
00c00000-01800000 r--p 00800000 fd:01 4242 /usr/bin/gridmgr (deleted)
01800000-01900000 rw-p 01400000 fd:01 4242 /usr/bin/gridmgr (deleted)
01900000-01a00000 rw-p 00000000 00:00 0
c000000000-c004000000 rw-p 00000000 00:00 0
7f0000000000-7f0000100000 r-xp 00000000 fd:01 777 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000100000-7f0000200000 r--p 00000000 fd:02 4242 /other/device/same/inode
7f0000200000-7f0000300000 r--s 00000000 fd:01 4242 /usr/bin/gridmgr (deleted)
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
`
	got, err := parseMaps([]byte(maps), 0x00401234)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{{0x400000, 0xc00000, "r-xp"}, {0xc00000, 0x1800000, "r--p"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, pc := range []uintptr{0x01950000, 0xc000001000, 0x10} {
		if got, err := parseMaps([]byte(maps), pc); err == nil {
			t.Errorf("pc %x (not in a file mapping): got %+v, want an error", pc, got)
		}
	}
	if got, err := parseMaps([]byte("garbage\n\n1-\nzz-yy r-xp 0 fd:01 1 x\n"), 1); err == nil {
		t.Errorf("garbage: got %+v, want an error", got)
	}
}
