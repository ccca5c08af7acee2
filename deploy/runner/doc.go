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
// Go runtime's start is then off the critical path). The shim is the
// first process of the instance's PID namespace and makes the cgroups on
// one thread while another builds the sandbox and stays in it for good;
// every process of the instance is forked from that thread straight into
// the instance's cgroup. The shim records each exit in the instance's
// state file, restarts by the policy (never, or on failure up to Max
// with a backoff), sends the stop signal to every process of the
// instance on Stop and SIGKILLs them after the grace, rotates the output
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
package runner
