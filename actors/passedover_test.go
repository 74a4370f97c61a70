package actors_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// passedOver is a store whose journal reads return the even positions without their events:
// positions the store passed over (a JetStream journal holding messages something else
// published there, see store.Entry).
type passedOver struct{ store.Store }

func (p passedOver) Read(ctx context.Context, topic string, from uint64, limit int) ([]store.Entry, error) {
	entries, err := p.Store.Read(ctx, topic, from, limit)
	for i := range entries {
		if entries[i].Seq%2 == 0 {
			entries[i] = store.Entry{Seq: entries[i].Seq}
		}
	}
	return entries, err
}

// A subscription without a filter catching up from the journal moves past entries without an
// event and delivers the events around them; it does not take such an entry in (whose delivery
// would fail the actor at every restart).
func TestCatchUpMovesPastPositionsWithoutAnEvent(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		const n = 9
		st := passedOver{Store: journalWithEvents(t, n)}
		var mu sync.Mutex
		var got []string
		sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			for _, ev := range b.Events {
				got = append(got, ev.ID)
			}
			return nil
		})
		pid := h.Spawn(actors.SubscriptionProps(&actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set)},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sink,
		}))
		h.System().Root.Send(pid, &actors.Deliver{Through: n, From: 1})
		h.Settle()
		mu.Lock()
		defer mu.Unlock()
		slices.Sort(got)
		if want := []string{"e1", "e3", "e5", "e7", "e9"}; !slices.Equal(got, want) {
			t.Errorf("delivered %v, want %v: the events around the positions passed over", got, want)
		}
	})
}
