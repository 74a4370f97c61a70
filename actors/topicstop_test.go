package actors_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// A topic actor answers RemoveSubscription only once the subscription's actor has terminated,
// its last state written: cluster mode closes the actor's state writer and gives its lease up
// right after the answer, so an answer sent with the stop still under way lost that write
// (and the actor, failing on the closed writer while stopping, was restarted by its
// supervisor). A write that takes longer than the stop grace no longer holds the answer
// (TestStopDoesNotWaitForAHungStateWrite); cluster mode's stop then waits for it when it
// closes the writer.
func TestRemoveSubscriptionAnswersAfterTheActorsLastWrite(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		g := &gatedUpdates{Store: journalWithEvents(t, 1), gate: make(chan struct{})}
		w := actors.NewStateWriter(g, "orders")
		defer w.Close()
		topic := h.Spawn(actors.TopicProps(&actors.TopicConfig{Name: "orders", Metrics: new(metrics.Set), Subscriptions: []*actors.SubscriptionConfig{{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: g, Writer: w, Metrics: new(metrics.Set)},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sinks.Func(func(context.Context, *sinks.Batch) error { return nil }),
		}}}))
		h.Settle() // e1 delivered; its cursor move is held at the gate
		var released atomic.Bool
		go func() {
			<-time.After(actors.DefaultStopGrace * 3 / 5) // virtual time: the stop waits for the write meanwhile
			released.Store(true)
			close(g.gate)
		}()
		if _, err := h.System().Root.RequestFuture(topic, &actors.RemoveSubscription{Name: "audit"}, time.Minute).Result(); err != nil {
			t.Fatalf("RemoveSubscription: %v", err)
		}
		if !released.Load() {
			t.Fatal("RemoveSubscription was answered while the actor's last state write was still held up")
		}
		if st, _ := g.Store.LoadSubscription(context.Background(), "orders", "audit"); st.Cursor != 1 {
			t.Errorf("stored cursor %d when RemoveSubscription was answered, want 1 (e1 delivered)", st.Cursor)
		}
		// Removing it again (it is gone) is answered at once.
		if _, err := h.System().Root.RequestFuture(topic, &actors.RemoveSubscription{Name: "audit"}, time.Second).Result(); err != nil {
			t.Fatalf("RemoveSubscription of a removed subscription: %v", err)
		}
	})
}
