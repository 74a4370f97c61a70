package actors

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestQheapKeepsItsOrderAndIndexes drives both kinds of qheap through random pushes, removals
// anywhere, due-time changes and takes of the top, and checks after each step that the top is
// the least event by the heap's order (due time, then sequence number; or sequence number) and
// that every event's index points at it.
func TestQheapKeepsItsOrderAndIndexes(t *testing.T) {
	for _, byDue := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(1, 2))
		h := qheap{byDue: byDue}
		base := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
		var in []*qitem
		idx := func(it *qitem) int {
			if byDue {
				return it.dueIdx
			}
			return it.seqIdx
		}
		before := func(a, b *qitem) int {
			if byDue && !a.due.Equal(b.due) {
				return a.due.Compare(b.due)
			}
			if a.seq < b.seq {
				return -1
			}
			return 1
		}
		var seq uint64
		for step := range 5000 {
			switch op := rng.IntN(10); {
			case op < 5 || len(in) == 0: // push; due times repeat, so the sequence number breaks ties
				seq++
				it := &qitem{seq: seq, due: base.Add(time.Duration(rng.IntN(50)) * time.Millisecond), dueIdx: -1, seqIdx: -1}
				h.push(it)
				in = append(in, it)
			case op < 7: // remove one anywhere
				k := rng.IntN(len(in))
				h.remove(idx(in[k]))
				if idx(in[k]) != -1 {
					t.Fatalf("step %d: a removed event keeps index %d", step, idx(in[k]))
				}
				in = slices.Delete(in, k, k+1)
			case op < 8 && byDue: // a lock renewed: its due time moves
				it := in[rng.IntN(len(in))]
				it.due = base.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
				h.fix(it.dueIdx)
			default: // take the top
				top := h.top()
				h.remove(0)
				k := slices.Index(in, top)
				in = slices.Delete(in, k, k+1)
			}
			if h.Len() != len(in) {
				t.Fatalf("step %d: %d events in the heap, want %d", step, h.Len(), len(in))
			}
			for _, it := range in {
				if i := idx(it); i < 0 || i >= h.Len() || h.e[i].it != it {
					t.Fatalf("step %d: event %d has index %d, which does not hold it", step, it.seq, i)
				}
			}
			if len(in) > 0 {
				if want := slices.MinFunc(in, before); h.top() != want {
					t.Fatalf("step %d (byDue %v): top is event %d, want %d", step, byDue, h.top().seq, want.seq)
				}
			}
		}
	}
}

// TestDueKeyClampsOutOfRangeTimes checks that times outside int64 nanoseconds order first or
// last rather than wrapping around.
func TestDueKeyClampsOutOfRangeTimes(t *testing.T) {
	now := time.Now()
	far, past := now.AddDate(1000, 0, 0), time.Time{}
	if !(dueKey(past) < dueKey(now) && dueKey(now) < dueKey(far)) {
		t.Fatalf("dueKey(zero) %d, dueKey(now) %d, dueKey(far future) %d: want increasing", dueKey(past), dueKey(now), dueKey(far))
	}
}
