package memnet

import (
	"fmt"
	"time"

	"github.com/gridmgr/gridmgr/wire"
)

// A parallel window. With Workers > 1, RunFor takes the events due in the
// next Lookahead of virtual time (a window), splits them into tasks by the
// manager they belong to (event.owner), and the workers (the caller's
// goroutine and a crew, crew.go) take the tasks and run each task's events
// in time order: nothing a manager does in the window can
// reach another manager before the window ends (every message, dial,
// disconnection, reply and sample takes at least Lookahead), so the
// managers of a window are independent. What a manager does to the world
// outside itself — the hooks (Trace, OnEvent, OnPublish) and the events it
// schedules — is recorded, not done, and carried out afterwards in the
// order one goroutine would have run the window in: the window's events
// are replayed, metadata only, through a queue ordered as the Net's is
// (time, then scheduling order), giving each event the sequence number it
// would have had. So a run with workers is the same run as without: the
// same events, in the same order for each manager and for every hook.
//
// An event that may touch several managers or the caller's state (a dial,
// a client reply, a plugin, the caller's After) has no owner: it ends a
// window and runs alone, as before.

// ctx is where an event runs: the Net's own goroutine (Net.main, whose
// clock is the virtual time) or a worker in a window.
type ctx struct {
	n     *Net
	now   time.Time
	w     *worker // nil for main
	ticks int
}

// after schedules fn after d, for owner (nil: it runs alone).
func (c *ctx) after(owner *Node, d time.Duration, fn func(c *ctx)) {
	at := int64(c.now.Sub(Epoch) + d)
	if c.w == nil {
		c.n.seq++
		c.n.queue.push(event{at: at, seq: c.n.seq, fn: fn, owner: owner})
		return
	}
	c.w.schedule(event{at: at, fn: fn, owner: owner})
}

// hook runs fn now, or in a window records it to run when the window's
// events are replayed.
func (c *ctx) hook(fn func()) {
	if c.w == nil {
		fn()
		return
	}
	*c.w.hooks.next() = hook{fn: fn}
	c.w.cur.nhooks++
}

// trace is the Trace and Sized hooks of a delivery (the commonest hook:
// recorded without a closure). The message is sized here, on the worker,
// not in the window's serial replay.
func (c *ctx) trace(from string, to *Node, env *wire.Envelope) {
	size := int32(-1)
	if c.n.Sized != nil {
		size = int32(env.SizeVT())
	}
	if c.w == nil {
		c.n.traced(c.now, from, to, env, size)
		return
	}
	*c.w.hooks.next() = hook{from: from, to: to, env: env, size: size}
	c.w.cur.nhooks++
}

func (n *Net) traced(at time.Time, from string, to *Node, env *wire.Envelope, size int32) {
	if n.Trace != nil {
		n.Trace(at, from, to, env)
	}
	if size >= 0 && n.Sized != nil {
		n.Sized(to, env, int(size))
	}
}

// hook is a hook called by a window's event, replayed at the event's time
// (the time a delivery is traced at: an event's time does not move while
// it runs).
type hook struct {
	fn   func() // nil: a delivery (Trace, Sized)
	from string
	to   *Node
	env  *wire.Envelope
	size int32 // the message's encoded size; -1: not sized
}

// pev is an event of a window. What it scheduled and the hooks it called
// are its worker's kids[kid:kid+nkids] and hooks[hook:hook+nhooks] (a
// worker runs one event at a time, so each event's are contiguous).
type pev struct {
	e                        event
	w                        *worker
	kid, nkids, hook, nhooks int32
	ran                      bool
}

type worker struct {
	c     ctx
	end   int64 // events before it run in the window
	t     *pevs // the task it runs: its events in time order
	cur   *pev
	next  uint64 // provisional sequence numbers of events made in the window
	kids  []*pev
	hooks chunks[hook]
	slab  chunks[pev] // the events it schedules
}

