package deadletter_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

const dlTopicID = "/subscriptions/0/resourceGroups/rg/providers/Microsoft.EventGrid/topics/orders"

// dlLetter is a dead letter of topic orders for subscription sub whose last attempt was at.
func dlLetter(t *testing.T, sub, id string, at time.Time) *actors.DeadLetter {
	t.Helper()
	evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"`+id+`","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{"n":1}}]`), dlTopicID, schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	return &actors.DeadLetter{
		Topic: "orders", Subscription: sub, TopicID: dlTopicID, InputSchema: schemas.EventGrid, DeliverySchema: schemas.EventGrid,
		Event: evs[0], Reason: schemas.MaxDeliveryAttemptsExceeded, DeliveryAttempts: 3, LastOutcome: schemas.GenericError,
		LastHTTPStatus: 500, PublishTime: at.Add(-time.Minute), LastAttemptTime: at,
	}
}

func dlTarget(sub string, notify bool) deadletter.Target {
	return deadletter.Target{
		Bucket: "deadletters", Prefix: deadletter.Prefix("", "orders", sub), Notify: notify,
		Format: schemas.DeadLetterFormat{Input: schemas.EventGrid, Delivery: schemas.EventGrid, TopicID: dlTopicID},
	}
}

// sequentialIDs names objects id-1, id-2, ... so keys are predictable.
func sequentialIDs() func() string {
	var mu sync.Mutex
	n := 0
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("id-%d", n)
	}
}

// warnings records the warnings logged.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == logattr.EventID {
			b.WriteString(" id=" + a.Value.String())
		}
		if ids, ok := a.Value.Any().([]string); ok && a.Key == "eventIds" {
			for _, id := range ids {
				b.WriteString(" id=" + id)
			}
		}
		return true
	})
	w.mu.Lock()
	w.msgs = append(w.msgs, b.String())
	w.mu.Unlock()
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }
func (w *warnings) matching(prefix string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.msgs {
		if strings.HasPrefix(m, prefix) {
			out = append(out, m)
		}
	}
	return out
}

func dlStatus(t *testing.T, h *testkit.Harness, pid *actor.PID) *deadletter.Status {
	t.Helper()
	res, err := h.System().Root.RequestFuture(pid, &deadletter.GetStatus{}, time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	return res.(*deadletter.Status)
}

func TestDeadLetterKeyAndPrefix(t *testing.T) {
	tests := []struct {
		name              string
		namespace, sub, t string
		at                time.Time
		want              string
	}{
		{"classic: upper case, not zero-padded", "", "my-blob-subscription", "orders", time.Date(2019, 8, 8, 5, 59, 0, 0, time.UTC), "MY-BLOB-SUBSCRIPTION/2019/8/8/5/111.json"},
		{"UTC", "", "s1", "orders", time.Date(2024, 1, 1, 0, 30, 0, 0, time.FixedZone("CEST", 2*3600)), "S1/2023/12/31/22/111.json"},
		{"namespace topic", "egrid", "Sub-1", "orders", time.Date(2024, 11, 30, 23, 0, 0, 0, time.UTC), "egrid/orders/Sub-1/2024/11/30/23/111.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := deadletter.Key(deadletter.Prefix(tt.namespace, tt.t, tt.sub), tt.at, "111"); got != tt.want {
				t.Errorf("key = %s, want %s", got, tt.want)
			}
		})
	}
}

