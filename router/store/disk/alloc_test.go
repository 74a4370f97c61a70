package disk_test

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// TestAppendReusesItsBatchBuffer: a journal append encodes its events into a pebble batch
// whose buffer, up to maxRetainedAppend, is kept for the next append.
// Pebble keeps buffers up to 1 MB by default, less than a group commit of a busy topic, and
// allocating each afresh was a quarter of the bytes a publish allocated (README, Durability).
func TestAppendReusesItsBatchBuffer(t *testing.T) {
	s := openPoolStore(t)
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

// TestAppendKeepsItsBatchBufferAcrossSizesAndOtherWrites: a busy topic's appends each carry
// every publish that waited for the one before, so their sizes change with each, and other
// writes (a topic, a subscription, a delivery history) go on between them. The appends keep
// their batches apart from pebble's pool, sized in powers of two: before, an append a few
// bytes larger than the last allocated a new buffer of megabytes, and a small write that took
// the pooled batch dropped its buffer.
func TestAppendKeepsItsBatchBufferAcrossSizesAndOtherWrites(t *testing.T) {
	s := openPoolStore(t)
	const n = 10
	evs := make([]*schemas.Event, 1800+n)
	for i := range evs {
		evs[i] = benchEvent()
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection empties the pool
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))  // see TestAppendReusesItsBatchBuffer
	if _, err := s.Append(t.Context(), "t", publishTime, evs[:1800]); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	size := 0
	for i := range n {
		batch := evs[:1801+i] // one event more each time
		for _, ev := range batch {
			size += len(ev.Raw)
		}
		if _, err := s.Append(t.Context(), "t", publishTime, batch); err != nil {
			t.Fatal(err)
		}
		if err := s.PutTopic(t.Context(), "other", nil); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per, avg := (after.TotalAlloc-before.TotalAlloc)/n, size/n; per > uint64(avg)/4 {
		t.Errorf("appends of about %d bytes of events, each a little larger than the last and each followed by another write, allocate %d bytes each; want their batch buffer reused", avg, per)
	}
}

// openPoolStore opens a store with topic "t" for the tests of the appends' batch reuse, which
// skip under the race detector: it drops pooled items at random.
func openPoolStore(t *testing.T) *disk.Store {
	t.Helper()
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
	return s
}
