package reservation

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// calendar is one resource kind's use over time: a step function kept as
// the changes of use at each instant where some window starts or ends (a
// treap keyed by time, each node augmented with the sum of its subtree's
// changes and their largest running sum). Use at t is the sum of the
// changes at or before t; the largest use over [s, e) is the use at s plus
// the largest running sum of the changes strictly inside. Each operation
// costs O(log n) in the number of distinct instants booked.
type calendar struct {
	cap  int64
	root *tnode
	size int      // instants with a change
	free []*tnode // nodes to reuse

	// started is the same for the starts alone (+n at each live
	// window's start): started at t minus use at t is what live
	// reservations whose window ended by t still hold until Expire
	// lapses them (over).
	// It is made at the first booking: most kinds of most managers of a
	// large grid are never booked.
	started *calendar
}

func newCalendar() *calendar { return &calendar{} }

// startedAt is started's use at t (0 before the first booking).
func (c *calendar) startedAt(t int64) int64 {
	if c.started == nil {
		return 0
	}
	return c.started.at(t)
}

// over is what live reservations whose window ended at or before t hold:
// they count as in use until they lapse.
func (c *calendar) over(t int64) int64 { return c.startedAt(t) - c.at(t) }

// inUse is what is in use at t: the windows that hold t plus over(t),
// that is every live reservation whose window has started by t.
func (c *calendar) inUse(t int64) int64 { return c.startedAt(t) }

type tnode struct {
	key         int64 // unix nanoseconds
	delta       int64 // change of use at key
	prio        uint64
	left, right *tnode
	sum         int64 // of delta over the subtree
	maxPre      int64 // largest running sum over the subtree, in time order
}

func (n *tnode) fix() {
	var lsum int64
	n.maxPre = 0
	first := true
	if n.left != nil {
		lsum = n.left.sum
		n.maxPre, first = n.left.maxPre, false
	}
	at := lsum + n.delta
	if first || at > n.maxPre {
		n.maxPre = at
	}
	n.sum = at
	if n.right != nil {
		n.sum += n.right.sum
		if v := at + n.right.maxPre; v > n.maxPre {
			n.maxPre = v
		}
	}
}

// prio is a fixed hash of the key: the treap's shape depends only on the
// instants booked (no randomness, so the ledger stays deterministic).
func prio(key int64) uint64 {
	z := uint64(key) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// merge joins a and b, every key of a below every key of b.
func merge(a, b *tnode) *tnode {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		a.right = merge(a.right, b)
		a.fix()
		return a
	default:
		b.left = merge(a, b.left)
		b.fix()
		return b
	}
}

// change adds d to the change of use at key.
func (c *calendar) change(key, d int64) {
	if d != 0 {
		c.root = c.add(c.root, key, d)
	}
}

// add adds d at key in the subtree n and returns its new root: a treap
// insert (rotating the new node up by priority), or a removal when the
// change at key comes to nothing.
func (c *calendar) add(n *tnode, key, d int64) *tnode {
	switch {
	case n == nil:
		var nn *tnode
		if k := len(c.free); k > 0 {
			nn, c.free = c.free[k-1], c.free[:k-1]
			*nn = tnode{}
		} else {
			nn = &tnode{}
		}
		nn.key, nn.delta, nn.prio = key, d, prio(key)
		nn.fix()
		c.size++
		return nn
	case key == n.key:
		n.delta += d
		if n.delta == 0 {
			m := merge(n.left, n.right)
			*n = tnode{}
			c.free = append(c.free, n)
			c.size--
			return m
		}
	case key < n.key:
		n.left = c.add(n.left, key, d)
		if n.left != nil && n.left.prio > n.prio {
			l := n.left
			n.left = l.right
			n.fix()
			l.right = n
			n = l
		}
	default:
		n.right = c.add(n.right, key, d)
		if n.right != nil && n.right.prio > n.prio {
			r := n.right
			n.right = r.left
			n.fix()
			r.left = n
			n = r
		}
	}
	n.fix()
	return n
}