// Records wait the delay after their last attempt; then the records due together are written
// as one object per subscription (SPEC §5).
func TestDeadLettersWaitThenOneObjectPerSubscription(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		store := testkit.NewObjectStore()
		var notified []*deadletter.Object
		var mu sync.Mutex
		pid := h.Spawn(deadletter.Props(&deadletter.Config{
			Store: store, NewID: sequentialIDs(),
			OnWritten: func(_ context.Context, o *deadletter.Object) {
				mu.Lock()
				notified = append(notified, o)
				mu.Unlock()
			},
		}))
		t0 := time.Now()
		root := h.System().Root
		for i := range 3 {
			root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", fmt.Sprintf("a%d", i), t0.Add(time.Duration(i)*time.Second)), Target: dlTarget("sub-a", true)})
		}
		for i := range 2 {
			root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-b", fmt.Sprintf("b%d", i), t0), Target: dlTarget("sub-b", false)})
		}
		h.Advance(5*time.Minute - time.Second)
		if n := store.Puts(); n != 0 {
			t.Fatalf("%d objects written before the 5-minute delay", n)
		}
		if st := dlStatus(t, h, pid); st.Waiting != 5 {
			t.Errorf("status %+v, want 5 waiting", st)
		}
		h.Advance(time.Minute)
		objs := store.Objects("deadletters")
		keys := make([]string, len(objs))
		for i, o := range objs {
			keys[i] = o.Key
			// Written no sooner than the delay and within the slack (30 s) after it.
			if wait := o.LastModified.Sub(t0); wait < 5*time.Minute || wait > 5*time.Minute+32*time.Second {
				t.Errorf("%s written %v after the last attempts, want 5 min to 5 min 30 s", o.Key, wait)
			}
		}
		// Virtual time starts at 2000-01-01T00:00:00Z.
		if want := []string{"SUB-A/2000/1/1/0/id-1.json", "SUB-B/2000/1/1/0/id-2.json"}; !slices.Equal(keys, want) {
			t.Fatalf("objects %v, want %v", keys, want)
		}
		a := store.Records(t, "deadletters", "SUB-A/", schemas.EventGrid, dlTopicID)
		b := store.Records(t, "deadletters", "SUB-B/", schemas.EventGrid, dlTopicID)
		if len(a) != 3 || len(b) != 2 || a[0].Event.ID != "a0" || a[2].Event.ID != "a2" || a[0].LastHTTPStatus != 500 || a[0].DeliveryAttempts != 3 {
			t.Errorf("records: SUB-A %d, SUB-B %d; want 3 and 2 with their facts", len(a), len(b))
		}
		mu.Lock()
		if len(notified) != 1 || notified[0].Info.Key != "SUB-A/2000/1/1/0/id-1.json" || notified[0].Records != 3 || notified[0].Subscription != "sub-a" {
			t.Errorf("notifications %+v, want one for SUB-A's object (SUB-B does not ask)", notified)
		}
		mu.Unlock()
		if st := dlStatus(t, h, pid); st.Pending() != 0 || st.ObjectsWritten != 2 || st.RecordsWritten != 5 {
			t.Errorf("status %+v, want 2 objects and 5 records written, none pending", st)
		}
		h.Advance(24 * time.Hour)
		if n := store.Puts(); n != 2 {
			t.Errorf("%d writes after a quiet day, want still 2", n)
		}
	})
}

func TestDeadLettersSplitLargeFlushes(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		store := testkit.NewObjectStore()
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: store, MaxRecordsPerObject: 2, Delay: time.Second, TimeScale: 1}))
		for i := range 5 {
			h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", fmt.Sprint(i), time.Now()), Target: dlTarget("sub-a", false)})
		}
		h.Advance(2 * time.Second)
		if n := len(store.Objects("deadletters")); n != 3 {
			t.Errorf("%d objects for 5 records at most 2 per object, want 3", n)
		}
		if n := len(store.Records(t, "deadletters", "", schemas.EventGrid, dlTopicID)); n != 5 {
			t.Errorf("%d records written, want 5", n)
		}
	})
}

