// Package outboxtest is the conformance suite for [deadletter.Outbox] implementations: the
// in-memory outbox and the store outbox (over the memory and the disk store) run the same
// tests, so the fake the actor's tests use behaves like the real thing.
//
// [Run] checks Load, Put, Delete and NewID on a fresh outbox per subtest and, for a durable
// outbox, that a new outbox on the same storage (as after a restart) loads the same records and
// hands out ids above theirs.
//
// Where outbox.go is silent the suite fixes the behaviour:
//   - Load returns the records in id order, equal (reflect.DeepEqual) to what was put: letter,
//     event, target, due time, write state and object key. An [deadletter.EventOutbox] gives
//     them without their events, with EventID and Size set, and Events gives the events equal
//     to what was put; a Put of a record without its event changes its other fields and keeps
//     the stored event, and one of a record not in the outbox stores nothing.
//   - Put replaces a record by id; Delete ignores unknown ids; Put and Delete of nothing succeed.
//   - NewID is safe for concurrent use and never returns an id twice.
//
// outboxtest imports actors, actors/deadletter, router/store and schemas (and testing).
package outboxtest

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/schemas"
)

// Run runs the suite on the outboxes open returns, each new and empty. reopen, when non-nil
// (a durable outbox), returns a new outbox on the storage of o, as the next process would
// open it; the suite no longer uses o afterwards.
func Run(t *testing.T, open func(t *testing.T) deadletter.Outbox, reopen func(t *testing.T, o deadletter.Outbox) deadletter.Outbox) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, o deadletter.Outbox)
	}{
		{"Empty", testEmpty},
		{"RoundTripInIDOrder", testRoundTrip},
		{"PutReplaces", testPutReplaces},
		{"Delete", testDelete},
		{"NewIDUnique", testNewID},
		{"PutWithoutEvent", testPutWithoutEvent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open(t))
		})
	}
	if reopen != nil {
		t.Run("SurvivesReopen", func(t *testing.T) {
			t.Parallel()
			testReopen(t, open(t), reopen)
		})
	}
}

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 123, time.UTC)

const topicID = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.EventGrid/topics/orders"

// record is a dead letter of subscription sub for event id, with write state when tried.
func record(t *testing.T, id uint64, sub, event string, tried bool) deadletter.Record {
	t.Helper()
	evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"`+event+`","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{"n":1}}]`), topicID, schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	r := deadletter.Record{
		ID: id,
		Letter: &actors.DeadLetter{
			Topic: "orders", Subscription: sub, TopicID: topicID, InputSchema: schemas.EventGrid, DeliverySchema: schemas.CloudEvents,
			Event: evs[0], Reason: schemas.MaxDeliveryAttemptsExceeded, DeliveryAttempts: 3, LastOutcome: schemas.GenericError,
			LastHTTPStatus: 500, PublishTime: t0.Add(-time.Minute), LastAttemptTime: t0,
		},
		Target: deadletter.Target{
			Bucket: "deadletters", Prefix: deadletter.Prefix("", "orders", sub), Notify: true,
			Format: schemas.DeadLetterFormat{Input: schemas.EventGrid, Delivery: schemas.CloudEvents, TopicID: topicID},
		},
		Due: t0.Add(5 * time.Minute),
	}
	if tried {
		r.FirstWriteAttempt, r.WriteAttempts = t0.Add(6*time.Minute), 2
		r.ObjectKey = deadletter.Key(r.Target.Prefix, r.FirstWriteAttempt, "object-1")
	}
	return r
}

func load(t *testing.T, o deadletter.Outbox) []deadletter.Record {
	t.Helper()
	recs, err := o.Load(context.Background())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return recs
}

func put(t *testing.T, o deadletter.Outbox, recs ...deadletter.Record) {
	t.Helper()
	if err := o.Put(context.Background(), recs); err != nil {
		t.Fatalf("Put: %v", err)
	}
}

// requireRecords checks that o loaded got, the records want as put: an EventOutbox's without
// their events, which Events gives back.
func requireRecords(t *testing.T, o deadletter.Outbox, got []deadletter.Record, want ...deadletter.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("loaded %d records, want %d: %+v", len(got), len(want), got)
	}
	eo, light := o.(deadletter.EventOutbox)
	for i := range want {
		w := want[i]
		if light {
			w = withoutEvent(want[i])
		}
		if !reflect.DeepEqual(got[i], w) {
			t.Errorf("record %d:\ngot  %+v %+v\nwant %+v %+v", i, got[i], got[i].Letter, w, w.Letter)
		}
	}
	if !light {
		return
	}
	ids := make([]uint64, len(want))
	for i, r := range want {
		ids[i] = r.ID
	}
	evs, err := eo.Events(context.Background(), ids)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	if len(evs) != len(want) {
		t.Errorf("Events gave %d events, want %d", len(evs), len(want))
	}
	for _, r := range want {
		if !reflect.DeepEqual(evs[r.ID], r.Letter.Event) {
			t.Errorf("event of record %d: got %+v, want %+v", r.ID, evs[r.ID], r.Letter.Event)
		}
	}
}

