package testkit_test

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

// A single subscription actor, spawned without a router: a probe stands in for the destination
// and receives each batch the actor sends.
func TestProbeSingleSubscriptionActor(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := store.NewMemory()
		if err := st.PutTopic(ctx, "orders", nil); err != nil {
			t.Fatal(err)
		}
		if err := st.PutSubscription(ctx, "orders", "audit", nil); err != nil {
			t.Fatal(err)
		}
		evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"e1","subject":"/o/1","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}]`), "/topics/orders", schemas.ClassicLimits)
		if err != nil {
			t.Fatal(err)
		}
		probe := h.Probe()
		sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			h.System().Root.Send(probe.PID(), b)
			return nil
		})
		pid := h.Spawn(actors.SubscriptionProps(&actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set)},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{}, Sink: sink,
		}))
		h.System().Root.Send(pid, &actors.Deliver{Entries: []store.Entry{{Seq: 1, PublishTime: time.Now(), Event: evs[0]}}, Through: 1})

		b := testkit.Expect[*sinks.Batch](t, probe)
		if len(b.Events) != 1 || b.Events[0].ID != "e1" || b.DeliveryCount != 0 || b.ContentType != schemas.ContentTypeJSON {
			t.Fatalf("batch %+v, want e1 as a first attempt in Event Grid schema", b)
		}
		probe.ExpectNoMsg(t)

		// The same entry again (a duplicate notification) is not delivered twice.
		h.System().Root.Send(pid, &actors.Deliver{Entries: []store.Entry{{Seq: 1, PublishTime: time.Now(), Event: evs[0]}}, Through: 1})
		probe.ExpectNoMsg(t)
		state, err := st.LoadSubscription(ctx, "orders", "audit")
		if err != nil {
			t.Fatal(err)
		}
		if state.Cursor != 1 || len(state.Parked) != 0 {
			t.Errorf("stored state %+v, want cursor 1 and nothing parked", state)
		}
	})
}
