package disk_test

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// TestAppendReusesItsBatchBuffer: a journal append encodes its events into a pebble batch
// whose buffer, up to maxRetainedAppend, goes back to pebble's batch pool for the next append.
// Pebble keeps buffers up to 1 MB by default, less than a group commit of a busy topic, and
// allocating each afresh was a quarter of the bytes a publish allocated (README, Durability).
func TestAppendReusesItsBatchBuffer(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled items at random; run without -race")
	}
	s, err := disk.Open(t.TempDir(), disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.PutTopic(t.Context(), "t", nil); err != nil {
		t.Fatal(err)
	}
	// 2 000 events of 1 KB: about 2 MB in one batch, over pebble's default.
	evs := make([]*schemas.Event, 2000)
	size := 0
	for i := range evs {
		evs[i] = benchEvent()
		size += len(evs[i].Raw)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection empties the pool
	// One P: sync.Pool keeps an item on the P that put it, and the batch is closed on the
	// commit's goroutine, so with more Ps the next append may look on another and miss it.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	appendAll := func() {
		if _, err := s.Append(t.Context(), "t", publishTime, evs); err != nil {
			t.Fatal(err)
		}
	}
	appendAll()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 10
	for range n {
		appendAll()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > uint64(size)/4 {
		t.Errorf("an append of %d bytes of events allocates %d bytes; want its batch buffer reused", size, per)
	}
}