// withoutEvent is r as an EventOutbox gives it: its letter without the event, whose id and
// size bound it notes.
func withoutEvent(r deadletter.Record) deadletter.Record {
	l := *r.Letter
	rec := schemas.DeadLetterRecord{
		Event: l.Event, Reason: l.Reason, DeliveryAttempts: l.DeliveryAttempts, LastOutcome: l.LastOutcome,
		LastHTTPStatus: l.LastHTTPStatus, PublishTime: l.PublishTime, LastAttemptTime: l.LastAttemptTime,
	}
	r.EventID, r.Size = l.Event.ID, schemas.DeadLetterSizeBound(r.Target.Format, &rec)
	l.Event = nil
	r.Letter = &l
	return r
}

func testEmpty(t *testing.T, o deadletter.Outbox) {
	if got := load(t, o); len(got) != 0 {
		t.Errorf("a new outbox loads %+v, want nothing", got)
	}
}

func testRoundTrip(t *testing.T, o deadletter.Outbox) {
	a, b := record(t, 10, "sub-a", "e10", false), record(t, 2, "sub-b", "e2", true)
	put(t, o, a, b)
	requireRecords(t, o, load(t, o), b, a)
}

func testPutReplaces(t *testing.T, o deadletter.Outbox) {
	waiting := record(t, 1, "sub-a", "e1", false)
	put(t, o, waiting)
	tried := record(t, 1, "sub-a", "e1", true)
	put(t, o, tried)
	requireRecords(t, o, load(t, o), tried)
}

func testDelete(t *testing.T, o deadletter.Outbox) {
	ctx := context.Background()
	a, b, c := record(t, 1, "sub-a", "e1", false), record(t, 2, "sub-a", "e2", false), record(t, 3, "sub-b", "e3", true)
	put(t, o, a, b, c)
	if err := o.Delete(ctx, []uint64{2, 99}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	requireRecords(t, o, load(t, o), a, c)
	if err := o.Put(ctx, nil); err != nil {
		t.Errorf("Put(nil): %v", err)
	}
	if err := o.Delete(ctx, nil); err != nil {
		t.Errorf("Delete(nil): %v", err)
	}
	requireRecords(t, o, load(t, o), a, c)
}

func testNewID(t *testing.T, o deadletter.Outbox) {
	const goroutines, each = 8, 100
	var (
		mu   sync.Mutex
		seen = map[uint64]bool{}
		wg   sync.WaitGroup
	)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := uint64(0)
			for range each {
				id := o.NewID()
				if id <= last {
					t.Errorf("NewID returned %d after %d", id, last)
				}
				last = id
				mu.Lock()
				if seen[id] {
					t.Errorf("NewID returned %d twice", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func testReopen(t *testing.T, o deadletter.Outbox, reopen func(t *testing.T, o deadletter.Outbox) deadletter.Outbox) {
	ctx := context.Background()
	a, b := record(t, o.NewID(), "sub-a", "e1", false), record(t, o.NewID(), "sub-b", "e2", true)
	gone := record(t, o.NewID(), "sub-a", "e3", false)
	put(t, o, a, b, gone)
	if err := o.Delete(ctx, []uint64{gone.ID}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	next := reopen(t, o)
	requireRecords(t, next, load(t, next), a, b)
	if id := next.NewID(); id <= b.ID {
		t.Errorf("the reopened outbox's first id is %d, want above the stored %d", id, b.ID)
	}
}

// An EventOutbox takes a record without its event as a change of its other fields (its write
// state): the stored event stays. Such a record that is not in the outbox stores nothing.
func testPutWithoutEvent(t *testing.T, o deadletter.Outbox) {
	if _, ok := o.(deadletter.EventOutbox); !ok {
		t.Skip("not an EventOutbox: every Put carries the event")
	}
	waiting, tried := record(t, 1, "sub-a", "e1", false), record(t, 1, "sub-a", "e1", true)
	put(t, o, waiting)
	loaded := load(t, o)
	if len(loaded) != 1 {
		t.Fatalf("loaded %+v, want one record", loaded)
	}
	change := loaded[0]
	change.FirstWriteAttempt, change.WriteAttempts, change.ObjectKey = tried.FirstWriteAttempt, tried.WriteAttempts, tried.ObjectKey
	put(t, o, change)
	requireRecords(t, o, load(t, o), tried)
	gone := withoutEvent(record(t, 2, "sub-a", "e2", true))
	put(t, o, gone)
	requireRecords(t, o, load(t, o), tried)
}
