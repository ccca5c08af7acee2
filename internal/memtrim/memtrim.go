package memtrim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"

	"golang.org/x/sys/unix"
)

// Mapping is one read-only mapping of the executable, [Start, End).
type Mapping struct {
	Start, End uintptr
	Perms      string // as /proc/self/maps says: "r-xp" or "r--p"
}

// Mappings are the read-only private mappings of the file that holds
// this package's code (the running executable), from /proc/self/maps.
// A writable mapping of it is never among them.
func Mappings() ([]Mapping, error) {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	return parseMaps(data, reflect.ValueOf(Mappings).Pointer())
}

// parseMaps finds, in the text of /proc/PID/maps, the mapping holding
// address pc, and returns every read-only private mapping of the same
// file (device and inode).
func parseMaps(data []byte, pc uintptr) ([]Mapping, error) {
	type line struct {
		m          Mapping
		dev, inode string
	}
	var lines []line
	var file *line
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 5 {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		lines = append(lines, line{Mapping{uintptr(start), uintptr(end), string(f[1])}, string(f[3]), string(f[4])})
		if pc >= uintptr(start) && pc < uintptr(end) {
			file = &lines[len(lines)-1]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if file == nil || file.inode == "0" {
		return nil, errors.New("memtrim: no file mapping holds this executable's code")
	}
	dev, inode := file.dev, file.inode
	var out []Mapping
	for _, l := range lines {
		if l.dev == dev && l.inode == inode && (l.m.Perms == "r-xp" || l.m.Perms == "r--p") {
			out = append(out, l.m)
		}
	}
	return out, nil
}

// Executable drops the process's pages of its executable's read-only
// mappings (see the package's doc) and returns how many bytes those
// mappings span.
func Executable() (int64, error) {
	ms, err := Mappings()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range ms {
		// The raw call: the range is an address /proc/self/maps gave,
		// not memory Go allocated, and is never read through here.
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.Start, m.End-m.Start, unix.MADV_DONTNEED); e != 0 {
			return n, fmt.Errorf("memtrim: madvise %x-%x: %w", m.Start, m.End, e)
		}
		n += int64(m.End - m.Start)
	}
	return n, nil
}
