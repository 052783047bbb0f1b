package seccomp

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"sync"
)

// Cache holds compiled filters keyed by the SHA-256 of the profile's bytes
// and of everything else that shapes the program (the node a moby profile
// is resolved for, the compile options), so that the same profile for a
// thousand containers is parsed and compiled once. Concurrent requests for
// a profile being compiled wait for that compilation instead of starting
// another. A failed compilation is cached too: the same bytes fail the same
// way. The least recently used entries are dropped beyond the size limit.
type Cache struct {
	mu      sync.Mutex
	max     int
	entries map[string]*cacheEntry
	lru     *list.List // of string keys, most recent first
	stats   CacheStats
}

// CacheStats counts what a Cache did.
type CacheStats struct {
	Hits      uint64 `json:"hits"`
	Misses    uint64 `json:"misses"`
	Evictions uint64 `json:"evictions"`
	Entries   int    `json:"entries"`
}

type cacheEntry struct {
	done chan struct{}
	f    *Filter
	err  error
	elem *list.Element
}

// NewCache returns a cache holding at most max filters (256 when max <= 0).
func NewCache(max int) *Cache {
	if max <= 0 {
		max = 256
	}
	return &Cache{max: max, entries: map[string]*cacheEntry{}, lru: list.New()}
}

// Key returns the cache key of a profile's bytes under the given options.
func Key(data []byte, po ParseOptions, co CompileOptions) string {
	h := sha256.New()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	h.Write(n[:])
	h.Write(data)
	caps := append([]string(nil), po.Caps...)
	sort.Strings(caps)
	if po.Caps == nil {
		caps = []string{"<default>"}
	}
	for _, s := range append([]string{po.Arch, po.Kernel.String(), co.Optimize.String()}, caps...) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	if co.NoENOSYS {
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Get returns the compiled filter for a profile's bytes, parsing and
// compiling it on the first request. The returned *Filter is shared and
// must not be modified.
func (c *Cache) Get(data []byte, po ParseOptions, co CompileOptions) (*Filter, error) {
	key := Key(data, po, co)
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.stats.Hits++
		c.lru.MoveToFront(e.elem)
		c.mu.Unlock()
		<-e.done
		return e.f, e.err
	}
	c.stats.Misses++
	e := &cacheEntry{done: make(chan struct{})}
	e.elem = c.lru.PushFront(key)
	c.entries[key] = e
	for c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.entries, old.Value.(string))
		c.stats.Evictions++
	}
	c.mu.Unlock()

	p, err := Parse(data, po)
	if err == nil {
		e.f, err = Compile(p, co)
	}
	if e.f != nil {
		e.f.Hash = key
	}
	e.err = err
	close(e.done)
	return e.f, e.err
}

// Stats returns the cache's counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries = len(c.entries)
	return s
}
