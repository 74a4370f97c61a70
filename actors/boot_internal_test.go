package actors

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// gatedLoad is a store whose subscription loads wait until the test releases them.
type gatedLoad struct {
	store.Store
	gate chan struct{}
}

func (g *gatedLoad) LoadSubscriptionIndex(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	<-g.gate
	return g.Store.LoadSubscriptionIndex(ctx, topic, sub)
}

// A result of an earlier incarnation's work (a journal read, an attempt, a timer) that reaches
// a restarted actor while it loads its state is dropped: a turn on the not yet loaded state
// wrote the cursor next-1 with next 0, the largest number, which the store keeps and the
// trimmer took for "everything settled", so the subscription's events were trimmed away.
func TestStaleResultsWhileLoadingWriteNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := ordersAudit(t)
		g := &gatedLoad{Store: mem, gate: make(chan struct{})}
		system := actor.NewActorSystem()
		defer system.Shutdown()
		pid := system.Root.Spawn(SubscriptionProps(&SubscriptionConfig{
			SubscriptionShared: &SubscriptionShared{Topic: "orders", InputSchema: schemas.EventGrid, Store: g, Metrics: new(metrics.Set)},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sinks.Func(func(context.Context, *sinks.Batch) error { return nil }),
		}))
		synctest.Wait() // loading, held at the gate
		for _, m := range []any{&journalRead{id: 1 << 60}, &parkedRead{id: 1 << 60}, &attemptDone{id: 1 << 60}, &wake{gen: 1 << 30}} {
			system.Root.Send(pid, m)
		}
		synctest.Wait()
		close(g.gate)
		if err := system.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		st, err := mem.LoadSubscription(ctx, "orders", "audit")
		if err != nil {
			t.Fatal(err)
		}
		if st.Cursor != 0 {
			t.Errorf("stored cursor %d after stale results reached the loading actor, want 0 (nothing delivered)", st.Cursor)
		}
	})
}

// ordersAudit returns a memory store holding topic orders and its subscription audit.
func ordersAudit(t *testing.T) *store.Memory {
	t.Helper()
	mem := store.NewMemory()
	if err := mem.PutTopic(context.Background(), "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := mem.PutSubscription(context.Background(), "orders", "audit", nil); err != nil {
		t.Fatal(err)
	}
	return mem
}
