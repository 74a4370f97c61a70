package deadletter_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// heldScans is a store whose dead-letter scans (the outbox's Load), once gate is set, wait
// until it is closed, counting them.
type heldScans struct {
	store.Store
	gate  chan struct{}
	scans atomic.Int32
}

func (s *heldScans) ScanDeadLetters(ctx context.Context, fn func(store.DeadLetterRecord) error) error {
	if s.gate == nil {
		return s.Store.ScanDeadLetters(ctx, fn)
	}
	s.scans.Add(1)
	select {
	case <-s.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.ScanDeadLetters(ctx, fn)
}

// While the dead-letter actor reads its outbox (here a read held up, as by a slow store, after a
// restart), what arrives is bounded. 20,000 dead letters handed over by subscriptions, already
// in the outbox, are let go past MaxEarlyRecords and read back from the outbox once the first
// read is in; a dead letter enqueued meanwhile is put in the outbox at once (it is in no other
// place); of Flush requests, MaxFlushers wait for the load and the others are answered at once.
// Before, the actor kept every message for after the load: here some 8 MB of records, without
// end for a load that takes long, and every Flush. Once the outbox is in, every record is
// written, each once.
func TestWhatArrivesWhileTheOutboxLoadsIsBounded(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		mem := store.NewMemory()
		st := &heldScans{Store: mem}
		outbox := storeOutbox(t, st)
		st.gate = make(chan struct{}) // before the actor starts
		defer func() {
			select {
			case <-st.gate:
			default:
				close(st.gate) // a failing test still lets the load end, so the bubble empties
			}
		}()
		if err := outbox.Delete(ctx, nil); err != nil { // its next Load reads the store (a restart's)
			t.Fatal(err)
		}
		objects := testkit.NewObjectStore()
		cfg := &deadletter.Config{Store: objects, Outbox: outbox}
		root := h.System().Root
		started := time.Now()
		pid := h.Spawn(deadletter.Props(cfg))
		h.Settle()
		if st.scans.Load() != 1 {
			t.Fatalf("outbox scans after the start: %d, want the load's, held", st.scans.Load())
		}

		// The subscriptions' hand-offs: their records in the store first, as their updates do.
		const n, batch = 20000, 100
		hand := outbox.Handoff(root, pid, cfg, dlTarget("sub-a", false))
		var batches [][]store.DeadLetterRecord
		for i := 0; i < n; i += batch {
			recs := make([]store.DeadLetterRecord, batch)
			for j := range recs {
				r, err := hand.Record(dlLetter(t, "sub-a", fmt.Sprintf("h%d", i+j), time.Now()))
				if err != nil {
					t.Fatal(err)
				}
				recs[j] = r
			}
			if err := mem.PutDeadLetters(ctx, recs); err != nil {
				t.Fatal(err)
			}
			batches = append(batches, recs)
		}
		before := liveHeap()
		for _, recs := range batches {
			hand.Handed(recs)
		}
		h.Settle()
		grown := liveHeap() - before
		runtime.KeepAlive(batches)
		batches = nil
		t.Logf("heap kept for %d handed records while the outbox loads: %d KB", n, grown>>10)
		if grown > n*100 {
			t.Errorf("the actor kept %d KB for %d records handed over while its outbox loads; want them let go past %d (read back from the outbox), under %d KB",
				grown>>10, n, deadletter.MaxEarlyRecords, n*100>>10)
		}

		root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-b", "enqueued", time.Now()), Target: dlTarget("sub-b", false)})
		h.Settle()
		if got, _ := mem.DeadLetters(ctx); len(got) != n+1 {
			t.Errorf("outbox records while loading, after an Enqueue: %d, want %d: the enqueued one put at once", len(got), n+1)
		}

		flushes := make([]*actor.Future, deadletter.MaxFlushers+10)
		for i := range flushes {
			flushes[i] = root.RequestFuture(pid, &deadletter.Flush{}, time.Hour)
		}
		h.Settle()
		for i, f := range flushes[deadletter.MaxFlushers:] {
			res, err := f.Result()
			if err != nil {
				t.Fatalf("Flush %d of %d past the %d kept while loading: %v; want an answer at once", deadletter.MaxFlushers+i+1, len(flushes), deadletter.MaxFlushers, err)
			}
			if s := res.(*deadletter.Status); !s.Loading || !s.LoadingSince.Equal(started) {
				t.Errorf("Flush past the bound answered %+v, want the loading status", s)
			}
		}

		close(st.gate)
		h.Settle()
		if st.scans.Load() != 2 {
			t.Errorf("outbox scans: %d, want 2: the load, then a second read for the records let go", st.scans.Load())
		}
		for i, f := range flushes[:deadletter.MaxFlushers] {
			res, err := f.Result()
			if err != nil {
				t.Fatalf("Flush %d: %v", i, err)
			}
			if s := res.(*deadletter.Status); s.Loading || s.Pending() != 0 || s.RecordsWritten != n+1 {
				t.Fatalf("Flush %d answered %+v, want every record (%d) written", i, s, n+1)
			}
		}
		written := len(objects.Records(t, "deadletters", dlTarget("sub-a", false).Prefix, dlTarget("sub-a", false).Format.Input, dlTopicID)) +
			len(objects.Records(t, "deadletters", dlTarget("sub-b", false).Prefix, dlTarget("sub-b", false).Format.Input, dlTopicID))
		if written != n+1 {
			t.Errorf("records in objects: %d, want %d, each once", written, n+1)
		}
		if got, _ := mem.DeadLetters(ctx); len(got) != 0 {
			t.Errorf("outbox after the flush: %d records, want none", len(got))
		}
	})
}
