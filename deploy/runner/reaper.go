package runner

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// reaper waits for the children of a process that is the first of its
// PID namespace: its own children and every orphan of the namespace,
// which the kernel gives to it. Each exit goes to whoever registered
// the pid; an exit that comes before its registration (the child was
// quick) is kept until it is asked for, and other orphans are simply
// reaped. Nothing else in the process may wait for children.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
	early   map[int]syscall.WaitStatus
}

func newReaper() *reaper {
	r := &reaper{waiting: map[int]chan syscall.WaitStatus{}, early: map[int]syscall.WaitStatus{}}
	ch := make(chan os.Signal, 64)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		for {
			r.reap()
			<-ch
		}
	}()
	return r
}

// reap collects every child that has ended.
func (r *reaper) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		r.mu.Lock()
		if c, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			c <- ws
		} else if len(r.early) < 4096 {
			r.early[pid] = ws
		}
		r.mu.Unlock()
	}
}

// wait returns a channel that gets pid's exit status. Call it right after
// the fork, once per pid.
func (r *reaper) wait(pid int) <-chan syscall.WaitStatus {
	c := make(chan syscall.WaitStatus, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ws, ok := r.early[pid]; ok {
		delete(r.early, pid)
		c <- ws
		return c
	}
	r.waiting[pid] = c
	return c
}

// forget drops what is kept of orphans (after the program's exit, when
// the namespace is emptied).
func (r *reaper) forget() {
	r.mu.Lock()
	clear(r.early)
	r.mu.Unlock()
}
