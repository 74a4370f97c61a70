package actors_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// panicNow makes a topic actor spawned with panicOn panic in its Receive: a bug its
// supervisor restarts it after.
type panicNow struct{}

// panicOn configures props to panic at a [panicNow] and counts the actor's Started messages
// (one per incarnation) in started.
func panicOn(props *actor.Props, started *atomic.Int32) *actor.Props {
	return props.Configure(actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			switch env.Message.(type) {
			case panicNow, *panicNow:
				panic("topic bug")
			case *actor.Started:
				started.Add(1)
			}
			next(c, env)
		}
	}))
}

// A topic actor restarted after a panic runs the subscriptions the topic has at that moment:
// one added since it was spawned delivers, and one removed since stays removed. It restarted
// only those it was spawned with.
func TestRestartedTopicRunsItsCurrentSubscriptions(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := store.NewMemory()
		_ = st.PutTopic(ctx, "orders", nil)
		var mu sync.Mutex
		delivered := map[string][]string{}
		sub := func(name string) *actors.SubscriptionConfig {
			_ = st.PutSubscription(ctx, "orders", name, nil)
			return &actors.SubscriptionConfig{
				SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set)},
				Name:               name, DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
				Sink: sinks.Func(func(_ context.Context, b *sinks.Batch) error {
					mu.Lock()
					defer mu.Unlock()
					for _, e := range b.Events {
						delivered[name] = append(delivered[name], e.ID)
					}
					return nil
				}),
			}
		}
		var started atomic.Int32
		root := h.System().Root
		topic := h.Spawn(panicOn(actors.TopicProps(&actors.TopicConfig{
			Name: "orders", Metrics: new(metrics.Set), Subscriptions: []*actors.SubscriptionConfig{sub("alpha")},
		}), &started))
		if _, err := root.RequestFuture(topic, &actors.AddSubscription{Config: sub("beta")}, time.Minute).Result(); err != nil {
			t.Fatalf("AddSubscription beta: %v", err)
		}
		if _, err := root.RequestFuture(topic, &actors.RemoveSubscription{Name: "alpha"}, time.Minute).Result(); err != nil {
			t.Fatalf("RemoveSubscription alpha: %v", err)
		}
		root.Send(topic, &panicNow{})
		h.Settle()
		if n := started.Load(); n != 2 {
			t.Fatalf("topic actor started %d times, want 2 (spawned, then restarted after its panic)", n)
		}

		evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"e1","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}]`), "/topics/orders", schemas.ClassicLimits)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(ctx, "orders", time.Now(), evs); err != nil {
			t.Fatal(err)
		}
		entries, err := st.Read(ctx, "orders", 1, 10)
		if err != nil {
			t.Fatal(err)
		}
		root.Send(topic, &actors.Appended{Entries: entries})
		h.Settle()

		mu.Lock()
		got := map[string][]string{"alpha": delivered["alpha"], "beta": delivered["beta"]}
		mu.Unlock()
		if !slices.Equal(got["beta"], []string{"e1"}) || len(got["alpha"]) != 0 {
			t.Errorf("after the restart alpha delivered %v and beta %v; want beta e1, alpha (removed) nothing", got["alpha"], got["beta"])
		}
		v, err := root.RequestFuture(topic, &actors.GetStatus{Subscription: "alpha"}, time.Minute).Result()
		if got, ok := v.(error); err != nil || !ok || !errors.Is(got, actors.ErrNotRunning) {
			t.Errorf("status of the removed alpha after the restart = %v, %v; want ErrNotRunning", v, err)
		}
		if v, err := root.RequestFuture(topic, &actors.GetStatus{Subscription: "beta"}, time.Minute).Result(); err != nil {
			t.Errorf("status of beta after the restart: %v", err)
		} else if s, ok := v.(*actors.Status); !ok || s.Cursor != 1 {
			t.Errorf("status of beta after the restart = %+v, want cursor 1", v)
		}
	})
}

// A subscription whose actor stopped itself after a fenced state write (another node took
// it over) stays stopped when its topic actor restarts: its owner removes or adds it. A
// restart that started it again would load the new owner's state and deliver its events.
func TestRestartedTopicLeavesAFencedSubscriptionStopped(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := &fencedStore{Store: journalWithEvents(t, 1)} // e1 for subscription audit, at cursor 0
		// Fenced before the actor starts: it loads (a read, not fenced), finds e1 in the
		// journal past its cursor and delivers it on its own, and the cursor write after that
		// is refused. Fenced only after the spawn, that catch-up raced with the test: when its
		// cursor write landed first, e1 was settled unfenced and e2 was delivered too.
		st.fenced.Store(true)
		var calls atomic.Int32
		var started atomic.Int32
		root := h.System().Root
		topic := h.Spawn(panicOn(actors.TopicProps(&actors.TopicConfig{Name: "orders", Metrics: new(metrics.Set), Subscriptions: []*actors.SubscriptionConfig{{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set)},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sinks.Func(func(context.Context, *sinks.Batch) error { calls.Add(1); return nil }),
		}}}), &started))
		h.Settle() // e1 delivered; its cursor write refused: the actor stops itself at once
		evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"e2","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}]`), "/topics/orders", schemas.ClassicLimits)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Append(ctx, "orders", time.Now(), evs); err != nil {
			t.Fatal(err)
		}
		entries, _ := st.Read(ctx, "orders", 2, 1)
		root.Send(topic, &actors.Appended{Entries: entries})
		h.Settle() // e2 is not delivered: the actor has stopped
		if n := calls.Load(); n != 1 {
			t.Fatalf("sink called %d times before the restart, want 1 (e1)", n)
		}

		root.Send(topic, &panicNow{})
		h.Advance(time.Minute)
		if n := started.Load(); n != 2 {
			t.Fatalf("topic actor started %d times, want 2 (spawned, then restarted after its panic)", n)
		}
		if n, c := st.loads.Load(), calls.Load(); n != 1 || c != 1 {
			t.Errorf("after the topic's restart: state loaded %d times and sink called %d; want 1 and 1 (the fenced subscription stays stopped)", n, c)
		}
		if _, err := root.RequestFuture(topic, &actors.RemoveSubscription{Name: "audit"}, time.Minute).Result(); err != nil {
			t.Errorf("RemoveSubscription of the fenced subscription after the restart: %v", err)
		}
	})
}
