package deadletter_test

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/actors/deadletter/outboxtest"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// A StoreOutbox gives back exactly the records put in it, in ID order, and forgets deleted
// ones; the store sees them under stable, ordered ids.
func TestStoreOutboxRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	outbox := storeOutbox(t, st)
	at := time.Date(2026, 11, 22, 10, 0, 0, 123, time.UTC)
	namespace := dlTarget("sub-b", true)
	namespace.Format.Namespace, namespace.Format.Delivery = true, schemas.CloudEvents
	recs := []deadletter.Record{
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
	want := []deadletter.Record{recs[1], recs[0]}
	if len(got) != len(want) {
		t.Fatalf("loaded %d records, want %d", len(got), len(want))
	}
	// Loaded without their events, which stay in the store until a write reads them.
	evs, err := outbox.Events(ctx, []uint64{2, 10, 99})
	if err != nil || len(evs) != 2 {
		t.Fatalf("Events(2, 10, 99) = %v, %v; want the events of 2 and 10", evs, err)
	}
	for i := range want {
		w := want[i]
		l := *w.Letter
		if !reflect.DeepEqual(evs[w.ID], l.Event) {
			t.Errorf("event of record %d: got %+v, want %+v", w.ID, evs[w.ID], l.Event)
		}
		w.EventID, l.Event = l.Event.ID, nil
		w.Letter, w.Size = &l, got[i].Size
		if !reflect.DeepEqual(got[i], w) || got[i].Size <= 0 {
			t.Errorf("record %d:\ngot  %+v %+v\nwant %+v %+v", i, got[i], got[i].Letter, w, w.Letter)
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
	outbox := storeOutbox(t, st)
	if err := outbox.Put(ctx, []deadletter.Record{{ID: 3, Letter: dlLetter(t, "sub-a", "e3", time.Now()), Target: dlTarget("sub-a", false)}}); err != nil {
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
		cfg := &deadletter.Config{Store: mem, Outbox: storeOutbox(t, st), Metrics: m}
		first := h.Spawn(deadletter.Props(cfg))
		h.System().Root.Send(first, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Advance(time.Minute)
		if err := h.System().Root.StopFuture(first).Wait(); err != nil {
			t.Fatal(err)
		}
		if recs, _ := st.DeadLetters(context.Background()); len(recs) != 1 {
			t.Fatalf("%d records in the store after the stop, want 1", len(recs))
		}

		// A new outbox on the same store, as after a process restart.
		cfg.Outbox = storeOutbox(t, st)
		second := h.Spawn(deadletter.Props(cfg))
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

func storeOutbox(t *testing.T, st store.Store) *deadletter.StoreOutbox {
	t.Helper()
	o, err := deadletter.NewStoreOutbox(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// lostAnswers is an object store whose writes land but whose answers never arrive: each Put
// stores the object, then waits for its context to end and fails.
type lostAnswers struct{ *testkit.ObjectStore }

func (l lostAnswers) Put(ctx context.Context, bucket, key string, body []byte, opts sinks.PutOptions) (sinks.ObjectInfo, error) {
	if _, err := l.ObjectStore.Put(ctx, bucket, key, body, opts); err != nil {
		return sinks.ObjectInfo{}, err
	}
	<-ctx.Done()
	return sinks.ObjectInfo{}, ctx.Err()
}

// An object whose write landed but whose success was never recorded — the actor stopped (the
// process died) before the answer — is found under its key by the next actor, which keeps it
// and removes its records from the outbox: one object per flush, each dead letter in it once.
func TestUnrecordedWriteIsOverwrittenNotDuplicated(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		st := store.NewMemory()
		mem := testkit.NewObjectStore()
		cfg := &deadletter.Config{Store: lostAnswers{mem}, Outbox: storeOutbox(t, st), Metrics: new(metrics.Set), WriteTimeout: time.Hour}
		first := h.Spawn(deadletter.Props(cfg))
		for _, id := range []string{"e1", "e2"} {
			h.System().Root.Send(first, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", id, time.Now()), Target: dlTarget("sub-a", false)})
		}
		h.Advance(6 * time.Minute) // the write lands; its answer does not come
		if n := len(mem.Objects("deadletters")); n != 1 {
			t.Fatalf("%d objects after the first write, want 1", n)
		}
		if err := h.System().Root.StopFuture(first).Wait(); err != nil {
			t.Fatal(err)
		}

		cfg.Store, cfg.Outbox = mem, storeOutbox(t, st) // as after a process restart
		second := h.Spawn(deadletter.Props(cfg))
		h.Settle()
		objs := mem.Objects("deadletters")
		if len(objs) != 1 || mem.Puts() != 1 {
			t.Fatalf("objects %+v after %d puts, want the one object, written once and kept", objs, mem.Puts())
		}
		got := mem.Records(t, "deadletters", "", schemas.EventGrid, dlTopicID)
		if len(got) != 2 || got[0].Event.ID != "e1" || got[1].Event.ID != "e2" {
			t.Errorf("records %+v, want e1 and e2 once each", got)
		}
		if st := dlStatus(t, h, second); st.Pending() != 0 || st.ObjectsWritten != 1 {
			t.Errorf("status %+v, want the object written and nothing pending", st)
		}
		if recs, _ := st.DeadLetters(context.Background()); len(recs) != 0 {
			t.Errorf("%d records left in the outbox, want none", len(recs))
		}
	})
}

func TestMemoryOutboxConformance(t *testing.T) {
	outboxtest.Run(t, func(*testing.T) deadletter.Outbox { return deadletter.NewMemoryOutbox() }, nil)
}

func TestStoreOutboxOnMemoryStoreConformance(t *testing.T) {
	var mu sync.Mutex
	stores := map[deadletter.Outbox]store.Store{}
	outboxtest.Run(t, func(t *testing.T) deadletter.Outbox {
		st := store.NewMemory()
		o := storeOutbox(t, st)
		mu.Lock()
		stores[o] = st
		mu.Unlock()
		return o
	}, func(t *testing.T, o deadletter.Outbox) deadletter.Outbox {
		mu.Lock()
		st := stores[o]
		mu.Unlock()
		return storeOutbox(t, st)
	})
}

func TestStoreOutboxOnDiskStoreConformance(t *testing.T) {
	var mu sync.Mutex
	stores := map[deadletter.Outbox]*disk.Store{}
	openDisk := func(t *testing.T, dir string) *disk.Store {
		st, err := disk.Open(dir, disk.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	paths := map[*disk.Store]string{}
	outboxtest.Run(t, func(t *testing.T) deadletter.Outbox {
		dir := t.TempDir()
		st := openDisk(t, dir)
		t.Cleanup(func() { _ = st.Close() })
		o := storeOutbox(t, st)
		mu.Lock()
		stores[o], paths[st] = st, dir
		mu.Unlock()
		return o
	}, func(t *testing.T, o deadletter.Outbox) deadletter.Outbox {
		mu.Lock()
		st := stores[o]
		dir := paths[st]
		mu.Unlock()
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		next := openDisk(t, dir)
		t.Cleanup(func() { _ = next.Close() })
		return storeOutbox(t, next)
	})
}

// Cluster nodes share one outbox, each numbering its records from a base of its own, and a
// node started again numbers after the records of its base still there: an id whose record
// was written and deleted is given again. A node that took in a record under an id at its
// start, and wrote it, still adopts another node's later record under the same id.
func TestAdoptedRecordUnderAnIdWrittenBeforeIsWritten(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := store.NewMemory()
		mem := testkit.NewObjectStore()
		outboxFrom := func(base uint64) *deadletter.StoreOutbox {
			o, err := deadletter.NewStoreOutboxFrom(ctx, st, nil, base)
			if err != nil {
				t.Fatal(err)
			}
			return o
		}
		stop := func(pid *actor.PID) {
			if err := h.System().Root.StopFuture(pid).Wait(); err != nil {
				t.Fatal(err)
			}
		}
		const one, two = deadletter.IDSpan, 2 * deadletter.IDSpan

		// Node one ends sub-a's event and stops before writing it.
		cfg1 := &deadletter.Config{Store: mem, Outbox: outboxFrom(one), Metrics: new(metrics.Set)}
		first := h.Spawn(deadletter.Props(cfg1))
		h.System().Root.Send(first, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Advance(time.Minute)
		stop(first)

		// Node two starts, runs every subscription now, and writes it.
		o2 := outboxFrom(two)
		cfg2 := &deadletter.Config{Store: mem, Outbox: o2, Metrics: new(metrics.Set), Owns: func(string, string) bool { return true }}
		second := h.Spawn(deadletter.Props(cfg2))
		h.Advance(6 * time.Minute)
		if got := mem.Records(t, "deadletters", "", schemas.EventGrid, dlTopicID); len(got) != 1 || got[0].Event.ID != "e1" {
			t.Fatalf("written by node two: %+v, want e1", got)
		}

		// Node one starts again, numbering from its base again, ends sub-b's event and stops.
		cfg1.Outbox = outboxFrom(one)
		again := h.Spawn(deadletter.Props(cfg1))
		h.System().Root.Send(again, &deadletter.Enqueue{Letter: dlLetter(t, "sub-b", "e2", time.Now()), Target: dlTarget("sub-b", false)})
		h.Advance(time.Minute)
		stop(again)
		recs, err := st.DeadLetters(ctx)
		if err != nil || len(recs) != 1 {
			t.Fatalf("outbox %+v (%v), want e2's record", recs, err)
		}

		// sub-b moves to node two, which adopts the record.
		if err := o2.Adopt(ctx, h.System().Root, second, func(string, string) (bool, error) { return true, nil }); err != nil {
			t.Fatal(err)
		}
		h.Advance(6 * time.Minute)
		got := mem.Records(t, "deadletters", "", schemas.EventGrid, dlTopicID)
		if len(got) != 2 {
			t.Fatalf("written: %+v, want e1 and e2", got)
		}
		if recs, _ := st.DeadLetters(ctx); len(recs) != 0 {
			t.Errorf("%d records left in the outbox, want none", len(recs))
		}
	})
}
