package deadletter_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// liveHeap returns the bytes of live heap objects, after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// sampledStore is a store that measures the live heap while the dead-letter outbox is read:
// after a whole read returns (its answer still held) and every few records of a scan.
type sampledStore struct {
	store.Store

	mu   sync.Mutex
	peak int64
}

func (s *sampledStore) sample() {
	h := liveHeap()
	s.mu.Lock()
	s.peak = max(s.peak, h)
	s.mu.Unlock()
}

func (s *sampledStore) maxHeap() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

func (s *sampledStore) DeadLetters(ctx context.Context) ([]store.DeadLetterRecord, error) {
	recs, err := s.Store.DeadLetters(ctx)
	s.sample()
	return recs, err
}

func (s *sampledStore) ScanDeadLetters(ctx context.Context, fn func(store.DeadLetterRecord) error) error {
	n := 0
	return s.Store.ScanDeadLetters(ctx, func(r store.DeadLetterRecord) error {
		if n%100 == 0 {
			s.sample()
		}
		n++
		return fn(r)
	})
}

// bigLetter is dead letter i of sub-a, whose event carries about size bytes of data, all
// told apart by i.
func bigLetter(t *testing.T, i, size int, at time.Time) *actors.DeadLetter {
	t.Helper()
	l := dlLetter(t, "sub-a", fmt.Sprintf("e%d", i), at)
	evs, err := schemas.DecodeEventGrid([]byte(fmt.Sprintf(`[{"id":"e%d","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{"pad":%q}}]`,
		i, strings.Repeat(fmt.Sprintf("%07d,", i), size/8))), dlTopicID, schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	l.Event = evs[0]
	return l
}

// flush asks the dead-letter actor pid to write every record now and returns its status once
// no write runs any more.
func flush(t *testing.T, root *actor.RootContext, pid *actor.PID) *deadletter.Status {
	t.Helper()
	res, err := root.RequestFuture(pid, &deadletter.Flush{}, time.Minute).Result()
	if err != nil {
		t.Fatal(err)
	}
	return res.(*deadletter.Status)
}

// With its outbox in the store, the dead-letter actor holds no pending record's event: with
// the object store down, 2000 dead letters of 64 KiB events handed over by subscriptions,
// tried and retrying, and then loaded again by the next actor after a restart, take far less
// heap than their events (before, the actor kept every event, and its start read the whole
// outbox into one slice twice: some 300 MB here, 3 GB for the 1.4 M records four hours of an
// outage at 100 dead letters a second leave). Once the object store is back every record is
// written, each once, with its event as it was handed over: the write reads the events back.
//
// The disk store's synced writes cannot run in a synctest bubble (pebble's WaitGroups cross
// it), so the test runs in real time, moved on by Flush (write everything now, answer once no
// write runs) rather than by the delay, and with a back-off longer than the test. Under the
// race detector, which makes it some ten times slower, it runs a tenth of the records and
// checks only what is written.
func TestPendingDeadLettersHoldNoEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 200 MB to a disk store")
	}
	n, measure := 2000, !raceEnabled
	if raceEnabled {
		n = 200
	}
	const eventBytes = 64 << 10
	bound := int64(n * eventBytes / 4) // the events are 125 MiB
	st, err := disk.Open(t.TempDir(), disk.Options{MemTableSize: 4 << 20, CacheSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	sampled := &sampledStore{Store: st}
	system := actor.NewActorSystem()
	t.Cleanup(system.Shutdown)
	root := system.Root
	ctx := context.Background()
	mem := testkit.NewObjectStore()
	objects := testkit.NewFaultyObjectStore(mem)
	objects.Down()
	newConfig := func() *deadletter.Config {
		outbox, err := deadletter.NewStoreOutbox(ctx, sampled, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &deadletter.Config{
			Store: objects, Outbox: outbox, Metrics: new(metrics.Set), MaxObjectBytes: 1 << 20,
			Backoff: []time.Duration{time.Hour},
		}
	}
	stop := func(pid *actor.PID) {
		if err := root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
	}

	// Subscriptions hand the dead letters over, 100 per update, as they end them.
	before := liveHeap()
	cfg := newConfig()
	pid := root.Spawn(deadletter.Props(cfg))
	handoff := cfg.Outbox.(*deadletter.StoreOutbox).Handoff(root, pid, cfg, dlTarget("sub-a", false))
	at := time.Now()
	sums := make([][sha256.Size]byte, n) // of the events handed over, to check what is written
	for from := 0; from < n; from += 100 {
		recs := make([]store.DeadLetterRecord, 0, 100)
		for i := from; i < from+100; i++ {
			l := bigLetter(t, i, eventBytes, at)
			sums[i] = sha256.Sum256(l.Event.Raw)
			r, err := handoff.Record(l)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		if err := st.PutDeadLetters(ctx, recs); err != nil {
			t.Fatal(err)
		}
		handoff.Handed(recs)
	}
	if s := flush(t, root, pid); s.Retrying != n || objects.Failures() == 0 {
		t.Fatalf("status %+v after %d failed calls, want all %d records retrying", s, objects.Failures(), n)
	}
	if grew := liveHeap() - before; measure && grew > bound {
		t.Errorf("the heap grew by %d MiB with %d records retrying, want less than %d MiB (the events are %d MiB)",
			grew>>20, n, bound>>20, n*eventBytes>>20)
	}

	// The process restarts: the next actor reads the outbox.
	stop(pid)
	before = liveHeap()
	sampled.mu.Lock()
	sampled.peak = 0
	sampled.mu.Unlock()
	cfg = newConfig()
	pid = root.Spawn(deadletter.Props(cfg))
	if s := flush(t, root, pid); s.Retrying != n {
		t.Fatalf("status after the restart %+v, want all %d records retrying", s, n)
	}
	if grew := sampled.maxHeap() - before; measure && grew > bound {
		t.Errorf("the heap grew by up to %d MiB while the outbox was read, want less than %d MiB", grew>>20, bound>>20)
	}
	if grew := liveHeap() - before; measure && grew > bound {
		t.Errorf("the heap grew by %d MiB with %d records loaded, want less than %d MiB", grew>>20, n, bound>>20)
	}

	// The object store comes back: every record is written once, with its event.
	objects.Up()
	if s := flush(t, root, pid); s.Pending() != 0 || s.RecordsWritten != n {
		t.Fatalf("status %+v, want all %d records written", s, n)
	}
	got := mem.Records(t, "deadletters", "", schemas.EventGrid, dlTopicID)
	if len(got) != n {
		t.Fatalf("%d records written, want %d", len(got), n)
	}
	seen := make(map[string]bool, n)
	for _, r := range got {
		var i int
		if _, err := fmt.Sscanf(r.Event.ID, "e%d", &i); err != nil || i < 0 || i >= n || seen[r.Event.ID] {
			t.Fatalf("written record of event %q: unknown or written twice", r.Event.ID)
		}
		seen[r.Event.ID] = true
		if sha256.Sum256(r.Event.Raw) != sums[i] {
			t.Fatalf("event %s written as %d bytes that differ from those handed over", r.Event.ID, len(r.Event.Raw))
		}
	}
	if recs, err := st.DeadLetters(ctx); err != nil || len(recs) != 0 {
		t.Errorf("%d records left in the outbox (%v), want none", len(recs), err)
	}
	stop(pid)
}

// A record that leaves the outbox before its object is written — another node adopted it and
// wrote it — is left out of the object, whose write reads the events from the outbox: the
// others are written, and the one gone is neither written nor counted. With none left, no
// object is written.
func TestRecordGoneFromTheOutboxIsLeftOutOfItsObject(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		st := store.NewMemory()
		mem := testkit.NewObjectStore()
		cfg := &deadletter.Config{Store: mem, Outbox: storeOutbox(t, st), Metrics: new(metrics.Set)}
		pid := h.Spawn(deadletter.Props(cfg))
		for _, id := range []string{"e1", "e2"} {
			h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", id, time.Now()), Target: dlTarget("sub-a", false)})
		}
		h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-b", "e3", time.Now()), Target: dlTarget("sub-b", false)})
		h.Advance(time.Minute) // in the outbox, their events there only
		recs, err := st.DeadLetters(context.Background())
		if err != nil || len(recs) != 3 {
			t.Fatalf("outbox %d records (%v), want 3", len(recs), err)
		}
		if err := st.DeleteDeadLetters(context.Background(), []string{recs[0].ID, recs[2].ID}); err != nil { // e1 and e3
			t.Fatal(err)
		}
		h.Advance(5 * time.Minute)
		got := mem.Records(t, "deadletters", "", schemas.EventGrid, dlTopicID)
		if len(got) != 1 || got[0].Event.ID != "e2" || mem.Puts() != 1 {
			t.Fatalf("written %+v in %d objects, want e2 alone in one", got, mem.Puts())
		}
		if s := dlStatus(t, h, pid); s.Pending() != 0 || s.RecordsWritten != 1 || s.ObjectsWritten != 1 {
			t.Errorf("status %+v, want one record in one object written, nothing pending", s)
		}
		if recs, _ := st.DeadLetters(context.Background()); len(recs) != 0 {
			t.Errorf("%d records left in the outbox, want none", len(recs))
		}
	})
}
