package router

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/store"
)

// A start whose topic actor does not answer in time (its mailbox long under load) fails,
// and the placement counts the actor as not running: it stops nothing when the lease goes
// (to another node). So the actor the topic actor starts once it comes to the request must
// not go on running and delivering here.
func TestClusterStartThatTimedOutLeavesNoActor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r, c, _, k := unplacedFixture(t, store.NewMemory())
		top, err := r.topic("orders")
		if err != nil {
			t.Fatal(err)
		}

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
		r, c, s, k := unplacedFixture(t, store.NewMemory())
		top, err := r.topic("orders")
		if err != nil {
			t.Fatal(err)
		}

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
		requireClosed(t, w, "the started actor's writer after the stop")
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
