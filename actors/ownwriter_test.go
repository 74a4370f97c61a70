package actors_test

import (
	"context"
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

// gatedUpdates is a store whose subscription state writes wait until the test releases them.
type gatedUpdates struct {
	store.Store
	gate chan struct{}
}

func (g *gatedUpdates) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	<-g.gate
	return g.Store.UpdateSubscription(ctx, topic, sub, u)
}

// A subscription without a router's state writer (a replay's) writes its state off its
// mailbox all the same: while a write is held up it answers, and the write lands once
// released, before the actor's stop work (off its mailbox too) has ended.
func TestSubscriptionWithoutWriterWritesOffTheMailbox(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		g := &gatedUpdates{Store: journalWithEvents(t, 1), gate: make(chan struct{})}
		stops := new(actors.Stops)
		pid := h.Spawn(actors.SubscriptionProps(&actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: g, Metrics: new(metrics.Set), Stops: stops},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sinks.Func(func(context.Context, *sinks.Batch) error { return nil }),
		}))
		h.Settle() // e1 delivered; its cursor move is held at the gate
		root := h.System().Root
		res, err := root.RequestFuture(pid, &actors.GetStatus{}, time.Minute).Result()
		if err != nil {
			t.Fatalf("no status while a state write is held up: %v", err)
		}
		if st := res.(*actors.Status); st.Backlog != 0 || st.Cursor != 1 {
			t.Errorf("status while the write is held up = %+v, want e1 settled (cursor 1, no backlog)", st)
		}
		close(g.gate)
		if err := root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		if err := stops.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st, _ := g.Store.LoadSubscription(context.Background(), "orders", "audit"); st.Cursor != 1 {
			t.Errorf("stored cursor %d after the stop, want 1", st.Cursor)
		}
	})
}
