package memnet

import (
	"runtime"
	"sync/atomic"
	"time"
)

// crew is the goroutines that help the caller's goroutine run the tasks of
// the parallel windows of one runTo, one goroutine per worker but the
// first (which is the caller's). A window never waits for a member to
// start: the caller starts on the tasks at once, and each member takes
// what is left when it gets there. Waking a sleeping thread took longer
// here than a window's serial part (on a 2-vCPU virtual machine a
// goroutine started for each window began 336 µs after the caller on
// average, 4.7 s of a 44 s run of patent-100k, with the caller then
// waiting for its half of the window); members that spun between windows
// instead kept the collector off the idle core and gained nothing at
// 100,000 managers.
//
// The hand-off is lock-free. state packs the window's number, its count
// of tasks and the next task to take; a task is taken by moving the next
// one on, only while the number is still the window's, so a member that
// comes late takes nothing from the next window. done counts the tasks
// run, and the caller waits only for tasks that are being run. The
// caller sets up the workers before it stores state (a member reads
// them after it loads it), and a member's worker is the member's only
// from taking a task to counting it done.
type crew struct {
	n     *Net
	state atomic.Uint64 // window << 32 | tasks << 16 | next task
	done  atomic.Int32
	stop  atomic.Bool
	wakes []chan struct{}
}

// idleSpin is how long a member looks for the next window before it
// sleeps: short, so that it does not keep a core from the collector
// through a long serial part. (Not tuned: 50 µs was the one value tried.)
const idleSpin = 50 * time.Microsecond

func (n *Net) startCrew() *crew {
	c := &crew{n: n, wakes: make([]chan struct{}, n.Workers-1)}
	for i := range c.wakes {
		c.wakes[i] = make(chan struct{}, 1)
		go c.serve(i + 1)
	}
	return c
}

// take returns the index of a task of window gen to run, or -1.
func (c *crew) take(gen uint64) int {
	for {
		s := c.state.Load()
		if s>>32 != gen || s&0xffff >= s>>16&0xffff {
			return -1
		}
		if c.state.CompareAndSwap(s, s+1) {
			return int(s & 0xffff)
		}
	}
}

// runTasks runs the tasks of window gen that are left, on worker w.
func (c *crew) runTasks(gen uint64, w *worker) {
	for i := c.take(gen); i >= 0; i = c.take(gen) {
		w.run(&c.n.pw.tasks[i])
		c.done.Add(1)
	}
}

// serve is the goroutine of member i (worker i).
func (c *crew) serve(i int) {
	seen := uint64(0)
	wake := c.wakes[i-1]
	for {
		gen := c.await(wake, seen)
		if c.stop.Load() {
			return
		}
		seen = gen
		c.runTasks(gen, &c.n.pw.ws[i])
	}
}

// await returns the window after seen, once there is one.
func (c *crew) await(wake chan struct{}, seen uint64) uint64 {
	start := time.Now()
	for k := 1; ; k++ {
		if g := c.state.Load() >> 32; g != seen || c.stop.Load() {
			return g
		}
		if k%16 == 0 {
			if time.Since(start) > idleSpin {
				break
			}
			runtime.Gosched()
		}
	}
	for {
		<-wake
		if g := c.state.Load() >> 32; g != seen || c.stop.Load() {
			return g
		}
	}
}

// run runs the window the caller has set up in nt tasks, with whichever
// members come in time, and returns when every task has run.
func (c *crew) run(nt int) {
	gen := c.state.Load()>>32 + 1
	c.done.Store(0)
	c.state.Store(gen<<32 | uint64(nt)<<16)
	for _, w := range c.wakes {
		select {
		case w <- struct{}{}:
		default: // already woken
		}
	}
	c.runTasks(gen, &c.n.pw.ws[0])
	for c.done.Load() != int32(nt) {
		runtime.Gosched() // a member is running a task
	}
}

// endCrew tells the crew of the runTo ending, if one started, that there
// will be no more windows. Its members return when they next look; they
// take nothing more, so nothing waits for them.
func (n *Net) endCrew() {
	c := n.pw.crew
	if c == nil {
		return
	}
	n.pw.crew = nil
	c.stop.Store(true)
	for _, w := range c.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}