// chunks hands out the slots of a window's records (its events, the hooks
// they called), in fixed chunks reused from window to window: a window's
// records are dead once it is replayed. The settle of a large grid has
// windows of hundreds of thousands of events with three hooks each (every
// manager dials, greets and is greeted at once); a slice grown by append
// held up to twice the largest window's, three times while it was copied,
// and all of it to the end of the run.
type chunks[T any] struct {
	c    [][]T
	n    int32 // slots handed out since the last reset
	most int32 // the most chunks a recent window used (reset)
}

const chunkLen = 256

// next is a fresh slot.
func (s *chunks[T]) next() *T {
	i := s.n / chunkLen
	if int(i) == len(s.c) {
		s.c = append(s.c, make([]T, chunkLen))
	}
	p := &s.c[i][s.n%chunkLen]
	s.n++
	return p
}

// at is the i-th slot handed out since the last reset.
func (s *chunks[T]) at(i int32) *T { return &s.c[i/chunkLen][i%chunkLen] }

// reset makes every slot free again (what they point to may go) and keeps
// twice the chunks that recent windows used at most, letting the rest go.
// The most decays by a 64th a window (at least one chunk; a few hundred
// windows are a virtual second), so that a grid that settled soon keeps
// what its windows at rest need, not what its settle needed, while windows
// of about the same size do not make and drop chunks.
func (s *chunks[T]) reset() {
	used := int((s.n + chunkLen - 1) / chunkLen)
	for _, c := range s.c[:used] {
		clear(c)
	}
	s.n = 0
	s.most = max(s.most-max(s.most/64, 1), int32(used))
	if keep := max(2*int(s.most), 4); len(s.c) > keep {
		clear(s.c[keep:])
		s.c = s.c[:keep]
	}
}

// provisional sequence numbers come after every real one: an event made
// in the window runs after any event already queued for the same time, as
// it would on one goroutine (the order among a manager's own new events is
// the order they were made in).
const provisional = 1 << 63

func (w *worker) schedule(e event) {
	p := w.slab.next()
	p.e, p.w = e, w
	w.kids = append(w.kids, p)
	w.cur.nkids++
	if e.at >= w.end {
		return
	}
	if e.owner != w.cur.e.owner {
		panic(fmt.Sprintf("memnet: an event %v after another, for another manager, inside the lookahead %v",
			time.Duration(e.at)-w.c.now.Sub(Epoch), w.c.n.Lookahead))
	}
	w.next++
	p.e.seq = provisional | w.next
	w.t.push(p)
}

// run runs task t's events in time order. Which worker runs which task
// does not matter: a task's managers are its own (their events, and what
// they schedule for themselves inside the window, stay in it), and what
// the events did is replayed in one order afterwards.
func (w *worker) run(t *pevs) {
	w.t = t
	for len(*t) > 0 {
		p := t.pop()
		p.w, p.kid, p.hook = w, int32(len(w.kids)), w.hooks.n
		w.cur = p
		w.c.now = Epoch.Add(time.Duration(p.e.at))
		p.e.owner.cx = &w.c
		p.e.fn(&w.c)
		// Here, not in the replay, where the manager is in this core's
		// cache: its hooks replay in the main context.
		p.e.owner.cx = &w.c.n.main
		p.ran = true
	}
}

// tasksPerWorker is how many tasks a window is cut into for each worker:
// enough that a worker that starts late or stalls leaves the others
// something to take (crew.go), few enough that taking one is cheap beside
// its events (a window holds a few hundred).
const tasksPerWorker = 8

// minWindow is the fewest events a window needs to be split among
// workers; fewer run on one worker in the caller's goroutine (the same
// run, without the hand-offs).
const minWindow = 16

// parallel reports whether RunFor may run windows on workers.
func (n *Net) parallel() bool {
	return n.Workers > 1 && n.Lookahead > 0 && n.Drop == nil && !n.TickAlways
}

