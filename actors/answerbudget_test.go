package actors_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// With the topic's shared writer (as every queue outside cluster mode has), a failed state
// write stays failed for the subscription's epoch: each restarted actor's first receipt found
// the failure as it queued its write and crashed with the receipt's answer unsent and its
// bytes of the answer budget held for good. The receiver waited for its own timeout, and once
// the bytes held and the next event passed the budget, no queue subscription of the router
// handed out anything. Each receiver is now told at once, and its bytes are given back.
func TestQueueGivesBackAnswerBytesWhenItsWriterHasFailed(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		journal := journalWithEvents(t, 1)
		st := &failedStore{Store: journal}
		root := h.System().Root
		budget := actors.NewAnswerBudget(1<<20, root)
		w := actors.NewStateWriter(st, "orders")
		topic := h.Spawn(actors.TopicProps(&actors.TopicConfig{
			Name: "orders", Metrics: new(metrics.Set), Logger: slog.New(new(logRecords)),
			Subscriptions: []*actors.SubscriptionConfig{{
				SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), Logger: slog.New(new(logRecords)), AnswerBudget: budget, Writer: w},
				Name:               "audit", DeliverySchema: schemas.CloudEvents,
				Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &actors.QueueConfig{},
			}},
		}))
		entries, _ := journal.Read(ctx, "orders", 1, 1)
		root.Send(topic, &actors.Appended{Entries: entries})
		h.Settle()

		fail := errors.New("input/output error")
		st.fail.Store(&fail)
		for i := 1; i <= 3; i++ {
			f := root.RequestFuture(topic, &actors.ReceiveEvents{Subscription: "audit", ID: uint64(i), MaxEvents: 1, MaxWait: time.Second}, time.Minute)
			h.Settle()
			h.Advance(2 * time.Minute) // the restart's back-off; the future ends first if unanswered
			v, err := f.Result()
			if err != nil {
				t.Fatalf("receive %d: %v, want an answer at once", i, err)
			}
			if e, ok := v.(error); !ok || !errors.Is(e, actors.ErrNotRunning) || !errors.Is(e, fail) {
				t.Errorf("receive %d answered %v, want the write failure wrapping ErrNotRunning", i, v)
			}
			if held := budget.Held(); held != 0 {
				t.Fatalf("after receive %d: %d bytes of the answer budget held; want 0", i, held)
			}
		}
	})
}

// An answer whose receipt's synced write ends after its caller stopped waiting goes to dead
// letters, and its hold with it: its bytes of the answer budget were held for good. The
// caller's dropped claim gives them back whichever comes first, the drop or the answer.
func TestReceiveClaimDroppedGivesBackALateAnswersBytes(t *testing.T) {
	for _, tt := range []struct {
		name      string
		dropFirst bool // the caller drops its claim before the actor makes the answer
	}{
		{name: "answer made, then dropped"},
		{name: "dropped, then answer made", dropFirst: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				ctx := context.Background()
				journal := journalWithEvents(t, 1)
				st := &gatedUpdates{Store: journal, gate: make(chan struct{})}
				root := h.System().Root
				budget := actors.NewAnswerBudget(1<<20, root)
				topic := h.Spawn(actors.TopicProps(&actors.TopicConfig{
					Name: "orders", Metrics: new(metrics.Set), Logger: slog.New(new(logRecords)),
					Subscriptions: []*actors.SubscriptionConfig{{
						SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), Logger: slog.New(new(logRecords)), AnswerBudget: budget},
						Name:               "audit", DeliverySchema: schemas.CloudEvents,
						Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &actors.QueueConfig{},
					}},
				}))
				claim := new(actors.AnswerClaim)
				if tt.dropFirst {
					claim.Drop()
				}
				f := root.RequestFuture(topic, &actors.ReceiveEvents{Subscription: "audit", ID: 1, MaxEvents: 1, MaxWait: time.Second, Claim: claim}, 31*time.Second)
				h.Settle()
				entries, _ := journal.Read(ctx, "orders", 1, 1)
				root.Send(topic, &actors.Appended{Entries: entries})
				h.Settle()
				if !tt.dropFirst && budget.Held() == 0 {
					t.Fatal("no bytes held for the answer in flight; the test checks nothing")
				}
				h.Advance(40 * time.Second) // the receipt's synced write outlasts the future
				if _, err := f.Result(); err == nil {
					t.Fatal("the future got its answer; want it timed out")
				}
				claim.Drop()
				close(st.gate)
				h.Settle()
				h.Advance(time.Minute) // protoactor's dead-letter throttle ends its period
				if held := budget.Held(); held != 0 {
					t.Errorf("%d bytes held after the late answer; want 0", held)
				}
			})
		})
	}
}