// A flush is split by the bytes of its records too: an object holds records up to
// MaxObjectBytes (counted by schemas.DeadLetterSizeBound), and a record larger than that is
// written alone, in due order. Every object names its topic in its metadata.
func TestDeadLettersSplitByBytes(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		letter := func(id string, dataBytes int) *actors.DeadLetter {
			l := dlLetter(t, "sub-a", id, time.Now())
			evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"`+id+`","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":"`+
				strings.Repeat("x", dataBytes)+`"}]`), dlTopicID, schemas.ClassicLimits)
			if err != nil {
				t.Fatal(err)
			}
			l.Event = evs[0]
			return l
		}
		letters := []*actors.DeadLetter{letter("s1", 1000), letter("s2", 1000), letter("s3", 1000), letter("big", 10_000), letter("s4", 1000)}
		format := dlTarget("sub-a", false).Format
		sizeOf := func(l *actors.DeadLetter) int {
			return schemas.DeadLetterSizeBound(format, &schemas.DeadLetterRecord{
				Event: l.Event, Reason: l.Reason, DeliveryAttempts: l.DeliveryAttempts, LastOutcome: l.LastOutcome,
				LastHTTPStatus: l.LastHTTPStatus, PublishTime: l.PublishTime, LastAttemptTime: l.LastAttemptTime,
			})
		}
		bound := sizeOf(letters[0]) + sizeOf(letters[1]) // two small records fit, not three
		store := testkit.NewObjectStore()
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: store, MaxObjectBytes: bound, Delay: time.Second, TimeScale: 1, NewID: sequentialIDs()}))
		for _, l := range letters {
			h.System().Root.Send(pid, &deadletter.Enqueue{Letter: l, Target: dlTarget("sub-a", false)})
		}
		h.Advance(2 * time.Second)
		objs := store.Objects("deadletters")
		var got [][]string
		for _, o := range objs { // id-1, id-2, ...: in the order they were made
			body, info, err := store.Get(context.Background(), "deadletters", o.Key, 0)
			if err != nil {
				t.Fatal(err)
			}
			if info.Metadata[deadletter.TopicMetadata] != "orders" {
				t.Errorf("%s has metadata %v, want %s: orders", o.Key, info.Metadata, deadletter.TopicMetadata)
			}
			recs, err := schemas.DecodeDeadLetters(body, schemas.EventGrid, dlTopicID)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) > 1 && info.Size > int64(bound) {
				t.Errorf("%s holds %d bytes in %d records, more than the bound %d", o.Key, info.Size, len(recs), bound)
			}
			var ids []string
			for _, r := range recs {
				ids = append(ids, r.Event.ID)
			}
			got = append(got, ids)
		}
		want := [][]string{{"s1", "s2"}, {"s3"}, {"big"}, {"s4"}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("objects hold %v, want %v", got, want)
		}
	})
}

// A failed write is retried after 10 s, 1 min, then every 5 min, under the same key, and the
// records are written once when the store is back.
func TestDeadLetterWriteBackoff(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		mem := testkit.NewObjectStore()
		store := testkit.NewFaultyObjectStore(mem)
		store.Down()
		warn := &warnings{}
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: store, NewID: sequentialIDs(), Logger: slog.New(warn)}))
		h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		steps := []struct {
			advance  time.Duration
			failures int
		}{
			{5*time.Minute + 30*time.Second, 1}, // the delay and the slack
			{10*time.Second - time.Millisecond, 1},
			{time.Millisecond, 2},
			{time.Minute, 3},
			{5 * time.Minute, 4},
			{5 * time.Minute, 5},
		}
		for i, s := range steps {
			h.Advance(s.advance)
			if got := store.Failures(); got != s.failures {
				t.Fatalf("step %d (+%v): %d failed writes, want %d", i, h.Elapsed(), got, s.failures)
			}
		}
		if st := dlStatus(t, h, pid); st.Retrying != 1 || st.ObjectsWritten != 0 {
			t.Errorf("status %+v, want 1 record retrying", st)
		}
		if n := len(warn.matching("writing dead letters failed; will retry")); n != 5 {
			t.Errorf("%d warnings about failed writes, want 5", n)
		}
		store.Up()
		h.Advance(5 * time.Minute)
		objs := mem.Objects("deadletters")
		if len(objs) != 1 || objs[0].Key != "SUB-A/2000/1/1/0/id-1.json" {
			t.Fatalf("objects %+v, want the one object under the key of its first attempt", objs)
		}
		if recs := mem.Records(t, "deadletters", "", schemas.EventGrid, dlTopicID); len(recs) != 1 || recs[0].Event.ID != "e1" {
			t.Errorf("records %+v, want e1 once", recs)
		}
		h.Advance(time.Hour)
		if mem.Puts() != 1 || store.Failures() != 5 {
			t.Errorf("after the write: %d puts and %d failures, want 1 and 5", mem.Puts(), store.Failures())
		}
	})
}

