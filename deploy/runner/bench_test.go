package runner

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkStart: a confined start (Start of /bin/sleep until it runs:
// cgroups made, the sandbox built, the program exec'd as its uid)
// against a plain fork/exec of the same program in the same run,
// alternately. "cold" has no standby ready (every start also starts the
// runtime of this executable); "warm" is what a manager in use does.
func BenchmarkStart(b *testing.B) {
	for _, mode := range []string{"warm", "cold"} {
		b.Run(mode, func(b *testing.B) {
			r, err := New(Options{StateDir: b.TempDir(), CgroupParent: fmt.Sprintf("gridmgr-bench-%d", os.Getpid())})
			if err != nil {
				b.Skip(err)
			}
			dir := filepath.Join(b.TempDir(), "inst")
			os.MkdirAll(dir, 0o700)
			os.Chown(dir, testUID, testUID)
			var raw, ours []time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				c := exec.Command("/bin/sleep", "1000")
				if err := c.Start(); err != nil {
					b.Fatal(err)
				}
				raw = append(raw, time.Since(t0))
				_ = c.Process.Kill()
				_ = c.Wait()
				if mode == "warm" {
					r.refill()
					for {
						r.mu.Lock()
						ready := r.spare != nil
						r.mu.Unlock()
						if ready {
							break
						}
						time.Sleep(time.Millisecond)
					}
					time.Sleep(20 * time.Millisecond) // its runtime has started
				} else {
					r.mu.Lock()
					if r.spare != nil {
						r.spare.conn.Close()
						r.spare = nil
					}
					r.closed = true // no spares
					r.mu.Unlock()
				}
				id := fmt.Sprintf("b%d", i)
				s := Spec{ID: id, Group: "g", Dir: dir, Command: []string{"/bin/sleep", "1000"}, UID: testUID, GID: testUID,
					LogDir: filepath.Join(dir, "..", id), Limits: Limits{CPUs: 1, Mem: 64 << 20, Pids: 64},
					Sandbox: Sandbox{Writable: []string{dir}}}
				// Installed: its directory and log files are there.
				os.MkdirAll(s.LogDir, 0o755)
				os.WriteFile(filepath.Join(s.LogDir, "stdout.log"), nil, 0o640)
				os.WriteFile(filepath.Join(s.LogDir, "stderr.log"), nil, 0o640)
				t0 = time.Now()
				if err := r.Start(s); err != nil {
					b.Fatal(err)
				}
				ours = append(ours, time.Since(t0))
				_ = r.Remove(id, "g")
			}
			med := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2]) / 1e6
			}
			mo, mr := med(ours), med(raw)
			b.ReportMetric(mo, "ms/start")
			b.ReportMetric(mr, "ms/exec")
			b.ReportMetric(mo/mr, "start/exec")
		})
	}
}
