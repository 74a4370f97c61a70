package bufpool_test

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/egridio/egrid/schemas/bufpool"
)

func TestGetHasRoom(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 100_000, 1 << 20, 1<<20 + 1, 2 << 20, 2<<20 + 1, 5 << 20} {
		b := bufpool.Get(n)
		if len(*b) != 0 || cap(*b) < n {
			t.Errorf("Get(%d) = len %d, cap %d; want an empty buffer with room for %d", n, len(*b), cap(*b), n)
		}
		*b = append(*b, "dirty"...)
		bufpool.Put(b)
		if b := bufpool.Get(n); len(*b) != 0 || cap(*b) < n {
			t.Errorf("Get(%d) after a Put = len %d, cap %d", n, len(*b), cap(*b))
		}
	}
}

// TestBuffersAreReused: a buffer handed back is what the next Get of its size returns, and a
// buffer grown by append goes to the pool of its new size.
func TestBuffersAreReused(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled items at random; run without -race")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection empties the pools
	for _, n := range []int{100, 5000, 100_000, 1<<20 + 1} {
		if allocs := testing.AllocsPerRun(100, func() {
			b := bufpool.Get(n)
			*b = append(*b, make([]byte, n)...)
			bufpool.Put(b)
		}); allocs != 0 {
			t.Errorf("Get(%d) and Put allocate %.0f times per round; want the buffer reused", n, allocs)
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one P: a Get finds what the last Put left
	b := bufpool.Get(1000)                          // 1 KiB
	*b = append(*b, make([]byte, 3000)...)
	grown := &(*b)[:1][0]
	bufpool.Put(b)
	if got := bufpool.Get(2000); &(*got)[:1][0] != grown {
		t.Error("a buffer grown from 1 KiB to hold 3 000 bytes was not handed out for 2 000")
	}
}
