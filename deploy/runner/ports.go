package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// listening is the TCP ports on which any of pids listens: the LISTEN
// sockets of /proc/PID/net/tcp and tcp6 (the table of the process's own
// network namespace) whose inodes the processes hold.
func listening(pids []int) []int {
	if len(pids) == 0 {
		return nil
	}
	inodes := map[string]bool{}
	tables := map[string]int{} // network namespace → a pid in it
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil {
			if _, ok := tables[ns]; !ok {
				tables[ns] = pid
			}
		}
	}
	if len(inodes) == 0 {
		// No socket at all (a program just started, most often): the
		// tables, which the kernel reads by walking every bucket of its
		// socket hash, would name none of them.
		return nil
	}
	var ports []int
	for _, pid := range tables {
		for _, f := range []string{"tcp", "tcp6"} {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
			if err != nil {
				continue
			}
			for i, line := range strings.Split(string(data), "\n") {
				fs := strings.Fields(line)
				if i == 0 || len(fs) < 10 || fs[3] != "0A" || !inodes[fs[9]] {
					continue
				}
				_, hexPort, ok := strings.Cut(fs[1], ":")
				if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && !slices.Contains(ports, int(p)) {
					ports = append(ports, int(p))
				}
			}
		}
	}
	slices.Sort(ports)
	return ports
}
