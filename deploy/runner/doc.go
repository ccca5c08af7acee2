// Package runner runs an application instance's processes on a host,
// bounded by what its reservation gave it, so that they outlive the
// manager that started them.
//
// Each instance gets a cgroup of its own, PARENT/ID (cgroup v2, or v1 with
// the cpu, cpuacct, memory, freezer and pids controllers; through
// github.com/containerd/cgroups/v3): Limits.CPUs becomes a CFS quota,
// Limits.Mem a memory limit with no swap (the kernel kills past it, and
// the instance is then reported oom-killed), Limits.Pids a pids limit.
// Pause and Resume use the freezer.
//
// Start launches a supervisor (the shim) for the instance: this same
// executable again, in a session of its own, outside the cgroup (its
// memory does not count against the instance). The shim starts the
// program through a small exec helper (this executable once more) that
// joins the cgroup, lowers its priority, becomes the instance's user and
// execs the program in its own process group; so the program and all it
// forks start inside the limits. The shim records each exit in the
// instance's state file, restarts by the policy (never, or on failure up
// to Max with a backoff), sends the stop signal to the process group on
// Stop and SIGKILLs the whole cgroup after the grace, and rotates the
// output files (copy, then truncate: the program appends). Because the
// shim, not the manager, is the program's parent, a manager that dies —
// even with kill -9 — leaves its applications running; a new Runner on the
// same state directory finds them with Adopt, and kills what is left of
// an instance whose shim died.
//
// The caller must call MaybeShim first thing in main (and in TestMain of
// tests that run applications): a process started as a shim or exec
// helper never returns from it. It keeps one Runner per state directory
// and serialises the operations on one instance. Making cgroups needs
// root; New says so when it cannot.
package runner
