package actors_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// TestEveryAttemptKeepsItsOwnBody: a delivery's body is encoded into a pooled buffer that goes
// back to the pool when its sink call returns. Attempts in flight together, finished out of
// order while new ones start, each see their own events in their body from start to end.
func TestEveryAttemptKeepsItsOwnBody(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		const n, inFlight = 64, 8
		st := journalWithEvents(t, n)
		var (
			mu        sync.Mutex
			held      []chan struct{}
			delivered int
		)
		check := func(b *sinks.Batch, when string) {
			var got []struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(b.Body, &got); err != nil || len(got) != len(b.Events) {
				t.Errorf("%s an attempt of %d events its body is %q (%v)", when, len(b.Events), b.Body, err)
				return
			}
			for i := range got {
				if got[i].ID != b.Events[i].ID {
					t.Errorf("%s an attempt its body carries event %s where its batch has %s", when, got[i].ID, b.Events[i].ID)
				}
			}
		}
		sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			check(b, "at the start of")
			release := make(chan struct{})
			mu.Lock()
			held = append(held, release)
			mu.Unlock()
			<-release
			check(b, "at the end of")
			mu.Lock()
			delivered += len(b.Events)
			mu.Unlock()
			return nil
		})
		cfg := &actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), MaxInFlight: inFlight},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sink,
		}
		h.Spawn(actors.SubscriptionProps(cfg))
		for range n { // each round finishes at least one attempt
			h.Settle()
			mu.Lock()
			hs, done := held, delivered
			held = nil
			mu.Unlock()
			if done == n {
				break
			}
			if len(hs) > inFlight {
				t.Fatalf("%d attempts in flight at once, want at most %d", len(hs), inFlight)
			}
			// The newest first, one at a time: each lets a new attempt start and encode its
			// body while the older ones are still held.
			for i := len(hs) - 1; i >= 0; i-- {
				close(hs[i])
				h.Settle()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if delivered != n {
			t.Errorf("%d events delivered, want %d", delivered, n)
		}
	})
}
