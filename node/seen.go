package node

import "time"

// seenSet remembers request ids for a while, to stop duplicates and loops.
// Ids are added with expiry now+ttl and now never goes back, so arrival
// order is expiry order: a FIFO expires them in time proportional to what
// expires, not to how many are remembered. When full, the oldest id is
// forgotten early.
//
// A manager keeps three, in its queries and admin modules, by value, and
// small: a pointer to each, and their time-to-live and bound at full
// width, cost a simulated manager 80 bytes and three cache misses a tick.
// Up to seenSmall ids are looked up in the queue itself; the map is made
// beyond that (a map of one id cost a manager about 200 bytes for the two
// minutes after every whole-grid query) and let go when the set is empty.
type seenSet struct {
	ids   map[uint64]struct{} // nil while at most seenSmall ids are remembered
	q     []seenEntry         // q[head:] are remembered, oldest first
	head  int32
	ttlMs int32 // time to live, in milliseconds
	max   int32 // ids remembered at most
}

// seenSmall is how many ids a seen set looks up in its queue, without a
// map.
const seenSmall = 8

type seenEntry struct {
	id  uint64
	exp time.Time
}

func newSeenSet(ttl time.Duration, max int32) seenSet {
	return seenSet{ttlMs: int32(ttl / time.Millisecond), max: max} // ids made at the first Add
}

// Has reports whether id was added and has not expired.
func (s *seenSet) Has(id uint64) bool {
	if s.ids != nil {
		_, ok := s.ids[id]
		return ok
	}
	for _, e := range s.q[s.head:] {
		if e.id == id {
			return true
		}
	}
	return false
}

// Add remembers id until now+ttl.
func (s *seenSet) Add(now time.Time, id uint64) {
	if s.Has(id) {
		return
	}
	if s.Len() >= int(s.max) {
		s.pop()
	}
	s.q = append(s.q, seenEntry{id: id, exp: now.Add(time.Duration(s.ttlMs) * time.Millisecond)})
	switch {
	case s.ids != nil:
		s.ids[id] = struct{}{}
	case s.Len() > seenSmall:
		s.ids = make(map[uint64]struct{}, s.Len())
		for _, e := range s.q[s.head:] {
			s.ids[e.id] = struct{}{}
		}
	}
}

// Expire forgets the ids whose time has passed.
func (s *seenSet) Expire(now time.Time) {
	for int(s.head) < len(s.q) && now.After(s.q[s.head].exp) {
		s.pop()
	}
}

func (s *seenSet) pop() {
	if int(s.head) == len(s.q) {
		return
	}
	if s.ids != nil {
		delete(s.ids, s.q[s.head].id)
	}
	s.head++
	if int(s.head) == len(s.q) {
		// Empty: let the map and the queue go (a manager remembers ids
		// only for a while after a query or a command).
		s.ids, s.q, s.head = nil, nil, 0
		return
	}
	// Reclaim the consumed prefix once it is at least half the queue.
	if s.head >= 64 && 2*int(s.head) >= len(s.q) {
		n := copy(s.q, s.q[s.head:])
		clear(s.q[n:])
		s.q = s.q[:n]
		s.head = 0
	}
}

// Len is how many ids are remembered.
func (s *seenSet) Len() int { return len(s.q) - int(s.head) }
