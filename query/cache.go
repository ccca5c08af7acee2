// Cache: compiled expressions kept by (kind, source), least recently used
// dropped first.

package query

import (
	"container/list"
	"sync"
)

// Cache compiles each distinct (kind, src) once and keeps the n most
// recently used results, errors included. It is safe for concurrent use
// (a simulator's managers share one among goroutines; a lookup holds its
// lock for a map access, a miss for the compile). The Programs it returns
// are safe to share.
type Cache struct {
	mu    sync.Mutex
	n     int
	order *list.List // of *cacheEntry, most recent first
	byKey map[cacheKey]*list.Element
}

type cacheKey struct {
	kind Kind
	src  string
}

type cacheEntry struct {
	key cacheKey
	prg *Program
	err error
}

// NewCache returns a cache of at most n compiled expressions; n < 1 is
// taken as 1.
func NewCache(n int) *Cache {
	n = max(n, 1)
	// The map grows as it is used: a manager that never sees a query
	// (most of a large simulated grid) pays for an empty map only.
	return &Cache{n: n, order: list.New(), byKey: make(map[cacheKey]*list.Element)}
}

// Get returns Compile(kind, src), compiling only on a miss.
func (c *Cache) Get(kind Kind, src string) (*Program, error) {
	k := cacheKey{kind, src}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		return e.prg, e.err
	}
	prg, err := Compile(kind, src)
	c.byKey[k] = c.order.PushFront(&cacheEntry{key: k, prg: prg, err: err})
	for c.order.Len() > c.n {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*cacheEntry).key)
	}
	return prg, err
}

// Len returns the number of cached results.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
