package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// heldHistoryStore is a memory store whose first PutHistory waits until release is closed, so
// a test can make the history writer fall behind; it records the size of every PutHistory.
type heldHistoryStore struct {
	*store.Memory
	entered, release chan struct{}
	once             sync.Once

	mu    sync.Mutex
	sizes []int
}

func (s *heldHistoryStore) PutHistory(ctx context.Context, topic, sub string, epoch uint64, recs []store.HistoryRecord) error {
	s.once.Do(func() {
		close(s.entered)
		<-s.release
	})
	s.mu.Lock()
	s.sizes = append(s.sizes, len(recs))
	s.mu.Unlock()
	return s.Memory.PutHistory(ctx, topic, sub, epoch, recs)
}

// TestHistoryWriterBoundsWhatItHolds makes the history writer fall behind (its first write
// waits) while far more steps are queued than the queue holds: the queue keeps at most
// maxHistoryQueue steps (the rest are dropped and counted as written), and once the writer
// runs again it writes them in batches of at most maxHistoryBatch, so what one write holds in
// memory (histories, their JSON, the store's batch) is bounded however far it fell behind.
func TestHistoryWriterBoundsWhatItHolds(t *testing.T) {
	ctx := context.Background()
	st := &heldHistoryStore{Memory: store.NewMemory(), entered: make(chan struct{}), release: make(chan struct{})}
	if err := st.PutTopic(ctx, "orders", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSubscription(ctx, "orders", "s", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	w := newHistoryWriter(st, HistoryConfig{Attempts: DefaultHistoryAttempts, Retention: time.Hour}, slog.New(slog.DiscardHandler))
	defer w.close()
	now := time.Now()
	policy := &retry.Policy{}
	// record returns a delivered first attempt of events from to to (inclusive).
	record := func(from, to int) *actors.AttemptRecord {
		rec := &actors.AttemptRecord{Topic: "orders", Subscription: "s", Time: now, Outcome: schemas.Delivered}
		for i := from; i <= to; i++ {
			rec.EventIDs = append(rec.EventIDs, fmt.Sprintf("e-%07d", i))
			rec.Attempts = append(rec.Attempts, 1)
			rec.Decisions = append(rec.Decisions, retry.Decision{})
			rec.PublishTimes = append(rec.PublishTimes, now)
		}
		return rec
	}
	w.enqueue(record(0, 0), policy)
	<-st.entered // the writer holds step 0 and waits in its write

	// Records of 500 events: the writer's batches of maxHistoryBatch steps split some.
	const offered = maxHistoryQueue + maxHistoryQueue/2
	for i := 1; i <= offered; i += 500 {
		w.enqueue(record(i, min(i+499, offered)), policy)
	}
	w.mu.Lock()
	queued, dropped := w.steps, w.dropped
	w.mu.Unlock()
	if queued != maxHistoryQueue || dropped != offered-maxHistoryQueue {
		t.Errorf("while the writer is behind: %d steps queued and %d dropped of %d offered, want %d and %d",
			queued, dropped, offered, maxHistoryQueue, offered-maxHistoryQueue)
	}

	close(st.release)
	if err := w.flush(ctx); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	sizes := st.sizes
	st.mu.Unlock()
	total := 0
	for _, n := range sizes {
		total += n
		if n > maxHistoryBatch {
			t.Errorf("one write of %d histories, want at most %d per write (writes: %v)", n, maxHistoryBatch, sizes)
			break
		}
	}
	if total != 1+maxHistoryQueue {
		t.Errorf("%d histories written, want %d (step 0 and the queued ones)", total, 1+maxHistoryQueue)
	}
	// Every queued step is in the store, those of records split between batches too, and
	// the first dropped one is not.
	for i := range maxHistoryQueue + 1 {
		if _, err := st.History(ctx, "orders", "s", fmt.Sprintf("e-%07d", i), now); err != nil {
			t.Fatalf("history of queued step %d: %v", i, err)
		}
	}
	if _, err := st.History(ctx, "orders", "s", fmt.Sprintf("e-%07d", maxHistoryQueue+1), now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("history of the first dropped step: %v, want not found", err)
	}
}

// A history write of a subscription's epoch that lands after the subscription was deleted and
// created again under its name writes nothing under the new one: the writer hands the
// record's epoch to the store, which refuses it (store.ErrStaleEpoch), and keeps the steps of
// the two epochs apart, so a record of the new epoch queued behind it is written. This is
// what keeps a late write out of a successor where the router cannot wait for the writer
// (another node's delete, in cluster mode).
func TestHistoryWriterDropsADeletedEpoch(t *testing.T) {
	ctx := context.Background()
	st := &heldHistoryStore{Memory: store.NewMemory(), entered: make(chan struct{}), release: make(chan struct{})}
	if err := st.PutTopic(ctx, "orders", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	epoch := func() uint64 {
		if err := st.PutSubscription(ctx, "orders", "s", []byte("{}")); err != nil {
			t.Fatal(err)
		}
		ss, err := st.LoadSubscription(ctx, "orders", "s")
		if err != nil {
			t.Fatal(err)
		}
		return ss.Epoch
	}
	first := epoch()
	w := newHistoryWriter(st, HistoryConfig{Attempts: DefaultHistoryAttempts, Retention: time.Hour}, slog.New(slog.DiscardHandler))
	defer w.close()
	now := time.Now()
	record := func(epoch uint64, id string) *actors.AttemptRecord {
		return &actors.AttemptRecord{
			Topic: "orders", Subscription: "s", Epoch: epoch, Time: now, Outcome: schemas.Delivered,
			EventIDs: []string{id}, Attempts: []int{1}, Decisions: []retry.Decision{{}}, PublishTimes: []time.Time{now},
		}
	}
	w.enqueue(record(first, "old"), &retry.Policy{})
	<-st.entered // the first epoch's write waits
	if err := st.DeleteSubscription(ctx, "orders", "s"); err != nil {
		t.Fatal(err)
	}
	second := epoch()
	w.enqueue(record(first, "same"), &retry.Policy{})
	w.enqueue(record(second, "same"), &retry.Policy{})
	close(st.release)
	if err := w.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.History(ctx, "orders", "s", "old", now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("history of the deleted epoch's event under the new subscription: %v, want not found", err)
	}
	rec, err := st.History(ctx, "orders", "s", "same", now)
	if err != nil {
		t.Fatalf("history of the new epoch's event: %v", err)
	}
	var e Explanation
	if err := decodeExplanation(rec.Payload, "same", &e); err != nil || len(e.Attempts) != 1 {
		t.Errorf("history of the new epoch's event: %+v, %v; want its one attempt, none of the deleted epoch's", e, err)
	}
}
