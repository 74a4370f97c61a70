package actors

import (
	"math"
	"time"
)

// The heaps of a queue subscription's events: the available ones by sequence number, and
// those with a due time (available, locked or delayed) by that time. A push subscription's
// heaps are heaps.go's.

// qheap is a binary min-heap of a queue's events: by sequence number (avail: receivers get
// the oldest first), or by due time and then sequence number (timed). Each entry carries its
// ordering key beside the event, so ordering one compares two entries of the slice and reads
// no event: a queue keeps a window of thousands of events, and every receipt and settlement
// takes events out of and into its heaps (the comparisons through each event's time.Time were
// the queue actor's largest cost in `egrid bench --scenario pull`). It keeps each event's
// index in it (qitem.dueIdx or seqIdx; -1 when the event is not in it) so that an event can
// be taken out or moved wherever it is.
type qheap struct {
	e     []qentry
	byDue bool // ordered by due time and keeps dueIdx; else by sequence number and seqIdx
}

type qentry struct {
	due int64 // the event's due time, Unix nanoseconds (dueKey); 0 in avail
	seq uint64
	it  *qitem
}

// dueKey is t as a heap key: Unix nanoseconds, clamped to int64 (beyond the years 1678–2262,
// which no deadline of a running queue reaches, keys tie and the sequence number orders).
func dueKey(t time.Time) int64 {
	switch {
	case t.Before(minDueKey):
		return math.MinInt64
	case t.After(maxDueKey):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var minDueKey, maxDueKey = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

func (h *qheap) Len() int { return len(h.e) }

// top is the first event: the oldest (avail) or the soonest due (timed).
func (h *qheap) top() *qitem { return h.e[0].it }

func (h *qheap) less(i, j int) bool {
	a, b := &h.e[i], &h.e[j]
	return a.due < b.due || a.due == b.due && a.seq < b.seq
}

// place records in the event at i its index.
func (h *qheap) place(i int) {
	if h.byDue {
		h.e[i].it.dueIdx = i
	} else {
		h.e[i].it.seqIdx = i
	}
}

func (h *qheap) swap(i, j int) {
	h.e[i], h.e[j] = h.e[j], h.e[i]
	h.place(i)
	h.place(j)
}

func (h *qheap) push(it *qitem) {
	var due int64
	if h.byDue {
		due = dueKey(it.due)
	}
	h.e = append(h.e, qentry{due: due, seq: it.seq, it: it})
	h.place(len(h.e) - 1)
	h.up(len(h.e) - 1)
}

// remove takes out the event at i.
func (h *qheap) remove(i int) {
	n := len(h.e) - 1
	if i != n {
		h.swap(i, n)
		if !h.down(i, n) {
			h.up(i)
		}
	}
	it := h.e[n].it
	if h.byDue {
		it.dueIdx = -1
	} else {
		it.seqIdx = -1
	}
	h.e[n] = qentry{}
	h.e = h.e[:n]
}

// fix moves the event at i, whose due time changed, to its place (timed only).
func (h *qheap) fix(i int) {
	h.e[i].due = dueKey(h.e[i].it.due)
	if !h.down(i, len(h.e)) {
		h.up(i)
	}
}

func (h *qheap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if i == j || !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down moves the entry at i0 down among the first n, and reports whether it moved.
func (h *qheap) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 {
			break
		}
		j := j1
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
