package memnet

import (
	"cmp"
	"math/bits"
	"slices"
)

// calendar is the Net's queue of events, in (at, seq) order: a calendar
// queue (R. Brown, 1988). Events fall into buckets of virtual time
// (bucketShift); the buckets of the next horizon (ring) are unsorted
// slices, appended to in O(1), and a bucket is sorted once, in one go,
// when the clock reaches it (cur). Events further off wait in a heap
// (far) and move into the ring as it comes near them. Events pushed into
// the bucket being run, or before it (a caller's After after a RunFor
// peeked ahead), go to a small heap (near) merged with cur.
//
// A 4-ary heap of every event, which this replaces, took a cache miss at
// each of its levels per pop: at a million managers the queue holds
// millions of events, and popping them was a tenth of a large run, all
// of it on the one goroutine that windows wait for. The order is the
// same: (at, seq) is unique, so any correct queue gives the same run.
type calendar struct {
	cur    []event // the bucket curIdx, sorted; cur[head:] not yet popped
	head   int
	curIdx int64  // the bucket being run
	near   events // events of bucket curIdx or before, pushed after cur was sorted
	ring   []bucket
	inRing int                  // events in the ring
	far    events               // events of buckets at or past curIdx+len(ring) when pushed
	free   [chunkClasses]*chunk // chunks not in use, cleared, by class
	n      int
}

// A bucket of the ring is a list of chunks, newest first, taken from the
// calendar's free lists and given back when the bucket is run. A slice
// per bucket, reused from one turn of the ring to the next, either grew
// anew each time a busy bucket fell on a slot an idle one had used (a
// grid at rest has busy and idle milliseconds, and they drift against
// the ring's period) or, kept at its largest, held the busiest bucket's
// size in every slot. A bucket's first chunk is small and each next one
// twice the one before, up to 8 KiB: a small grid has a few events in
// each of many buckets, a large one thousands in each. The free lists and
// cur keep what the busiest moment needed (a settle's burst: tens of
// bytes per manager), as the heap's slice did before.
type bucket struct{ head *chunk }

type chunk struct {
	ev   []event // its capacity is minChunk<<k for a class k < chunkClasses
	next *chunk
}

const (
	// bucketShift: a bucket is 2^20 ns (about a millisecond), near the
	// least link delay of a simulated grid; at a million managers one
	// holds a few thousand events at rest.
	bucketShift = 20
	// ringLen buckets (about 4.4 s) are kept as buckets; a manager's
	// ticks, heartbeats and messages fall within it.
	ringLen = 1 << 12
	// A chunk holds minChunk events (128 B), or twice, four times… as
	// many, up to minChunk<<(chunkClasses-1) (8 KiB).
	minChunk, chunkClasses = 4, 7
)

func chunkClass(c *chunk) int { return bits.TrailingZeros(uint(cap(c.ev) / minChunk)) }

func bucketOf(at int64) int64 { return at >> bucketShift }

// Len is how many events are queued.
func (q *calendar) Len() int { return q.n }

func (q *calendar) push(e event) {
	q.n++
	b := bucketOf(e.at)
	switch {
	case b <= q.curIdx:
		q.near.push(e)
	case b < q.curIdx+ringLen:
		q.toRing(b, e)
	default:
		q.far.push(e)
	}
}

func (q *calendar) toRing(b int64, e event) {
	if q.ring == nil {
		q.ring = make([]bucket, ringLen)
	}
	s := &q.ring[b&(ringLen-1)]
	c := s.head
	if c == nil || len(c.ev) == cap(c.ev) {
		k := 0
		if c != nil {
			k = min(chunkClass(c)+1, chunkClasses-1)
		}
		c = q.free[k]
		if c != nil {
			q.free[k] = c.next
		} else {
			c = &chunk{ev: make([]event, 0, minChunk<<k)}
		}
		c.next = s.head
		s.head = c
	}
	c.ev = append(c.ev, e)
	q.inRing++
}

// front is the first event, nil if none. It may move to the next bucket.
func (q *calendar) front() *event {
	for {
		if q.head < len(q.cur) {
			if len(q.near) > 0 && q.near[0].before(&q.cur[q.head]) {
				return &q.near[0]
			}
			return &q.cur[q.head]
		}
		if len(q.near) > 0 {
			return &q.near[0]
		}
		if q.n == 0 {
			return nil
		}
		q.advance()
	}
}

// pop removes and returns the first event; the queue must not be empty.
func (q *calendar) pop() event {
	f := q.front()
	q.n--
	if len(q.near) > 0 && f == &q.near[0] {
		return q.near.pop()
	}
	e := *f
	*f = event{}
	q.head++
	return e
}

// advance makes the next bucket with events current; cur and near are
// empty.
func (q *calendar) advance() {
	next := int64(0)
	if q.inRing > 0 {
		next = q.curIdx + 1
		for q.ring[next&(ringLen-1)].head == nil {
			next++
		}
	} else {
		next = bucketOf(q.far[0].at)
	}
	q.curIdx = next
	for len(q.far) > 0 && bucketOf(q.far[0].at) < next+ringLen {
		e := q.far.pop()
		q.toRing(bucketOf(e.at), e)
	}
	s := &q.ring[next&(ringLen-1)]
	q.cur, q.head = q.cur[:0], 0
	for c := s.head; c != nil; {
		q.cur = append(q.cur, c.ev...)
		clear(c.ev)
		c.ev = c.ev[:0]
		k := chunkClass(c)
		nx := c.next
		c.next, q.free[k] = q.free[k], c
		c = nx
	}
	s.head = nil
	q.inRing -= len(q.cur)
	slices.SortFunc(q.cur, func(a, b event) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
}
