package reservation_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/anishathalye/porcupine"

	rv "github.com/gridmgr/gridmgr/reservation"
)

// Linearizability of Reserve / Release / Usage under concurrency, checked
// with porcupine against a sequential model of the ledger. Time is fixed
// (no expiry), so the model is: used per kind, the live reservations by
// sequence number, and the next sequence number. Reserve is granted with
// the next number iff every amount fits; Release frees a live one and
// changes nothing otherwise; a Usage read returns what is used.

var lnKinds = [2]string{rv.CPUs, ltGPUs}

const (
	lnReserve = iota
	lnRelease
	lnRead
)

type lnIn struct {
	op  int
	amt [2]int64 // reserve
	seq uint64   // release
}

type lnOut struct {
	ok   bool     // reserve granted; release did release
	seq  uint64   // reserve: the sequence number granted
	used [2]int64 // read
}

type lnState struct {
	used [2]int64
	next uint64
	live map[uint64][2]int64
}

// lnModel is the sequential specification with capacities caps.
func lnModel(caps [2]int64) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return lnState{next: 1, live: map[uint64][2]int64{}} },
		Step: func(st, in, out any) (bool, any) {
			s, i, o := st.(lnState), in.(lnIn), out.(lnOut)
			switch i.op {
			case lnReserve:
				fits := true
				for k := range lnKinds {
					fits = fits && s.used[k]+i.amt[k] <= caps[k]
				}
				if !fits {
					return !o.ok, s
				}
				if !o.ok || o.seq != s.next {
					return false, s
				}
				n := lnState{used: s.used, next: s.next + 1, live: maps.Clone(s.live)}
				for k := range lnKinds {
					n.used[k] += i.amt[k]
				}
				n.live[o.seq] = i.amt
				return true, n
			case lnRelease:
				amt, live := s.live[i.seq]
				if !live {
					return !o.ok, s
				}
				if !o.ok {
					return false, s
				}
				n := lnState{used: s.used, next: s.next, live: maps.Clone(s.live)}
				for k := range lnKinds {
					n.used[k] -= amt[k]
				}
				delete(n.live, i.seq)
				return true, n
			default:
				return o.used == s.used, s
			}
		},
		Equal: func(a, b any) bool {
			x, y := a.(lnState), b.(lnState)
			return x.used == y.used && x.next == y.next && maps.Equal(x.live, y.live)
		},
		DescribeOperation: func(in, out any) string {
			i, o := in.(lnIn), out.(lnOut)
			switch i.op {
			case lnReserve:
				return fmt.Sprintf("reserve(%v) -> %v #%d", i.amt, o.ok, o.seq)
			case lnRelease:
				return fmt.Sprintf("release(#%d) -> %v", i.seq, o.ok)
			}
			return fmt.Sprintf("read -> %v", o.used)
		},
	}
}

var lnCaps = [2]int64{6, 2}

// lnClient performs one operation on the ledger and returns its output.
type lnClient struct {
	l   *ownedLedger
	h   rv.Holder
	g   int
	n   int
	err func(string, ...any)
}

func (c *lnClient) do(in lnIn) lnOut {
	c.n++
	rid := "c" + strconv.Itoa(c.g) + "-" + strconv.Itoa(c.n)
	switch in.op {
	case lnReserve:
		var amounts []rv.Amount
		for k, kind := range lnKinds {
			if in.amt[k] > 0 {
				amounts = append(amounts, rv.Amount{Kind: kind, N: in.amt[k]})
			}
		}
		r, dup, err := c.l.Reserve(ltEpoch, rv.Request{RequestID: rid, Holder: c.h, Amounts: amounts})
		if err != nil {
			if rv.CodeOf(err) != rv.CodeRefused {
				c.err("reserve %v: %v", in.amt, err)
			}
			return lnOut{}
		}
		_, seq, _, perr := rv.ParseID(r.ID)
		if perr != nil || dup {
			c.err("reserve %v: id %q dup %v: %v", in.amt, r.ID, dup, perr)
		}
		return lnOut{ok: true, seq: seq}
	case lnRelease:
		id := rv.FormatID(ltName, in.seq, rv.Tag(ltPeer))
		r, _, err := c.l.Apply(ltEpoch, rv.Mutation{Op: rv.OpRelease, ID: id, By: ltAdmin, Admin: true, RequestID: rid})
		if err != nil || r.State != rv.Released {
			c.err("release %s: %+v %v", id, r, err)
			return lnOut{}
		}
		// The op record with our request id says that this call released it.
		did := slices.ContainsFunc(r.Ops, func(o rv.OpRecord) bool { return o.RequestID == rid })
		return lnOut{ok: did}
	default:
		var o lnOut
		for _, u := range c.l.Usage() {
			for k, kind := range lnKinds {
				if u.Kind == kind {
					o.used[k] = u.Used
				}
			}
		}
		return o
	}
}