// book adds a window of n over [s, e); a negative n takes it back.
func (c *calendar) book(s, e, n int64) {
	c.change(s, n)
	c.change(e, -n)
	if c.started == nil {
		c.started = &calendar{}
	}
	c.started.change(s, n)
}

// extend adds n of use over [s, e) to a window booked already (its end
// moves); a negative n shortens it.
func (c *calendar) extend(s, e, n int64) {
	c.change(s, n)
	c.change(e, -n)
}

// at is the use at instant t.
func (c *calendar) at(t int64) int64 {
	var u int64
	for n := c.root; n != nil; {
		if n.key <= t {
			if n.left != nil {
				u += n.left.sum
			}
			u += n.delta
			n = n.right
		} else {
			n = n.left
		}
	}
	return u
}

// peak is the largest use over [s, e), e > s: the use at s, or the
// running sum at a change strictly inside, whichever is larger. It reads
// the tree without changing it, one descent per side.
func (c *calendar) peak(s, e int64) int64 {
	u := c.at(s)
	if m, ok := inside(c.root, s, e, 0); ok && m > u {
		return m
	}
	return u
}

// inside is the largest running sum at a key in (s, e) within n, whose
// keys come after changes summing to off; ok is false if there is none.
func inside(n *tnode, s, e, off int64) (int64, bool) {
	for n != nil {
		switch {
		case n.key <= s:
			off += lsum(n) + n.delta
			n = n.right
		case n.key >= e:
			n = n.left
		default: // s < key < e: the left part is bounded below, the right above
			at := off + lsum(n) + n.delta
			best := at
			if m, ok := above(n.left, s, off); ok && m > best {
				best = m
			}
			if m, ok := below(n.right, e, at); ok && m > best {
				best = m
			}
			return best, true
		}
	}
	return 0, false
}

// above is inside with no upper bound: keys > s.
func above(n *tnode, s, off int64) (int64, bool) {
	best, ok := int64(0), false
	for n != nil {
		if n.key <= s {
			off += lsum(n) + n.delta
			n = n.right
			continue
		}
		at := off + lsum(n) + n.delta
		if !ok || at > best {
			best, ok = at, true
		}
		if n.right != nil && at+n.right.maxPre > best {
			best = at + n.right.maxPre
		}
		n = n.left
	}
	return best, ok
}

// below is inside with no lower bound: keys < e.
func below(n *tnode, e, off int64) (int64, bool) {
	best, ok := int64(0), false
	for n != nil {
		if n.key >= e {
			n = n.left
			continue
		}
		if n.left != nil && (!ok || off+n.left.maxPre > best) {
			best, ok = off+n.left.maxPre, true
		}
		off += lsum(n) + n.delta
		if !ok || off > best {
			best, ok = off, true
		}
		n = n.right
	}
	return best, ok
}

func lsum(n *tnode) int64 {
	if n.left != nil {
		return n.left.sum
	}
	return 0
}

// Step is a kind's use from At until the next step.
type Step struct {
	At   time.Time `json:"at"`
	Used int64     `json:"used"`
}

// steps returns the use at s and every change of it within (s, e), at
// most limit steps (limit ≤ 0: no bound).
func (c *calendar) steps(s, e int64, limit int) []Step {
	u := c.at(s)
	out := []Step{{At: time.Unix(0, s).UTC(), Used: u}}
	var walk func(n *tnode) bool
	walk = func(n *tnode) bool {
		if n == nil {
			return true
		}
		if n.key > s && !walk(n.left) {
			return false
		}
		if n.key > s && n.key < e {
			if limit > 0 && len(out) >= limit {
				return false
			}
			u += n.delta
			out = append(out, Step{At: time.Unix(0, n.key).UTC(), Used: u})
		}
		if n.key < e {
			return walk(n.right)
		}
		return true
	}
	walk(c.root)
	return out
}

