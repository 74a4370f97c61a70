package router

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/store"
)

// A start whose topic actor does not answer in time (its mailbox long under load) fails,
// and the placement counts the actor as not running: it stops nothing when the lease goes
// (to another node). So the actor the topic actor starts once it comes to the request must
// not go on running and delivering here.
func TestClusterStartThatTimedOutLeavesNoActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r, err := New(Config{InsecureDev: true, SkipEndpointValidation: true}, Deps{Store: store.NewMemory()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.CreateTopic(ctx, "orders", TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		// An address: no name to resolve inside the bubble (net's resolver keeps state that a
		// later bubble must not find).
		spec := SubscriptionSpec{Destination: WebHook("https://203.0.113.10/events")}
		if err := r.CreateSubscription(ctx, "orders", "billing", spec); err != nil {
			t.Fatal(err)
		}
		top, err := r.topic("orders")
		if err != nil {
			t.Fatal(err)
		}
		// Placed on no node yet: its actor is not running here.
		if _, err := r.system.Root.RequestFuture(top.pid, &actors.RemoveSubscription{Name: "billing"}, time.Second).Result(); err != nil {
			t.Fatal(err)
		}
		sc, err := r.subscriptionConfig(top, "billing", &spec)
		if err != nil {
			t.Fatal(err)
		}
		k := cluster.Key{Topic: "orders", Subscription: "billing"}
		c := &clusterRuntime{r: r, node: &cluster.Node{}, subs: map[cluster.Key]*clusterSub{k: {cfg: sc}}}

		proc, _ := r.system.ProcessRegistry.Get(top.pid)
		proc.SendSystemMessage(top.pid, &actor.SuspendMailbox{})
		done := make(chan error, 1)
		go func() { done <- c.start(k) }()
		<-time.After(11 * time.Second) // virtual time: past the start's wait for the topic actor
		proc.SendSystemMessage(top.pid, &actor.ResumeMailbox{})
		if err := <-done; err == nil {
			t.Fatal("the start succeeded with the topic actor's mailbox suspended")
		}
		synctest.Wait()

		res, err := r.system.Root.RequestFuture(top.pid, &actors.GetStatus{Subscription: "billing"}, time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err, _ := res.(error); !errors.Is(err, actors.ErrNotRunning) {
			t.Errorf("the topic actor answers %v for the subscription whose start failed; want it not running", res)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		<-time.After(time.Minute) // virtual time: the actor system's dead-letter throttle, which the late answer started, ends
	})
}

// An unwant (the subscription deleted, or awaiting validation) that comes while the
// subscription's start is under way, waiting for the topic actor, must not lose the state
// writer that start makes: the placement's stop, which comes after the start, closes it
// whichever of the start and the unwant ends first.
func TestClusterUnwantDuringAStartClosesItsWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r, err := New(Config{InsecureDev: true, SkipEndpointValidation: true}, Deps{Store: store.NewMemory()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.CreateTopic(ctx, "orders", TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		spec := SubscriptionSpec{Destination: WebHook("https://203.0.113.10/events")}
		if err := r.CreateSubscription(ctx, "orders", "billing", spec); err != nil {
			t.Fatal(err)
		}
		top, err := r.topic("orders")
		if err != nil {
			t.Fatal(err)
		}
		// Placed on no node yet: its actor is not running here.
		if _, err := r.system.Root.RequestFuture(top.pid, &actors.RemoveSubscription{Name: "billing"}, time.Second).Result(); err != nil {
			t.Fatal(err)
		}
		sc, err := r.subscriptionConfig(top, "billing", &spec)
		if err != nil {
			t.Fatal(err)
		}
		k := cluster.Key{Topic: "orders", Subscription: "billing"}
		s := &clusterSub{cfg: sc}
		c := &clusterRuntime{r: r, node: &cluster.Node{}, subs: map[cluster.Key]*clusterSub{k: s}}

		// The start waits for the topic actor, whose mailbox is held; the unwant comes then.
		proc, _ := r.system.ProcessRegistry.Get(top.pid)
		proc.SendSystemMessage(top.pid, &actor.SuspendMailbox{})
		done := make(chan error, 1)
		go func() { done <- c.start(k) }()
		synctest.Wait()
		c.unwant("orders", "billing")
		proc.SendSystemMessage(top.pid, &actor.ResumeMailbox{})
		if err := <-done; err != nil {
			t.Fatalf("start: %v", err)
		}
		c.mu.Lock()
		w := s.writer
		c.mu.Unlock()
		if w == nil {
			t.Fatal("the start that returned set no writer")
		}

		c.stop(k) // the placement's stop of the unwanted subscription
		if err := w.Enqueue("billing", store.Update{}, nil); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("the started actor's writer after the stop: Enqueue = %v, want it closed", err)
		}
		c.mu.Lock()
		left := len(c.subs)
		c.mu.Unlock()
		if left != 0 {
			t.Errorf("%d subscriptions left in the cluster runtime after the stop, want none", left)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