// Records still unwritten four hours after their first write attempt are dropped: counted by
// subscription under DeadLetterDestinationUnavailable and logged with their event ids.
func TestDeadLettersDroppedAfterFourHours(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		mem := testkit.NewObjectStore()
		store := testkit.NewFaultyObjectStore(mem)
		store.Down()
		warn := &warnings{}
		m := new(metrics.Set)
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: store, Metrics: m, Logger: slog.New(warn)}))
		ids := []string{"dead letters dropped id=e0 id=e1 id=e2 id=e3", "dead letters dropped id=e4 id=e5 id=e6"}
		for i := range 7 {
			sub := "sub-a"
			if i >= 4 {
				sub = "sub-b"
			}
			id := fmt.Sprintf("e%d", i)
			h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, sub, id, time.Now()), Target: dlTarget(sub, false)})
		}
		dropped := func(sub string) int64 {
			return m.Get(metrics.Key{Name: metrics.DroppedEventCount, Scope: "orders/" + sub, Dim: "DeadLetterDestinationUnavailable"})
		}
		firstWrite := 5*time.Minute + 30*time.Second
		h.Advance(firstWrite + 4*time.Hour - time.Second)
		if dropped("sub-a")+dropped("sub-b") != 0 {
			t.Fatalf("records dropped before the four hours were up")
		}
		if st := dlStatus(t, h, pid); st.Retrying != 7 {
			t.Errorf("status %+v, want 7 records retrying", st)
		}
		h.Advance(time.Second)
		if dropped("sub-a") != 4 || dropped("sub-b") != 3 {
			t.Errorf("dropped %d and %d, want 4 and 3", dropped("sub-a"), dropped("sub-b"))
		}
		got := warn.matching("dead letters dropped")
		slices.Sort(got)
		if !slices.Equal(got, ids) {
			t.Errorf("drop warnings %v, want one per subscription, with its event ids: %v", got, ids)
		}
		if st := dlStatus(t, h, pid); st.Pending() != 0 || st.RecordsDropped != 7 {
			t.Errorf("status %+v, want nothing pending and 7 dropped", st)
		}
		failures := store.Failures()
		store.Up()
		h.Advance(24 * time.Hour)
		if store.Failures() != failures || mem.Puts() != 0 {
			t.Errorf("dropped records were tried again")
		}
	})
}

func TestFlushWritesEverythingNow(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		store := testkit.NewObjectStore()
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: store}))
		h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		res, err := h.System().Root.RequestFuture(pid, &deadletter.Flush{}, time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if st := res.(*deadletter.Status); st.Pending() != 0 || st.RecordsWritten != 1 {
			t.Errorf("flush answered %+v, want the record written", st)
		}
		if len(store.Objects("deadletters")) != 1 {
			t.Errorf("no object after the flush")
		}
	})
}

// The in-memory outbox dies with the actor: what it still holds when the actor stops is
// counted as dropped, never lost silently.
func TestStoppingWithAnInMemoryOutboxCountsTheLoss(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		m := new(metrics.Set)
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: testkit.NewObjectStore(), Metrics: m}))
		h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Settle() // a stop overtakes messages still in the mailbox
		if err := h.System().Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		if got := m.Get(metrics.Key{Name: metrics.DroppedEventCount, Scope: "orders/sub-a", Dim: "DeadLetterDestinationUnavailable"}); got != 1 {
			t.Errorf("DroppedEventCount %d after stopping with one record, want 1", got)
		}
	})
}

// durableOutbox stands for a durable outbox: the actor does not count its records as lost
// when it stops.
type durableOutbox struct{ *deadletter.MemoryOutbox }

