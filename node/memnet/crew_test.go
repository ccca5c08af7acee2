package memnet

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestTakeOnlyFromItsWindow: a task is handed out once, and only to a
// taker of the window that is running; one that comes late for an
// earlier window gets nothing, even while the next window has tasks left.
func TestTakeOnlyFromItsWindow(t *testing.T) {
	var c crew
	c.state.Store(1<<32 | 3<<16)
	for want := range 3 {
		if got := c.take(1); got != want {
			t.Fatalf("window 1: took %d, want %d", got, want)
		}
	}
	if got := c.take(1); got != -1 {
		t.Fatalf("window 1 has 3 tasks; a fourth take got %d", got)
	}
	c.state.Store(2<<32 | 5<<16)
	if got := c.take(1); got != -1 {
		t.Fatalf("a take for window 1 got task %d of window 2", got)
	}
	if got := c.take(2); got != 0 {
		t.Fatalf("window 2: took %d, want 0", got)
	}
}

// TestCrewRunsEveryEventOnce: windows run by a crew of 2 and 4 workers,
// with events that schedule more for their own manager inside the window
// and beyond it, run every event once, at its time, in each manager's
// order: what one worker runs. Under -race it also checks the hand-offs
// (a member reads the window only after the caller has set it up, and the
// caller reads what members did only after they have counted it done).
// Afterwards the members return.
func TestCrewRunsEveryEventOnce(t *testing.T) {
	run := func(workers int) string {
		n := New(1)
		n.Workers, n.Lookahead = workers, time.Millisecond
		owners := make([]*Node, 64)
		logs := make([][]int64, len(owners))
		var fn func(o *Node) func(c *ctx)
		fn = func(o *Node) func(c *ctx) {
			return func(c *ctx) {
				logs[o.Index] = append(logs[o.Index], int64(c.now.Sub(Epoch)))
				k := len(logs[o.Index])
				if k >= 300 {
					return
				}
				if k%3 == 0 { // inside the window
					c.after(o, 100*time.Microsecond, fn(o))
				}
				c.after(o, time.Duration(1+(k+int(o.Index))%5)*time.Millisecond, fn(o))
			}
		}
		for i := range owners {
			owners[i] = &Node{Index: int32(i)}
			n.main.after(owners[i], time.Duration(i)*time.Microsecond, fn(owners[i]))
		}
		n.RunFor(time.Hour)
		if n.queue.Len() != 0 {
			t.Fatalf("%d workers: %d events left", workers, n.queue.Len())
		}
		return fmt.Sprintf("steps %d\n%v", n.Steps, logs)
	}
	before := runtime.NumGoroutine()
	one := run(1)
	for _, w := range []int{2, 4} {
		if got := run(w); got != one {
			t.Fatalf("%d workers ran another run than one:\n%.400s\n--- one:\n%.400s", w, got, one)
		}
	}
	// The members of the crews return once they see their runTo ended;
	// nothing waits for them, so look until they have.
	for end := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; runtime.Gosched() {
		if time.Now().After(end) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before the runs:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	}
}
