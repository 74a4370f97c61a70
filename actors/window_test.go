package actors_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// Events parked for a retry do not fill the window: a subscription whose window is full of
// failing events still delivers new ones at once.
func TestParkedEventsDoNotBlockNewOnes(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := store.NewMemory()
		_ = st.PutTopic(ctx, "orders", nil)
		_ = st.PutSubscription(ctx, "orders", "audit", nil)
		var body []string
		for i := 1; i <= 4; i++ {
			body = append(body, fmt.Sprintf(`{"id":"e%d","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`, i))
		}
		evs, err := schemas.DecodeEventGrid([]byte("["+strings.Join(body, ",")+"]"), "/topics/orders", schemas.ClassicLimits)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var mu sync.Mutex
		delivered := map[string]time.Duration{}
		sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			id := b.Events[0].ID
			if id == "e1" || id == "e2" {
				return &sinks.DeliveryError{Outcome: schemas.GenericError, StatusCode: 500}
			}
			mu.Lock()
			delivered[id] = time.Since(start)
			mu.Unlock()
			return nil
		})
		pid := h.Spawn(actors.SubscriptionProps(&actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), Window: 2},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sink,
		}))
		last, err := st.Append(ctx, "orders", start, evs)
		if err != nil {
			t.Fatal(err)
		}
		entries, _ := st.Read(ctx, "orders", 1, 10)
		h.System().Root.Send(pid, &actors.Deliver{Entries: entries[:2], Through: 2})
		h.Settle() // e1 and e2 fail and are parked for +10 s: the window of 2 is full of them
		h.System().Root.Send(pid, &actors.Deliver{Entries: entries[2:], Through: last})
		h.Settle()
		mu.Lock()
		defer mu.Unlock()
		for _, id := range []string{"e3", "e4"} {
			if at, ok := delivered[id]; !ok || at != 0 {
				t.Errorf("%s delivered at %v (ok=%v), want at +0s while e1 and e2 wait for their retry", id, at, ok)
			}
		}
	})
}

// countedReads is a store that counts its journal reads.
type countedReads struct {
	store.Store
	mu    sync.Mutex
	reads int
}

func (c *countedReads) Read(ctx context.Context, topic string, from uint64, limit int) ([]store.Entry, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Store.Read(ctx, topic, from, limit)
}

// A subscription whose window is full does not read the journal each time an attempt frees a
// slot: it reads again once there is room for a quarter of the window (or its ready queue runs
// low), so a backlog costs a journal read per many events, not one per event.
func TestCatchUpReadsFetchManyEntries(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		const n, window = 1000, 64
		st := &countedReads{Store: journalWithEvents(t, n)}
		var mu sync.Mutex
		var got []string
		sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			mu.Lock()
			got = append(got, b.Events[0].ID)
			mu.Unlock()
			return nil
		})
		pid := h.Spawn(actors.SubscriptionProps(&actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), Window: window, MaxInFlight: 1},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sink,
		}))
		entries, _ := st.Store.Read(context.Background(), "orders", 1, n)
		h.System().Root.Send(pid, &actors.Deliver{Entries: entries, Through: n})
		h.Settle()
		mu.Lock()
		defer mu.Unlock()
		if len(got) != n {
			t.Fatalf("delivered %d events, want %d", len(got), n)
		}
		for i, id := range got {
			if want := fmt.Sprintf("e%d", i+1); id != want {
				t.Fatalf("delivery %d was %s, want %s (in journal order)", i, id, want)
			}
		}
		// The window takes 64 events from the Deliver; the other 936 come from reads of at
		// least 16 (a quarter of the window), so about 59 reads and never one per event.
		st.mu.Lock()
		defer st.mu.Unlock()
		if max := (n-window)/(window/4) + 5; st.reads > max {
			t.Errorf("%d journal reads for %d events behind a window of %d, want at most %d", st.reads, n-window, window, max)
		}
	})
}