// The outbox seam: a new actor on the same (durable) outbox picks the records up, and records
// whose write was already tried are written at once.
func TestOutboxSurvivesTheActor(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		outbox := durableOutbox{deadletter.NewMemoryOutbox()}
		mem := testkit.NewObjectStore()
		store := testkit.NewFaultyObjectStore(mem)
		store.Down()
		m := new(metrics.Set)
		cfg := &deadletter.Config{Store: store, Outbox: outbox, Metrics: m}
		first := h.Spawn(deadletter.Props(cfg))
		h.System().Root.Send(first, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "tried", time.Now()), Target: dlTarget("sub-a", false)})
		h.Advance(5*time.Minute + 35*time.Second) // the first write fails
		h.System().Root.Send(first, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "waiting", time.Now()), Target: dlTarget("sub-a", false)})
		h.Settle()
		if err := h.System().Root.StopFuture(first).Wait(); err != nil {
			t.Fatal(err)
		}
		recs, _ := outbox.Load(context.Background())
		if len(recs) != 2 || recs[0].FirstWriteAttempt.IsZero() || recs[0].WriteAttempts != 1 || !recs[1].FirstWriteAttempt.IsZero() {
			t.Fatalf("outbox after the stop: %+v, want the tried record (1 attempt) and the waiting one", recs)
		}
		store.Up()
		second := h.Spawn(deadletter.Props(cfg))
		h.Settle()
		if got := mem.Records(t, "deadletters", "", schemas.EventGrid, dlTopicID); len(got) != 1 || got[0].Event.ID != "tried" {
			t.Fatalf("written at once after the restart: %+v, want the tried record", got)
		}
		h.Advance(6 * time.Minute)
		if got := mem.Records(t, "deadletters", "", schemas.EventGrid, dlTopicID); len(got) != 2 {
			t.Fatalf("%d records written, want both", len(got))
		}
		if st := dlStatus(t, h, second); st.Pending() != 0 {
			t.Errorf("status %+v, want nothing pending", st)
		}
		if got := m.Snapshot().Sum(metrics.DroppedEventCount, "orders/sub-a"); got != 0 {
			t.Errorf("%d records counted as dropped, want none", got)
		}
	})
}

// An object store that blocks every write until released, to see what is written together.
type gatedStore struct {
	sinks.ObjectStore
	gate chan struct{}
}

func (g *gatedStore) Put(ctx context.Context, bucket, key string, body []byte, opts sinks.PutOptions) (sinks.ObjectInfo, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return sinks.ObjectInfo{}, ctx.Err()
	}
	return g.ObjectStore.Put(ctx, bucket, key, body, opts)
}

// Records that arrive while their subscription's object is being written wait for the next
// flush: an object's content is fixed when its write starts.
func TestRecordsArrivingDuringAWriteGoToTheNextObject(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		mem := testkit.NewObjectStore()
		g := &gatedStore{ObjectStore: mem, gate: make(chan struct{})}
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: g}))
		root := h.System().Root
		root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Advance(6 * time.Minute)
		root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e2", time.Now()), Target: dlTarget("sub-a", false)})
		h.Settle()
		if st := dlStatus(t, h, pid); st.Writing != 1 || st.Waiting != 1 {
			t.Errorf("status %+v, want one writing and one waiting", st)
		}
		close(g.gate)
		h.Advance(6 * time.Minute)
		if n := len(mem.Objects("deadletters")); n != 2 {
			t.Errorf("%d objects, want 2", n)
		}
	})
}

// The delay and the back-off are policy durations, divided by the time scale.
func TestDeadLetterDelayScales(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		store := testkit.NewObjectStore()
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: store, TimeScale: 60}))
		h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Advance(4 * time.Second)
		if store.Puts() != 0 {
			t.Fatal("written before the scaled delay (5 s)")
		}
		h.Advance(2 * time.Second)
		if store.Puts() != 1 {
			t.Fatal("not written after the scaled delay and slack (5.5 s)")
		}
	})
}
