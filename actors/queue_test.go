package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

func ask[T any](t *testing.T, root *actor.RootContext, pid *actor.PID, msg any) T {
	t.Helper()
	v, err := root.RequestFuture(pid, msg, 5*time.Minute).Result()
	if err != nil {
		t.Fatalf("asking %T: %v", msg, err)
	}
	out, ok := v.(T)
	if !ok {
		t.Fatalf("asking %T: answer %T (%v)", msg, v, v)
	}
	return out
}

// A queue whose window holds 2 events reads the rest from the journal as receivers take
// events: every event is received once, oldest first, and the cursor follows the receipts.
func TestQueueReadsBehindItsWindowFromTheJournal(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		pid, st, last := startQueue(t, h, 2, 7)
		root := h.System().Root
		var got []string
		for id := uint64(1); len(got) < 7 && id < 20; id++ {
			res := ask[*actors.ReceivedEvents](t, root, pid, &actors.ReceiveEvents{Subscription: "workers", ID: id, MaxEvents: 3, MaxWait: 10 * time.Second})
			if len(res.Events) > 2 {
				t.Fatalf("one receive got %d events from a window of 2", len(res.Events))
			}
			var tokens []string
			for _, e := range res.Events {
				var id struct{ ID string }
				_ = json.Unmarshal(e.Event, &id)
				got = append(got, id.ID)
				tokens = append(tokens, e.LockToken)
			}
			settled := ask[*actors.Settled](t, root, pid, &actors.SettleEvents{Subscription: "workers", Op: actors.Acknowledge, LockTokens: tokens})
			if len(settled.Succeeded) != len(tokens) {
				t.Fatalf("acknowledge = %+v", settled)
			}
		}
		if want := []string{"e1", "e2", "e3", "e4", "e5", "e6", "e7"}; !slices.Equal(got, want) {
			t.Fatalf("received %v, want %v", got, want)
		}
		_ = root.StopFuture(pid).Wait() // flushes and stops its own state writer
		state, _ := st.LoadSubscription(ctx, "orders", "workers")
		if state.Cursor != last || len(state.Parked) != 0 {
			t.Fatalf("stored state: cursor %d, %d parked; want cursor %d, none parked", state.Cursor, len(state.Parked), last)
		}
	})
}

// Sent to a push subscription's topic actor, pull requests are refused with ErrNotQueue.
func TestTopicRefusesPullOnPushSubscription(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		st := store.NewMemory()
		_ = st.PutTopic(context.Background(), "orders", nil)
		_ = st.PutSubscription(context.Background(), "orders", "hook", nil)
		pid := h.Spawn(actors.TopicProps(&actors.TopicConfig{Name: "orders", Metrics: new(metrics.Set), Subscriptions: []*actors.SubscriptionConfig{{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", InputSchema: schemas.CloudEvents, Store: st, Metrics: new(metrics.Set)},
			Name:               "hook", DeliverySchema: schemas.CloudEvents, Policy: &retry.Policy{},
		}}}))
		v, err := h.System().Root.RequestFuture(pid, &actors.ReceiveEvents{Subscription: "hook", ID: 1, MaxEvents: 1, MaxWait: 10 * time.Second}, time.Minute).Result()
		if err != nil || v != actors.ErrNotQueue {
			t.Fatalf("receive on a push subscription = %v, %v; want ErrNotQueue", v, err)
		}
	})
}

// Requests for a subscription the topic actor runs no actor of are answered ErrNotRunning,
// which a cluster node turns into "not placed, try again".
func TestTopicAnswersNotRunning(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		pid := h.Spawn(actors.TopicProps(&actors.TopicConfig{Name: "orders", Metrics: new(metrics.Set)}))
		for _, msg := range []any{
			&actors.GetStatus{Subscription: "workers"},
			&actors.ReceiveEvents{Subscription: "workers", ID: 1, MaxEvents: 1, MaxWait: time.Second},
			&actors.SettleEvents{Subscription: "workers", Op: actors.Acknowledge, LockTokens: []string{"t"}},
		} {
			v, err := h.System().Root.RequestFuture(pid, msg, time.Minute).Result()
			if got, ok := v.(error); err != nil || !ok || !errors.Is(got, actors.ErrNotRunning) {
				t.Errorf("%T for a subscription not running = %v, %v; want ErrNotRunning", msg, v, err)
			}
		}
	})
}

// A receive sent without a sender to answer (Send, not Request) locks nothing: the event stays
// available to the next receiver with its delivery count unchanged, and the actor keeps
// running (answering nobody panicked in it, and its supervisor restarted it in a loop).
func TestQueueIgnoresAReceiveNobodyAsked(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		pid, _, _ := startQueue(t, h, 0, 1)
		root := h.System().Root
		root.Send(pid, &actors.ReceiveEvents{Subscription: "workers", ID: 1, MaxEvents: 1, MaxWait: time.Minute})
		h.Settle()
		res := ask[*actors.ReceivedEvents](t, root, pid, &actors.ReceiveEvents{Subscription: "workers", ID: 2, MaxEvents: 1, MaxWait: time.Second})
		if len(res.Events) != 1 || res.Events[0].DeliveryCount != 1 {
			t.Fatalf("received %+v after a receive nobody asked; want e1, received for the first time", res.Events)
		}
	})
}

