package deadletter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// A replay stopped while its subscription actor waits out the restart back-off of a sink
// panic leaves nothing behind to restart the stopped actor later.
func TestStoppedReplayLeavesNoRestartBehind(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		cfg := &actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: dlTopicID, InputSchema: schemas.EventGrid, Metrics: new(metrics.Set)},
			Name:               "sub-a", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sinks.Func(func(context.Context, *sinks.Batch) error { panic("sink bug") }),
		}
		pid := h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{Subscription: cfg, Events: replayEvents(t, "e1"), PublishTime: time.Now()}))
		h.Settle() // the sink panicked: the replay's subscription actor waits for its restart
		var late atomic.Int32
		events := h.System().EventStream
		sub := events.Subscribe(func(evt any) {
			if dl, ok := evt.(*actor.DeadLetterEvent); ok {
				if _, ok := dl.Message.(*actor.Restart); ok {
					late.Add(1)
				}
			}
		})
		defer events.Unsubscribe(sub)
		if err := h.System().Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		h.Advance(2 * time.Minute)
		if n := late.Load(); n != 0 {
			t.Errorf("%d restarts sent to the stopped subscription actor after its back-off, want none", n)
		}
	})
}
