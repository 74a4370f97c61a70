package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
)

// DeleteTopic waits for a subscription actor whose turn holds its mailbox past protoactor's
// 10 s StopFuture, then deletes the topic fully: it gave up after the 10 s with a "future:
// timeout" error, the topic gone from the router but its state writer never closed and the
// topic still in the store.
func TestDeleteTopicWaitsForASubscriptionTurnHeldPastTheStopFuture(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := store.NewMemory()
		entered, release := make(chan struct{}), make(chan struct{})
		r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{Store: st,
			Sinks: map[string]sinks.Sink{"hook": sinks.Func(func(context.Context, *sinks.Batch) error { return nil })},
			OnAttempt: func(*router.AttemptRecord) {
				close(entered)
				<-release
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.Close(ctx) }()
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
			t.Fatal(err)
		}
		if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("e1"))); err != nil {
			t.Fatal(err)
		}
		<-entered // the turn that took e1's delivery in holds the mailbox
		deleted := make(chan error, 1)
		go func() { deleted <- r.DeleteTopic(ctx, "orders") }()
		<-time.After(time.Minute) // well past the StopFuture's 10 s
		synctest.Wait()
		select {
		case err := <-deleted:
			t.Errorf("DeleteTopic returned (%v) while a subscription actor's turn still held its mailbox", err)
			deleted <- nil
			// The actor's late messages then reach stopped actors: let protoactor's
			// dead-letter log throttle, a ticker, end before the bubble does.
			defer func() { <-time.After(time.Minute) }()
		default:
		}
		close(release)
		if err := <-deleted; err != nil {
			t.Fatalf("DeleteTopic = %v, want the topic deleted", err)
		}
		if _, err := r.Topic("orders"); !errors.Is(err, router.ErrTopicNotFound) {
			t.Errorf("Topic after DeleteTopic = %v, want ErrTopicNotFound", err)
		}
		defs, err := st.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(defs) != 0 {
			t.Errorf("the store still holds %d topics after DeleteTopic, want none", len(defs))
		}
	})
}
