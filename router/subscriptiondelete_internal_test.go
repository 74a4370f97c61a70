package router

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
)

// stateFailingStore is a memory store whose subscription state writes fail.
type stateFailingStore struct{ *store.Memory }

func (stateFailingStore) UpdateSubscription(context.Context, string, string, store.Update) error {
	return errors.New("disk gone")
}

// Deleting a subscription makes the topic's state writer forget its write failures: its actor
// has stopped and nothing asks for them, and the writer lives as long as the topic. Before,
// the failure of every deleted subscription stayed until the topic went.
func TestDeleteSubscriptionForgetsItsWriteFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := stateFailingStore{store.NewMemory()}
		ok := sinks.Func(func(context.Context, *sinks.Batch) error { return nil })
		r, err := New(Config{InsecureDev: true, SkipEndpointValidation: true}, Deps{Store: st, Sinks: map[string]sinks.Sink{"s": ok}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.Close(ctx) }()
		if _, err := r.CreateTopic(ctx, "orders", TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := r.CreateSubscription(ctx, "orders", "billing", SubscriptionSpec{Destination: SinkDestination("s")}); err != nil {
			t.Fatal(err)
		}
		loaded, err := st.LoadSubscription(ctx, "orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		top, err := r.topic("orders")
		if err != nil {
			t.Fatal(err)
		}
		if err := top.writer.Enqueue("billing", store.Update{Epoch: loaded.Epoch, Cursor: 1}, nil); err != nil {
			t.Fatal(err)
		}
		if err := top.writer.Flush("billing", loaded.Epoch); err == nil {
			t.Fatal("Flush after a failed write: nil, want the failure")
		}
		if err := r.DeleteSubscription(ctx, "orders", "billing"); err != nil {
			t.Fatal(err)
		}
		if err := top.writer.Flush("billing", loaded.Epoch); err != nil {
			t.Errorf("the deleted subscription's write failure is still kept: %v", err)
		}
	})
}
