package actors_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
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

// A subscription actor (queue or push) learns of a failed state write as the write fails,
// not at its next one: with no request after it, a fenced write stops it for good and any
// other failure restarts it from its stored state. It sat idle on a state the store did not
// have — holding its consumers' locks, in cluster mode its lease — until some later request
// made it write again and find the failure.
func TestSubscriptionLearnsOfAFailedStateWriteAtOnce(t *testing.T) {
	tests := []struct {
		name        string
		queue       bool
		fail        error
		wantLoads   int32 // state loads: 1 = never restarted
		wantFenced  int32 // OnFenced calls
		wantRestart int   // "ERROR subscription actor failed" records
	}{
		{name: "queue fenced", queue: true, fail: store.ErrFenced, wantLoads: 1, wantFenced: 1},
		{name: "queue store failed", queue: true, fail: errors.New("input/output error"), wantLoads: 2, wantRestart: 1},
		{name: "push fenced", fail: store.ErrFenced, wantLoads: 1, wantFenced: 1},
		{name: "push store failed", fail: errors.New("input/output error"), wantLoads: 2, wantRestart: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				loads := &fencedStore{Store: journalWithEvents(t, 1)} // e1 for subscription audit
				st := &failNext{Store: loads}
				logs := new(logRecords)
				var fenced atomic.Int32
				cfg := &actors.SubscriptionConfig{
					SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), Logger: slog.New(logs)},
					Name:               "audit", DeliverySchema: schemas.CloudEvents,
					Policy:   &retry.Policy{Profile: retry.Namespace(), NoJitter: true},
					OnFenced: func() { fenced.Add(1) },
				}
				if tt.queue {
					cfg.Queue = &actors.QueueConfig{}
				} else {
					// The endpoint answers 503 first: e1 is parked for a retry, which is a state
					// write. A restarted actor's attempt then waits (until the test ends): it
					// writes nothing more.
					var calls atomic.Int32
					release := make(chan struct{})
					defer close(release)
					cfg.Sink = sinks.Func(func(ctx context.Context, _ *sinks.Batch) error {
						if calls.Add(1) == 1 {
							return &sinks.DeliveryError{Outcome: schemas.Busy, StatusCode: 503}
						}
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-release:
							return nil
						}
					})
				}
				st.fail.Store(&tt.fail) // the first state write fails, and only it
				topic := h.Spawn(actors.TopicProps(&actors.TopicConfig{
					Name: "orders", Metrics: new(metrics.Set), Logger: slog.New(logs),
					Subscriptions: []*actors.SubscriptionConfig{cfg},
				}))
				root := h.System().Root
				h.Settle() // loaded; e1, in the journal, taken in (and attempted: push)
				if tt.queue {
					// e1's receipt is written, and refused.
					_, _ = root.RequestFuture(topic, &actors.ReceiveEvents{Subscription: "audit", ID: 1, MaxEvents: 1, MaxWait: time.Second}, time.Minute).Result()
				}
				// No request after it. Long enough for the push attempt and a restart's
				// back-off, and shorter than e1's first retry delay (10 s).
				h.Advance(5 * time.Second)
				if st.fail.Load() != nil {
					t.Fatal("no state write was made")
				}

				if n := loads.loads.Load(); n != tt.wantLoads {
					t.Errorf("state loaded %d times, want %d", n, tt.wantLoads)
				}
				if n := fenced.Load(); n != tt.wantFenced {
					t.Errorf("OnFenced called %d times, want %d", n, tt.wantFenced)
				}
				if n := logs.count("ERROR subscription actor failed"); n != tt.wantRestart {
					t.Errorf("%d restarts, want %d", n, tt.wantRestart)
				}
			})
		})
	}
}

// failNext fails the next subscription state write with the error set in fail, and only it.
type failNext struct {
	store.Store
	fail atomic.Pointer[error]
}

func (f *failNext) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if err := f.fail.Swap(nil); err != nil {
		return fmt.Errorf("updating subscription %s/%s: %w", topic, sub, *err)
	}
	return f.Store.UpdateSubscription(ctx, topic, sub, u)
}