// concurrentHistory records a concurrent history of clients × ops
// operations: client g's next picks its operations (rng is its own) and do
// performs them. All clients begin together, and each yields at random
// inside [call, ret], so that operations of different clients overlap in
// real time even when the scheduler would otherwise run them one after the
// other.
func concurrentHistory[I, O any](seed uint64, clients, ops int, client func(g int) (next func(*rand.Rand) I, do func(I) O)) []porcupine.Operation {
	var (
		clock atomic.Int64 // orders calls and returns in real time
		mu    sync.Mutex
		hist  []porcupine.Operation
		wg    sync.WaitGroup
		ready sync.WaitGroup
		start = make(chan struct{})
	)
	ready.Add(clients)
	for g := range clients {
		wg.Go(func() {
			next, do := client(g)
			ready.Done()
			<-start
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			var local []porcupine.Operation
			for range ops {
				in := next(rng)
				y := rng.IntN(4)
				call := clock.Add(1)
				if y == 0 {
					runtime.Gosched()
				}
				out := do(in)
				if y == 1 {
					runtime.Gosched()
				}
				ret := clock.Add(1)
				local = append(local, porcupine.Operation{ClientId: g, Input: in, Call: call, Output: out, Return: ret})
			}
			mu.Lock()
			hist = append(hist, local...)
			mu.Unlock()
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	return hist
}

// grants are the sequence numbers granted so far, shared by clients.
type grants struct {
	mu   sync.Mutex
	seqs []uint64
}

func (g *grants) add(seq uint64) {
	g.mu.Lock()
	g.seqs = append(g.seqs, seq)
	g.mu.Unlock()
}

// pick is one of them at random; false if there is none yet.
func (g *grants) pick(rng *rand.Rand) (uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.seqs) == 0 {
		return 0, false
	}
	return g.seqs[rng.IntN(len(g.seqs))], true
}

// lnRun records a concurrent history: clients × ops operations.
func lnRun(t *testing.T, seed uint64, clients, ops int) []porcupine.Operation {
	l := rv.NewLedger(ltName, ltPeer, ltLimits())
	for k, kind := range lnKinds {
		l.SetCapacity(kind, lnCaps[k])
	}
	ol := own(l)
	var granted grants // every sequence number granted so far, for releases of others'
	return concurrentHistory(seed, clients, ops, func(g int) (func(*rand.Rand) lnIn, func(lnIn) lnOut) {
		c := &lnClient{l: ol, h: rv.Holder{Peer: "12D3KooWLinPeer" + strconv.Itoa(g)}, g: g, err: t.Errorf}
		var mine []uint64
		next := func(rng *rand.Rand) lnIn {
			switch x := rng.IntN(10); {
			case x < 5:
				return lnIn{op: lnReserve, amt: [2]int64{1 + rng.Int64N(3), rng.Int64N(2)}}
			case x < 8:
				if len(mine) > 0 && rng.IntN(3) != 0 {
					i := rng.IntN(len(mine))
					in := lnIn{op: lnRelease, seq: mine[i]}
					mine = slices.Delete(mine, i, i+1)
					return in
				}
				// someone's, maybe released already, maybe being released
				if seq, ok := granted.pick(rng); ok {
					return lnIn{op: lnRelease, seq: seq}
				}
				return lnIn{op: lnRead}
			}
			return lnIn{op: lnRead}
		}
		do := func(in lnIn) lnOut {
			out := c.do(in)
			if in.op == lnReserve && out.ok {
				mine = append(mine, out.seq)
				granted.add(out.seq)
			}
			return out
		}
		return next, do
	})
}

func TestLedgerLinearizable(t *testing.T) {
	good, wrong := lnModel(lnCaps), lnModel([2]int64{lnCaps[0] + 1, lnCaps[1]})
	seeds := 8
	if testing.Short() {
		seeds = 3
	}
	wrongRejected, totalOverlaps := 0, 0
	for seed := range uint64(seeds) {
		hist := lnRun(t, seed, 8, 40)
		granted, refused := 0, 0
		for _, op := range hist {
			if in := op.Input.(lnIn); in.op == lnReserve {
				if op.Output.(lnOut).ok {
					granted++
				} else {
					refused++
				}
			}
		}
		overlaps := 0 // pairs of operations of different clients that overlap in time
		for i, a := range hist {
			for _, b := range hist[i+1:] {
				if a.ClientId != b.ClientId && a.Call < b.Return && b.Call < a.Return {
					overlaps++
				}
			}
		}
		totalOverlaps += overlaps
		if !porcupine.CheckOperations(good, hist) {
			t.Errorf("seed %d: history of %d operations is not linearizable", seed, len(hist))
		}
		if !porcupine.CheckOperations(wrong, hist) {
			wrongRejected++
		}
		t.Logf("seed %d: %d ops, %d granted, %d refused, %d overlapping pairs", seed, len(hist), granted, refused, overlaps)
	}
	// Negative control on recorded histories: a model that believes there
	// is one cpu more must fail at least one of them (a refusal that only
	// the extra cpu would have granted).
	t.Logf("the wrong model rejected %d of %d histories", wrongRejected, seeds)
	if totalOverlaps == 0 {
		t.Errorf("no two operations overlapped: nothing concurrent was checked")
	}
	if wrongRejected == 0 {
		t.Errorf("a model with capacity+1 accepted every history: the check cannot fail")
	}
}

// TestLedgerLinearizableControls shows that the model and the checker
// reject histories that are not linearizable, deterministically.
func TestLedgerLinearizableControls(t *testing.T) {
	good, wrong := lnModel(lnCaps), lnModel([2]int64{lnCaps[0] + 1, lnCaps[1]})
	res := func(amt ...int64) lnIn { return lnIn{op: lnReserve, amt: [2]int64{amt[0], amt[1]}} }
	rel := func(seq uint64) lnIn { return lnIn{op: lnRelease, seq: seq} }
	read := lnIn{op: lnRead}
	op := func(c int, in lnIn, call, ret int64, out lnOut) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret}
	}

	// A sequential history recorded from the real ledger: fill the cpus,
	// be refused one more, read. The wrong model would have granted it.
	l := rv.NewLedger(ltName, ltPeer, ltLimits())
	for k, kind := range lnKinds {
		l.SetCapacity(kind, lnCaps[k])
	}
	c := &lnClient{l: own(l), h: ltAlice, err: t.Errorf}
	var seqHist []porcupine.Operation
	for i, in := range []lnIn{res(4, 1), res(2, 0), res(1, 0), read, rel(1), res(1, 1), read} {
		seqHist = append(seqHist, op(0, in, int64(2*i), int64(2*i+1), c.do(in)))
	}
	if !porcupine.CheckOperations(good, seqHist) {
		t.Errorf("recorded sequential history rejected by the model: %+v", seqHist)
	}
	if porcupine.CheckOperations(wrong, seqHist) {
		t.Errorf("the wrong model accepted a recorded history with a refusal it would have granted: %+v", seqHist)
	}

	for _, c := range []struct {
		name string
		ok   bool
		hist []porcupine.Operation
	}{
		{"over-commit, one after the other", false, []porcupine.Operation{
			op(0, res(4, 0), 0, 1, lnOut{ok: true, seq: 1}),
			op(1, res(3, 0), 2, 3, lnOut{ok: true, seq: 2}),
		}},
		{"over-commit, concurrent", false, []porcupine.Operation{
			op(0, res(4, 0), 0, 3, lnOut{ok: true, seq: 1}),
			op(1, res(3, 0), 1, 2, lnOut{ok: true, seq: 2}),
		}},
		{"refused with room", false, []porcupine.Operation{
			op(0, res(1, 1), 0, 1, lnOut{}),
		}},
		{"numbers out of real-time order", false, []porcupine.Operation{
			op(0, res(1, 0), 0, 1, lnOut{ok: true, seq: 2}),
			op(1, res(1, 0), 2, 3, lnOut{ok: true, seq: 1}),
		}},
		{"stale read after a release returned", false, []porcupine.Operation{
			op(0, res(2, 1), 0, 1, lnOut{ok: true, seq: 1}),
			op(0, rel(1), 2, 3, lnOut{ok: true}),
			op(1, read, 4, 5, lnOut{used: [2]int64{2, 1}}),
		}},
		{"released twice", false, []porcupine.Operation{
			op(0, res(2, 1), 0, 1, lnOut{ok: true, seq: 1}),
			op(0, rel(1), 2, 5, lnOut{ok: true}),
			op(1, rel(1), 3, 4, lnOut{ok: true}),
		}},
		{"read during a reserve sees it", true, []porcupine.Operation{
			op(1, read, 0, 5, lnOut{used: [2]int64{3, 0}}),
			op(0, res(3, 0), 1, 2, lnOut{ok: true, seq: 1}),
		}},
		{"concurrent release and refusal, release first", true, []porcupine.Operation{
			op(0, res(6, 0), 0, 1, lnOut{ok: true, seq: 1}),
			op(0, rel(1), 2, 5, lnOut{ok: true}),
			op(1, res(1, 0), 3, 6, lnOut{ok: true, seq: 2}),
			op(2, res(6, 0), 4, 7, lnOut{}),
		}},
	} {
		if got := porcupine.CheckOperations(good, c.hist); got != c.ok {
			t.Errorf("%s: linearizable = %v, want %v", c.name, got, c.ok)
		}
	}
}
