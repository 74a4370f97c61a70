package actors

// The heaps of a push subscription's parked events (container/heap): by sequence number, for
// the oldest undelivered event, and by due time, for the next retry. A queue subscription's
// heap is qheap.

// seqHeap orders parked events by sequence number.
type seqHeap []*item

func (h seqHeap) Len() int           { return len(h) }
func (h seqHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h seqHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].seqIndex, h[j].seqIndex = i, j
}
func (h *seqHeap) Push(x any) {
	it := x.(*item)
	it.seqIndex = len(*h)
	*h = append(*h, it)
}
func (h *seqHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.seqIndex = -1
	return it
}

// dueHeap orders parked events by due time.
type dueHeap []*item

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].seq < h[j].seq
	}
	return h[i].due.Before(h[j].due)
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}
func (h *dueHeap) Push(x any) {
	it := x.(*item)
	it.heapIndex = len(*h)
	*h = append(*h, it)
}
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil // the slot past the end must not keep the event alive
	*h = old[:len(old)-1]
	it.heapIndex = -1
	return it
}