// Span is a closed interval of instants [From, To].
type Span struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// FreeOver is the least amount of kind that stays free over all of
// [from, to) (to ≤ from: at from), as of the latest call: what a window
// there can still book. 0 for an unknown kind.
func (l *Ledger) FreeOver(kind string, from, to time.Time) int64 {
	c := l.sems.get(kind)
	if c == nil {
		return 0
	}
	if !to.After(from) {
		to = from.Add(1)
	}
	return max(0, c.cap-c.peak(from.UnixNano(), to.UnixNano())-c.over(l.now.UnixNano()))
}

// Capacity is kind's capacity (0 for an unknown kind).
func (l *Ledger) Capacity(kind string) int64 {
	if c := l.sems.get(kind); c != nil {
		return c.cap
	}
	return 0
}

// Steps is kind's use from from until to: the use at from and each change
// of it before to, at most limit steps (≤ 0: all), as of the latest call.
func (l *Ledger) Steps(kind string, from, to time.Time, limit int) []Step {
	c := l.sems.get(kind)
	if c == nil || !to.After(from) {
		return nil
	}
	out := c.steps(from.UnixNano(), to.UnixNano(), limit)
	if o := c.over(l.now.UnixNano()); o > 0 {
		for i := range out {
			out[i].Used += o
		}
	}
	return out
}

// Earliest is when a window of length d holding amounts could begin, from
// from until until: the spans of start instants at which every amount is
// free over the whole window, earliest first, at most limit spans (≤ 0:
// all). An unknown kind, or an amount above its capacity, has none.
func (l *Ledger) Earliest(amounts []Amount, from, until time.Time, d time.Duration, limit int) []Span {
	if d <= 0 || until.Before(from) {
		return nil
	}
	type iv struct{ a, b int64 } // [a, b): too full for the amount asked
	var bad []iv
	lo, hi := from.UnixNano(), until.Add(d).UnixNano()
	for _, a := range amounts {
		c := l.sems.get(a.Kind)
		if c == nil {
			return nil
		}
		over := c.over(l.now.UnixNano())
		if a.N > c.cap-over {
			return nil
		}
		limit := c.cap - over - a.N // the most others may use
		steps := c.steps(lo, hi, 0)
		for i, st := range steps {
			if st.Used <= limit {
				continue
			}
			end := hi
			if i+1 < len(steps) {
				end = steps[i+1].At.UnixNano()
			}
			bad = append(bad, iv{st.At.UnixNano(), end})
		}
	}
	slices.SortFunc(bad, func(x, y iv) int { return cmp.Compare(x.a, y.a) })
	var out []Span
	cur, last, dn := lo, until.UnixNano(), int64(d)
	add := func(a, b int64) bool {
		if a > b {
			return true
		}
		out = append(out, Span{From: time.Unix(0, a).UTC(), To: time.Unix(0, b).UTC()})
		return limit <= 0 || len(out) < limit
	}
	for _, b := range bad {
		// A start s is feasible iff [s, s+d) misses [b.a, b.b): s+d ≤ b.a or s ≥ b.b.
		if b.a-dn >= cur && !add(cur, min(b.a-dn, last)) {
			return out
		}
		cur = max(cur, b.b)
		if cur > last {
			return out
		}
	}
	add(cur, last)
	return out
}

// kinds are a ledger's calendars by kind, sorted by kind: a ledger has a
// few kinds (cpus, mem and the tokens of its properties), for which a map
// cost about 200 bytes more per manager of a large simulated grid and
// gave them in no order.
type kinds []kindCal

type kindCal struct {
	kind string
	cal  *calendar
}

// get is kind's calendar, nil if the ledger has no such kind.
func (ks kinds) get(kind string) *calendar {
	if i, ok := slices.BinarySearchFunc(ks, kind, func(k kindCal, kind string) int { return strings.Compare(k.kind, kind) }); ok {
		return ks[i].cal
	}
	return nil
}

// put adds kind with calendar c, or replaces its calendar.
func (ks *kinds) put(kind string, c *calendar) {
	i, ok := slices.BinarySearchFunc(*ks, kind, func(k kindCal, kind string) int { return strings.Compare(k.kind, kind) })
	if ok {
		(*ks)[i].cal = c
		return
	}
	*ks = slices.Insert(*ks, i, kindCal{kind, c})
}
