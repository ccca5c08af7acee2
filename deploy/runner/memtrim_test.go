package runner

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// exeRssKB is the Rss of process pid's mappings of the file with inode
// ino (its executable), from /proc/PID/smaps.
func exeRssKB(t *testing.T, pid int, ino uint64) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, kb := false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) >= 5 && strings.Contains(fl[0], "-") && !strings.HasSuffix(fl[0], ":") {
			n, err := strconv.ParseUint(fl[4], 10, 64)
			in = err == nil && n == ino
			continue
		}
		if in && len(fl) >= 2 && fl[0] == "Rss:" {
			n, _ := strconv.Atoi(fl[1])
			kb += n
		}
	}
	return kb
}

// Once its program runs, an instance's supervisor (the shim: this
// executable) holds far less of the executable than a process of it
// that started and did nothing else, and still supervises: it stops the
// program when told.
func TestShimGivesBackItsExecutable(t *testing.T) {
	r := newRunner(t)
	self := self(t)
	var st syscall.Stat_t
	if err := syscall.Stat(self, &st); err != nil {
		t.Fatal(err)
	}
	ref := exec.Command(self)
	ref.Env = append(os.Environ(), "RUNNER_TEST_PROGRAM=idle")
	if err := ref.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ref.Process.Kill(); _ = ref.Wait() }()

	s := spec(t, r, "quiet", testUID, "/bin/sleep", "600")
	if err := r.Start(s); err != nil {
		t.Fatal(err)
	}
	got := waitState(t, r, "quiet", StateRunning)
	if got.ShimPid == 0 {
		t.Fatal("no shim pid in the status")
	}
	time.Sleep(300 * time.Millisecond) // the reference ends its start too
	shim, full := exeRssKB(t, got.ShimPid, st.Ino), exeRssKB(t, ref.Process.Pid, st.Ino)
	t.Logf("executable resident: the shim %d KiB, a process that only started %d KiB", shim, full)
	if full == 0 || shim > full/2 {
		t.Fatalf("the shim holds %d KiB of its executable, a process that only started %d KiB: want at most half", shim, full)
	}
	if err := r.Stop("quiet"); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, "quiet", StateStopped)
}