// startQueue starts a queue subscription workers of topic orders, with a window of window
// events (0: the default), on a memory store holding the events e1 to en, and hands it
// them. It returns the actor, the store and the last sequence number.
func startQueue(t *testing.T, h *testkit.Harness, window, n int) (*actor.PID, *store.Memory, uint64) {
	t.Helper()
	ctx := context.Background()
	st := store.NewMemory()
	_ = st.PutTopic(ctx, "orders", nil)
	_ = st.PutSubscription(ctx, "orders", "workers", nil)
	var body []string
	for i := 1; i <= n; i++ {
		body = append(body, fmt.Sprintf(`{"specversion":"1.0","id":"e%d","source":"/o","type":"T"}`, i))
	}
	evs, err := schemas.DecodeCloudEvents([]byte("["+strings.Join(body, ",")+"]"), schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	last, err := st.Append(ctx, "orders", time.Now(), evs)
	if err != nil {
		t.Fatal(err)
	}
	pid := h.Spawn(actors.QueueProps(&actors.SubscriptionConfig{
		SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.CloudEvents, Store: st, Metrics: new(metrics.Set), Window: window},
		Name:               "workers", DeliverySchema: schemas.CloudEvents,
		Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &actors.QueueConfig{},
	}))
	entries, _ := st.Read(ctx, "orders", 1, n)
	h.System().Root.Send(pid, &actors.Deliver{Entries: entries, Through: last})
	return pid, st, last
}

// A receive with a byte bound (in cluster mode, the NATS max_payload of the answer a routed
// receive goes back in) gets the events that fit in it, at least one, each counted as its
// body and lock token plus EventBytes; one whose next event alone does not fit is answered
// at once with EventTooLargeError, and that event is neither locked nor counted: the next
// receive without the bound gets it as its first delivery.
func TestQueueReceiveStaysWithinMaxBytes(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		pid, _, _ := startQueue(t, h, 0, 9)
		root := h.System().Root
		receive := func(id uint64, maxEvents, maxBytes int) any {
			t.Helper()
			v, err := root.RequestFuture(pid, &actors.ReceiveEvents{Subscription: "workers", ID: id, MaxEvents: maxEvents, MaxWait: time.Second, MaxBytes: maxBytes, EventBytes: 10}, time.Minute).Result()
			if err != nil {
				t.Fatalf("receive %d: %v", id, err)
			}
			return v
		}
		ids := func(v any) []string {
			t.Helper()
			res, ok := v.(*actors.ReceivedEvents)
			if !ok {
				t.Fatalf("receive answered %T (%v), want events", v, v)
			}
			var out []string
			for _, e := range res.Events {
				var ev struct{ ID string }
				_ = json.Unmarshal(e.Event, &ev)
				out = append(out, fmt.Sprintf("%s#%d", ev.ID, e.DeliveryCount))
			}
			return out
		}

		first := receive(1, 1, 0).(*actors.ReceivedEvents).Events[0]
		size := len(first.Event) + len(first.LockToken) + 10 // e1 to e9 encode to the same size

		if got, want := ids(receive(2, 10, 3*size-1)), []string{"e2#1", "e3#1"}; !slices.Equal(got, want) {
			t.Errorf("receive of up to 10 events within %d bytes (3 events less a byte) = %v, want %v", 3*size-1, got, want)
		}
		if got, want := ids(receive(3, 10, 3*size)), []string{"e4#1", "e5#1", "e6#1"}; !slices.Equal(got, want) {
			t.Errorf("receive of up to 10 events within %d bytes (3 events) = %v, want %v", 3*size, got, want)
		}
		if got, want := ids(receive(4, 1, 3*size)), []string{"e7#1"}; !slices.Equal(got, want) {
			t.Errorf("receive of 1 event within 3 events' bytes = %v, want %v", got, want)
		}

		v := receive(5, 10, size-1)
		tooLarge, ok := v.(*actors.EventTooLargeError)
		if !ok || tooLarge.Size != size || tooLarge.MaxBytes != size-1 {
			t.Fatalf("receive within %d bytes, one less than the next event = %T %v; want EventTooLargeError{Size: %d}", size-1, v, v, size)
		}
		if got, want := ids(receive(6, 10, 0)), []string{"e8#1", "e9#1"}; !slices.Equal(got, want) {
			t.Errorf("receive without a bound after the refused one = %v, want %v (neither locked nor counted by the refusal)", got, want)
		}
	})
}
