package router_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// writeLog is a store that records how the dead-letter outbox is written: the updates that
// carried dead letters (with the cursor they set) and the separate outbox puts.
type writeLog struct {
	store.Store
	mu       sync.Mutex
	handoffs []store.Update
	puts     int
}

func (w *writeLog) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if len(u.DeadLetters) > 0 {
		w.mu.Lock()
		w.handoffs = append(w.handoffs, u)
		w.mu.Unlock()
	}
	return w.Store.UpdateSubscription(ctx, topic, sub, u)
}

func (w *writeLog) PutDeadLetters(ctx context.Context, recs []store.DeadLetterRecord) error {
	w.mu.Lock()
	w.puts++
	w.mu.Unlock()
	return w.Store.PutDeadLetters(ctx, recs)
}

// An event that ends is settled and put in the dead-letter outbox by one store write: the
// update that moves the subscription's cursor past it carries its record, and nothing is put
// in the outbox separately before the record's first write attempt.
func TestEndedEventIsSettledAndHandedOverInOneWrite(t *testing.T) {
	w := &writeLog{Store: store.NewMemory()}
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(time.Minute) // ended at its first attempt (400); written after 5 min
		w.mu.Lock()
		handoffs, puts := w.handoffs, w.puts
		w.mu.Unlock()
		if puts != 0 {
			t.Errorf("%d separate outbox puts before the first write attempt, want none", puts)
		}
		if len(handoffs) != 1 || len(handoffs[0].DeadLetters) != 1 || handoffs[0].Cursor != 1 {
			t.Fatalf("updates carrying dead letters: %+v, want one that moves the cursor to 1 with e1's record", handoffs)
		}
		recs, err := w.DeadLetters(context.Background())
		if err != nil || len(recs) != 1 || recs[0].ID != handoffs[0].DeadLetters[0].ID {
			t.Fatalf("outbox %+v (%v), want the handed-over record", recs, err)
		}
		h.Advance(5 * time.Minute)
		got := h.DeadLetterObjects().Records(t, "deadletters", "", schemas.EventGrid, topicIDOf(h, "orders"))
		if len(got) != 1 || got[0].Event.ID != "e1" {
			t.Fatalf("records written: %+v, want e1", got)
		}
		if recs, _ := w.DeadLetters(context.Background()); len(recs) != 0 {
			t.Errorf("%d records left in the outbox after the write, want none", len(recs))
		}
	}, testkit.WithStore(w))
}