// window runs the events due before the first of: the head's time plus
// Lookahead, last (inclusive), and the first event without an owner.
func (n *Net) window(last int64) {
	end := min(n.queue.front().at+int64(n.Lookahead), last+1)
	n.pw.slab.reset()
	batch := n.pw.batch[:0]
	for f := n.queue.front(); f != nil && f.at < end; f = n.queue.front() {
		if f.owner == nil {
			end = f.at // it and what follows it at its time wait
			break
		}
		p := n.pw.slab.next()
		p.e = n.queue.pop()
		batch = append(batch, p)
	}
	n.pw.batch = batch
	// Events at end's time popped before an ownerless one stay in the
	// window: they come before it. What they make for that time does not.
	nw := n.Workers
	if len(batch) < minWindow {
		nw = 1
	}
	if len(n.pw.ws) < n.Workers {
		n.pw.ws = make([]worker, n.Workers)
	}
	ws := n.pw.ws[:nw]
	for i := range ws {
		w := &ws[i]
		w.slab.reset()
		w.c = ctx{n: n, w: w}
		w.end, w.next, w.kids = end, 0, w.kids[:0]
	}
	nt := 1
	if nw > 1 {
		nt = nw * tasksPerWorker
	}
	if cap(n.pw.tasks) < nt {
		n.pw.tasks = append(n.pw.tasks[:cap(n.pw.tasks)], make([]pevs, nt-cap(n.pw.tasks))...)
	}
	n.pw.tasks = n.pw.tasks[:nt]
	for _, p := range batch {
		n.pw.tasks[int(p.e.owner.Index)%nt].push(p)
	}
	if nw == 1 {
		ws[0].run(&n.pw.tasks[0])
	} else {
		if n.pw.crew == nil {
			n.pw.crew = n.startCrew()
		}
		n.pw.crew.run(nt)
	}
	// Replay in the one-goroutine order: real sequence numbers, hooks,
	// and the events for later into the Net's queue. The batch came out
	// of the queue in that order; the events made and run in the window
	// (q) are merged into it.
	q := n.pw.q[:0]
	for b := 0; b < len(batch) || len(q) > 0; {
		var p *pev
		if len(q) > 0 && (b == len(batch) || q[0].e.before(&batch[b].e)) {
			p = q.pop()
		} else {
			p = batch[b]
			b++
		}
		n.main.now = Epoch.Add(time.Duration(p.e.at))
		n.Steps++
		for i := p.hook; i < p.hook+p.nhooks; i++ {
			if h := p.w.hooks.at(i); h.fn != nil {
				h.fn()
			} else {
				n.traced(n.main.now, h.from, h.to, h.env, h.size)
			}
		}
		for _, k := range p.w.kids[p.kid : p.kid+p.nkids] {
			n.seq++
			k.e.seq = n.seq
			if k.ran {
				q.push(k)
			} else {
				n.queue.push(k.e)
			}
		}
	}
	n.pw.q = q
	for i := range ws {
		n.Ticks += ws[i].c.ticks
		clear(ws[i].kids)
		ws[i].hooks.reset()
	}
}

// windows is what windows reuse from one to the next.
type windows struct {
	slab  chunks[pev] // the events taken from the queue
	batch []*pev
	q     pevs // a window's events made and run in it, in the replay
	ws    []worker
	crew  *crew  // during a runTo, from its first window split
	tasks []pevs // a window's events, split by manager
}

// pevs is a min-heap of window events by (at, seq).
type pevs []*pev

func (q *pevs) push(p *pev) {
	h := append(*q, p)
	i := len(h) - 1
	for i > 0 {
		j := (i - 1) / 2
		if !h[i].e.before(&h[j].e) {
			break
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
	*q = h
}

func (q *pevs) pop() *pev {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = nil
	h = h[:last]
	for i := 0; ; {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].e.before(&h[l].e) {
			m = r
		}
		if !h[m].e.before(&h[i].e) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}
