// Package bufpool keeps byte buffers for bodies that live for one request or one delivery
// attempt: a publish's request body (router/httpapi) and a delivery's encoded body (actors).
// At 100 events per publish the request body was a third of the bytes a publish allocated, and
// with batching off the encoded body half of what a delivery allocated; the collections they
// caused were a tenth of the CPU (README, Durability and Benchmarks).
//
// Buffers come in powers of two from 512 B to 2 MiB, one [sync.Pool] each, so a small body
// never holds a large buffer and a large one finds one of its size; larger buffers are
// allocated and dropped as before. A pool is emptied by the garbage collector when nobody has
// used it for two collections, so a quiet process keeps none.
package bufpool

import (
	"math/bits"
	"sync"
)

const (
	minClass = 9  // 512 B
	maxClass = 21 // 2 MiB: room for a 1 MiB request and the byte that tells it is over
)

var pools [maxClass + 1]sync.Pool

// Get returns an empty buffer with room for at least n bytes.
func Get(n int) *[]byte {
	c := minClass
	if n > 1<<minClass {
		c = bits.Len(uint(n - 1))
	}
	if c > maxClass {
		b := make([]byte, 0, n)
		return &b
	}
	if b, ok := pools[c].Get().(*[]byte); ok {
		*b = (*b)[:0]
		return b
	}
	b := make([]byte, 0, 1<<c)
	return &b
}

// Put hands b back for a later Get once nothing reads it any more, whatever it grew to since
// (a buffer grown by append goes to the pool of the size it has). Nil, and buffers under 512 B
// or of 4 MiB and over, are dropped.
func Put(b *[]byte) {
	if b == nil {
		return
	}
	c := bits.Len(uint(cap(*b))) - 1 // the largest class whose size it holds
	if c < minClass || c > maxClass {
		return
	}
	pools[c].Put(b)
}
