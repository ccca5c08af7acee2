package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// recordOnDisk reads instance id's record file as the next start of the
// manager would.
func (env *execEnv) recordOnDisk(t *testing.T, id string) (*Record, uint64) {
	t.Helper()
	r, err := env.ex.readRecord(id)
	if err != nil || r == nil {
		t.Fatalf("record of %s: %v %v", id, r, err)
	}
	fi, err := os.Stat(env.ex.recordPath(id))
	if err != nil {
		t.Fatal(err)
	}
	return r, fi.Sys().(*syscall.Stat_t).Ino
}

// A start writes the instance's record while its processes start. Each
// way it can end leaves a record that says what the manager's next start
// must do:
//   - it started: the record says so, with its args and env;
//   - it could not start: the record says it is not started (the args and
//     env it was given are kept), on disk and in memory;
//   - the manager was killed after the record and before the processes
//     ran: the next start of the manager starts it (Reconcile);
//   - a restart that changes nothing in the record does not write it.
func TestStartRecordsWhileStarting(t *testing.T) {
	env := newExecEnv(t)
	canRun(t, env.ex)
	a := env.startApp(t, startManifest)
	if r, _ := env.recordOnDisk(t, a.Id); r.Started {
		t.Fatal("installed, and the record says started")
	}

	// It started: the record says so.
	if _, err := env.ex.StartWith(a.Id, []string{"one"}, map[string]string{"MODE": "stay"}); err != nil {
		t.Fatal(err)
	}
	r, _ := env.recordOnDisk(t, a.Id)
	if !r.Started || strings.Join(r.Args, " ") != "one" || r.Env["MODE"] != "stay" {
		t.Fatalf("after a start the record says started=%v args %q env %v", r.Started, r.Args, r.Env)
	}
	if _, err := env.ex.Stop(a.Id); err != nil {
		t.Fatal(err)
	}

	// Killed between the record and the processes: what the record file
	// holds then (written by the start, nothing run) is started at the
	// manager's next start.
	running := *env.ex.get(a.Id)
	running.Started, running.Args = true, []string{"three"}
	if err := env.ex.writeRecord(&running); err != nil {
		t.Fatal(err)
	}
	env.open(t)
	if st, _ := env.ex.Status(a.Id); st.State != "stopped" {
		t.Fatalf("nothing ran, and it is %s", st.State)
	}
	_, ino := env.recordOnDisk(t, a.Id)
	env.ex.Reconcile([]string{"gm1-1-aaaaaa"})
	waitFor(t, "the run after the restart", func() bool {
		runs := env.runs(t, a.Id)
		return runs[len(runs)-1] == "first|three|stay by the manifest"
	})
	if st, _ := env.ex.Status(a.Id); st.State != "running" {
		t.Fatalf("after Reconcile it is %s", st.State)
	}
	if _, again := env.recordOnDisk(t, a.Id); again != ino {
		t.Fatal("a restart that changed nothing wrote the record")
	}
	if _, err := env.ex.Stop(a.Id); err != nil {
		t.Fatal(err)
	}

	// It cannot start (its program is gone): the record says so.
	prog := filepath.Join(env.ex.host.InstanceDir(a.Id), "bin", "x")
	if err := os.Rename(prog, prog+".away"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ex.StartWith(a.Id, []string{"two"}, nil); err == nil {
		t.Fatal("started without its program")
	}
	r, _ = env.recordOnDisk(t, a.Id)
	if r.Started || strings.Join(r.Args, " ") != "two" || r.Env != nil {
		t.Fatalf("after a failed start the record says started=%v args %q env %v", r.Started, r.Args, r.Env)
	}
	if env.ex.get(a.Id).Started {
		t.Fatal("after a failed start the executor thinks it started")
	}
	if err := os.Rename(prog+".away", prog); err != nil {
		t.Fatal(err)
	}
}
