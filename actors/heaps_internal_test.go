package actors

import (
	"container/heap"
	"testing"
	"time"
)

// TestHeapsLetGoOfWhatTheyPop: a parked event taken off either heap of a subscription is not
// kept alive by the heap's spare capacity. After an endpoint's outage every parked event goes
// through the due heap; a slot left pointing at one would hold its event, delivered long ago,
// until a later retry overwrote it.
func TestHeapsLetGoOfWhatTheyPop(t *testing.T) {
	base := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	var due dueHeap
	var seqs seqHeap
	for i := range 100 {
		it := &item{seq: uint64(i), due: base.Add(time.Duration(i%7) * time.Second)}
		heap.Push(&due, it)
		heap.Push(&seqs, it)
	}
	for due.Len() > 0 {
		heap.Pop(&due)
	}
	heap.Remove(&seqs, 50)
	for seqs.Len() > 0 {
		heap.Pop(&seqs)
	}
	for name, spare := range map[string][]*item{"due": due[:cap(due)], "seq": seqs[:cap(seqs)]} {
		for i, it := range spare {
			if it != nil {
				t.Fatalf("the empty %s heap still holds event %d in its slot %d", name, it.seq, i)
			}
		}
	}
}
