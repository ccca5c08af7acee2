package node

// Every test of this package runs with the deadline cache checked: each
// NextDeadline answered from the cache is computed afresh too, and a
// difference panics with the manager and the two times.
func init() { CheckDeadlines = true }

// DeadlineCacheStats is how many NextDeadline calls c answered from its
// cache, and across how many heartbeats the cache was kept.
func DeadlineCacheStats(c *Core) (hits, kept uint32) { return c.dl.hits, c.dl.kept }

// QueryOpsHeld is how many operations c's queries module keeps, and how
// many of them still hold a query walk although answered.
func QueryOpsHeld(c *Core) (ops, doneWalks int) {
	for _, o := range c.q.ops {
		if o.done && o.walk != nil {
			doneWalks++
		}
	}
	return len(c.q.ops), doneWalks
}

// SubtreeManagers is how many managers c's subtree holds by the samples
// its inferiors sent last (itself included).
func SubtreeManagers(c *Core) uint32 {
	n := uint32(1)
	for _, s := range c.mon.inferiors {
		n += s.managers
	}
	return n
}
