package actors_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// A StoreOutbox gives back exactly the records put in it, in ID order, and forgets deleted
// ones; the store sees them under stable, ordered ids.
func TestStoreOutboxRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	outbox := actors.NewStoreOutbox(st, nil)
	at := time.Date(2026, 11, 22, 10, 0, 0, 123, time.UTC)
	namespace := dlTarget("sub-b", true)
	namespace.Format.Namespace, namespace.Format.Delivery = true, schemas.CloudEvents
	recs := []actors.OutboxRecord{
		{ID: 10, Letter: dlLetter(t, "sub-a", "e10", at), Target: dlTarget("sub-a", false), Due: at.Add(5 * time.Minute)},
		{ID: 2, Letter: dlLetter(t, "sub-b", "e2", at), Target: namespace, Due: at.Add(time.Minute),
			FirstWriteAttempt: at.Add(2 * time.Minute), WriteAttempts: 3},
	}
	if err := outbox.Put(ctx, recs); err != nil {
		t.Fatal(err)
	}
	got, err := outbox.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []actors.OutboxRecord{recs[1], recs[0]}
	if len(got) != len(want) {
		t.Fatalf("loaded %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("record %d:\ngot  %+v %+v\nwant %+v %+v", i, got[i], got[i].Letter, want[i], want[i].Letter)
		}
	}
	stored, err := st.DeadLetters(ctx)
	if err != nil || len(stored) != 2 || stored[0].ID != "00000000000000000002" || stored[1].ID != "00000000000000000010" {
		t.Fatalf("stored records %+v, %v; want ids 2 and 10, zero-padded", stored, err)
	}
	if err := outbox.Delete(ctx, []uint64{2, 99}); err != nil {
		t.Fatal(err)
	}
	if got, _ := outbox.Load(ctx); len(got) != 1 || got[0].ID != 10 {
		t.Errorf("after deleting 2: %+v, want only 10", got)
	}
}

// Records that do not decode are skipped, not fatal: the actor still starts.
func TestStoreOutboxSkipsUndecodableRecords(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	if err := st.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "00000000000000000001", Payload: []byte("not json")}, {ID: "x", Payload: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	outbox := actors.NewStoreOutbox(st, nil)
	if err := outbox.Put(ctx, []actors.OutboxRecord{{ID: 3, Letter: dlLetter(t, "sub-a", "e3", time.Now()), Target: dlTarget("sub-a", false)}}); err != nil {
		t.Fatal(err)
	}
	got, err := outbox.Load(ctx)
	if err != nil || len(got) != 1 || got[0].ID != 3 {
		t.Fatalf("Load = %+v, %v; want only record 3", got, err)
	}
}

// The dead-letter actor on a StoreOutbox: a new actor on the same store writes the records
// the stopped one left, at their original due time, and counts none as lost.
func TestStoreOutboxSurvivesTheActor(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		st := store.NewMemory()
		mem := testkit.NewObjectStore()
		m := new(metrics.Set)
		cfg := &actors.DeadLetterConfig{Store: mem, Outbox: actors.NewStoreOutbox(st, nil), Metrics: m}
		first := h.Spawn(actors.DeadLetterProps(cfg))
		h.System().Root.Send(first, &actors.EnqueueDeadLetter{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Advance(time.Minute)
		if err := h.System().Root.StopFuture(first).Wait(); err != nil {
			t.Fatal(err)
		}
		if recs, _ := st.DeadLetters(context.Background()); len(recs) != 1 {
			t.Fatalf("%d records in the store after the stop, want 1", len(recs))
		}

		// A new outbox on the same store, as after a process restart.
		cfg.Outbox = actors.NewStoreOutbox(st, nil)
		second := h.Spawn(actors.DeadLetterProps(cfg))
		h.Advance(4 * time.Minute) // 5 min after the last attempt: due, but within the slack
		if n := mem.Puts(); n != 0 {
			t.Fatalf("%d objects before the delay and its slack passed, want 0", n)
		}
		h.Advance(time.Minute)
		if got := mem.Records(t, "deadletters", "", schemas.EventGrid, dlTopicID); len(got) != 1 || got[0].Event.ID != "e1" {
			t.Fatalf("written after the restart: %+v, want e1", got)
		}
		if recs, _ := st.DeadLetters(context.Background()); len(recs) != 0 {
			t.Errorf("%d records left in the store after the write, want 0", len(recs))
		}
		if st := dlStatus(t, h, second); st.Pending() != 0 || st.RecordsWritten != 1 {
			t.Errorf("status %+v, want one written, nothing pending", st)
		}
		if got := m.Snapshot().Sum(metrics.DroppedEventCount, "orders/sub-a"); got != 0 {
			t.Errorf("%d records counted as dropped, want none", got)
		}
	})
}
