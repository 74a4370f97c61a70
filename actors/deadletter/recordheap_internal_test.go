package deadletter

import (
	"container/heap"
	"testing"
	"time"
)

// TestRecordHeapLetsGoOfWhatItPops: records flushed off the heap are not kept alive by its
// spare capacity; with the in-memory outbox each record holds its event, so a burst of dead
// letters would stay in memory until later ones overwrote their slots.
func TestRecordHeapLetsGoOfWhatItPops(t *testing.T) {
	base := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	var h recordHeap
	for i := range 100 {
		heap.Push(&h, &Record{ID: uint64(i), Due: base.Add(time.Duration(i%7) * time.Second)})
	}
	heap.Remove(&h, 40)
	for h.Len() > 0 {
		heap.Pop(&h)
	}
	for i, r := range h[:cap(h)] {
		if r != nil {
			t.Fatalf("the empty heap still holds record %d in its slot %d", r.ID, i)
		}
	}
}
