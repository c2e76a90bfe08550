package control

import (
	"hash/fnv"
	"sync"
	"time"
)

// writeBackoff spaces the writes of each hand-off slice whose last write
// failed: the hand-off loop runs on every change of what it watches, and a
// write the API server refuses (a slice in a namespace being deleted is
// Forbidden) would otherwise be sent again on each, tens of times a second
// while the namespace's objects go. The first retry waits backoffFirst,
// each next one twice as long, up to backoffMax; a success forgets it.
// The back-off holds only the body that failed: a slice whose wanted
// content changed (an activator crashed, and the kubelet said so) is
// written at once, with a back-off of its own if it fails too.
type writeBackoff struct {
	mu    sync.Mutex
	slots map[string]backoffSlot
}

type backoffSlot struct {
	body uint64        // the hash of the body whose write failed
	wait time.Duration // the last wait given
	at   time.Time     // when the next write of that body may be sent
}

// bodyHash is the hash writeBackoff keys a slice's body by.
func bodyHash(body []byte) uint64 {
	h := fnv.New64a()
	h.Write(body)
	return h.Sum64()
}

const (
	backoffFirst = time.Second
	backoffMax   = 30 * time.Second
)

// due reports whether key may be written with body (its bodyHash) at
// now: a body other than the one that failed always may.
func (b *writeBackoff) due(key string, body uint64, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.slots[key]
	return !ok || s.body != body || !now.Before(s.at)
}

// failed records that a write of key with body failed at now; it returns
// how long the next write of that body waits.
func (b *writeBackoff) failed(key string, body uint64, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.slots == nil {
		b.slots = map[string]backoffSlot{}
	}
	s := b.slots[key]
	if s.body != body {
		s = backoffSlot{body: body}
	}
	s.wait = min(max(2*s.wait, backoffFirst), backoffMax)
	s.at = now.Add(s.wait)
	b.slots[key] = s
	return s.wait
}

// succeeded forgets key's failures.
func (b *writeBackoff) succeeded(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.slots, key)
}

// keep forgets every key not in wanted (slices no longer needed).
func (b *writeBackoff) keep(wanted map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.slots {
		if !wanted[k] {
			delete(b.slots, k)
		}
	}
}

// next returns the earliest time a write waits for, if any does.
func (b *writeBackoff) next() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var at time.Time
	for _, s := range b.slots {
		if at.IsZero() || s.at.Before(at) {
			at = s.at
		}
	}
	return at, !at.IsZero()
}
