package actors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// A queue subscription that stops while its state load is held up answers the status requests
// kept for the load at once, with an error wrapping ErrNotRunning; before, they waited out
// their own timeouts.
func TestQueueStoppedWhileLoadingAnswersTheRequestsKept(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := store.NewMemory()
		_ = st.PutTopic(ctx, "orders", nil)
		_ = st.PutSubscription(ctx, "orders", "workers", nil)
		g := &gatedFullLoad{Store: st, gate: make(chan struct{})}
		defer close(g.gate)
		pid := h.Spawn(actors.QueueProps(&actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.CloudEvents, Store: g, Metrics: new(metrics.Set)},
			Name:               "workers", DeliverySchema: schemas.CloudEvents,
			Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &actors.QueueConfig{},
		}))
		h.Settle()
		root := h.System().Root
		status := pending(root, pid, &actors.GetStatus{Subscription: "workers"})
		end := pending(root, pid, &actors.EndProbation{Subscription: "workers"})
		h.Settle()
		started := time.Now()
		if err := root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		h.Settle()
		for name, ch := range map[string]chan answer{"status": status, "EndProbation": end} {
			select {
			case a := <-ch:
				if e, ok := a.v.(error); a.err != nil || !ok || !errors.Is(e, actors.ErrNotRunning) {
					t.Errorf("%s kept for the load of a stopped queue answered %+v; want an error wrapping ErrNotRunning", name, a)
				}
			default:
				t.Errorf("%s kept for the load of a stopped queue is not answered; want an answer at once", name)
			}
		}
		if waited := time.Since(started); waited != 0 {
			t.Errorf("answered %v after the stop, want at once", waited)
		}
	})
}
