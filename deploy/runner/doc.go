// Package runner runs an application instance's processes on a host,
// confined and bounded by what its reservation gave it, so that they
// outlive the manager that started them.
//
// Confinement (Sandbox, sandbox_linux.go): every process of an instance
// runs in PID, IPC and UTS namespaces of its own and in a mount namespace
// where the host is read-only, /tmp, /var/tmp and /dev/shm are private,
// /dev is minimal, /proc is the instance's, the paths of Sandbox.Hide are
// empty, and only Sandbox.Writable (and, read-only, Sandbox.ReadOnly)
// appear; with Network "none", also a network namespace of its own. It
// runs as Spec.UID/GID (never root) with no supplementary groups,
// no_new_privs and an empty capability bounding set. docs/sandbox.md says
// what that lets an application do.
//
// Limits: each group (a reservation) has a cgroup, PARENT/GROUP, with
// Limits.CPUs as a CFS quota, Limits.Mem as a memory limit with no swap
// (the kernel kills past it; reported oom-killed) and Limits.Pids; each
// instance has a cgroup inside it, PARENT/GROUP/ID (cgroup v2, or v1
// with the cpu, cpuacct, memory, freezer and pids controllers), so the
// group's instances share its limits. Pause and Resume use the freezer.
//
// Supervision: Start hands the instance to a supervisor (the shim): this
// same executable, started ahead of need as a standby and kept ready (the
// Go runtime's start is then off the critical path). The standby, while
// it waits, and the shim, once its program runs, give back the pages of
// the executable that starting touched (internal/memtrim): a shim holds
// about 7 MiB instead of 23. The shim is the
// first process of the instance's PID namespace and makes the cgroups on
// one thread while another builds the sandbox and stays in it for good;
// every process of the instance is forked from that thread straight into
// the instance's cgroup. The shim records each exit in the instance's
// state file, restarts by the policy (never, or on failure up to Max
// with a backoff), sends the stop signal to every process of the
// instance on Stop and SIGKILLs those left after the grace (a daemon the
// program left behind has the whole grace, even when the program itself
// ends at once), rotates the output
// files, and runs commands inside the instance on request (Exec, through
// its control socket, an abstract one that serves only root). When the
// shim ends — even by kill -9 — the kernel kills every process of the
// instance. A manager that dies leaves its applications running; a new
// Runner on the same state directory finds them with Adopt. Exec for an
// instance that does not run (an install step) gets a one-shot sandbox
// of its own.
//
// The caller needs nothing in main: a process started as a standby is
// taken over by this package's init, before main or TestMain. It keeps
// one Runner per state directory, serialises the operations on one
// instance, gives each group's instances their uid, and calls Close when
// the manager stops. New fails, saying why, where applications cannot be
// confined: not root, no cgroups, no namespaces, a kernel before 5.12.
//
// Nested mode (Options.Nested) is for a manager that itself runs inside
// a sandbox confining everything it starts: a glide-in, the gridmgr
// binary deployed as another manager's application onto a reservation,
// running the launching user's jobs there. The enclosing sandbox is then
// the tenant boundary, and the nested runner adds none: no namespaces,
// no cgroups, no setuid. New needs only a state directory it can write
// and a standby it can start, and refuses to run as root (that would be
// no confinement at all). Instances run as the manager's own uid and
// gid (a Spec asking for another is refused; 0 means its own), with the
// same shim: supervision, restarts by policy, exits in the state file,
// output rotation, Exec through the control socket (served to the
// manager's uid), Adopt. Each process is started in a session of its
// own; the shim is a child subreaper, so a process that double-forks or
// calls setsid stays in its tree, and Stop and the shim's own end kill
// every descendant. The shim runs under a keeper (this executable
// again, also a subreaper) that kills whatever the shim leaves when it
// ends, by kill -9 too; only a kill of both at once leaves processes
// behind, until the enclosing sandbox ends. Not enforced per instance:
// Limits (the enclosing cgroup bounds the whole manager; an OOM kill is
// reported as "signal KILL"), Sandbox (paths, Hide, Hostname, TmpBytes;
// Network "none" is refused, as there is no namespace to give it), and
// separation between instances — they share the uid, may signal each
// other and the manager, and read the manager's state directory. Status
// reads usage from /proc: CPU time of the tree (live, and ended
// processes the shim reaped) and the sum of its resident sets. Pause
// sends SIGSTOP to every process of the tree (a process of the same uid
// may continue them: it is not enforced against the application) and
// Resume SIGCONT; a marker file in the state directory says paused.
//
// The caller must only set Nested where an enclosing sandbox confines
// the manager (a glide-in deployed by a manager that is not nested);
// elsewhere it would run applications unconfined.
package runner
