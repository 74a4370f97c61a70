package actors_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// A subscription actor waiting out its restart back-off is restarted by its topic actor's
// own timer: when the topic actor stops (the topic deleted, the router closed) or the
// subscription is removed meanwhile, nothing is left behind to restart the stopped child
// later.
func TestStoppedTopicLeavesNoRestartBehind(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(h *testkit.Harness, topic *actor.PID) error
	}{
		{"topic stopped", func(h *testkit.Harness, topic *actor.PID) error {
			return h.System().Root.StopFuture(topic).Wait()
		}},
		{"subscription removed", func(h *testkit.Harness, topic *actor.PID) error {
			_, err := h.System().Root.RequestFuture(topic, &actors.RemoveSubscription{Name: "audit"}, time.Minute).Result()
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				sink := &countingSink{panicOn: map[int]bool{1: true}}
				topic := h.Spawn(actors.TopicProps(&actors.TopicConfig{
					Name: "orders", Metrics: new(metrics.Set), RestartBackoff: time.Minute, MaxRestartBackoff: time.Minute,
					Subscriptions: []*actors.SubscriptionConfig{{
						SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: journalOf(t, "audit"), Metrics: new(metrics.Set)},
						Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true}, Sink: sink,
					}},
				}))
				h.Settle() // the sink panicked: audit waits a minute for its restart
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
				if err := tc.stop(h, topic); err != nil {
					t.Fatal(err)
				}
				h.Advance(2 * time.Minute)
				if n := late.Load(); n != 0 {
					t.Errorf("%d restarts sent to the stopped subscription actor after its back-off, want none", n)
				}
			})
		})
	}
}
