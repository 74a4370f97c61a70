package router_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// heldSubWrites holds the state writes of one subscription, once hold is called, until
// release is closed.
type heldSubWrites struct {
	store.Store
	mu      sync.Mutex
	sub     string
	entered chan struct{} // closed at the first held write
	release chan struct{}
}

func (h *heldSubWrites) hold(sub string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sub, h.entered, h.release = sub, make(chan struct{}), make(chan struct{})
}

func (h *heldSubWrites) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	h.mu.Lock()
	held := h.sub != "" && sub == h.sub
	var entered, release chan struct{}
	if held {
		entered, release = h.entered, h.release
		select {
		case <-entered:
		default:
			close(entered)
		}
	}
	h.mu.Unlock()
	if held {
		<-release
	}
	return h.Store.UpdateSubscription(ctx, topic, sub, u)
}

// Deleting a subscription whose last state write is still under way when its stop grace
// ends (the write then finds the subscription gone) leaves its topic's other subscriptions
// delivering. The failed write was kept by the topic's state writer as the failure of every
// subscription of the topic: each of them crashed at its next state write, restarted,
// delivered again and crashed again, so the topic stopped settling anything until the
// process restarted.
func TestDeletingASubscriptionUnderItsStateWriteSparesTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := store.NewMemory()
		hs := &heldSubWrites{Store: mem}
		gone, stays := &recorder{}, &recorder{}
		r := bubbleRouter(t, &watchedStore{Store: hs, t: t}, map[string]sinks.Sink{"gone": gone, "stays": stays})
		hs.hold("gone")
		publishN(t, r, "a", 1)
		synctest.Wait()
		select {
		case <-hs.entered:
		default:
			t.Fatal("subscription gone wrote no state")
		}
		// Its actor stops without waiting past its grace for the held write.
		if err := r.DeleteSubscription(t.Context(), "orders", "gone"); err != nil {
			t.Fatal(err)
		}
		close(hs.release) // the write reaches the store, which no longer has the subscription
		synctest.Wait()
		publishN(t, r, "b", 3)
		testkit.Advance(time.Minute)
		want := []string{"a-0", "b-0", "b-1", "b-2"}
		got := stays.delivered()
		slices.Sort(got) // attempts run side by side
		if !slices.Equal(got, want) {
			t.Errorf("subscription stays was delivered %v, want %v once each", got, want)
		}
		last, err := mem.LastSeq(t.Context(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		st, err := mem.LoadSubscription(t.Context(), "orders", "stays")
		if err != nil {
			t.Fatal(err)
		}
		if st.Cursor != last {
			t.Errorf("stored cursor of stays = %d, want %d: its state writes stopped", st.Cursor, last)
		}
	})
}

// The same holds between queue subscriptions (pull delivery), whose receipts are state
// writes: a queue subscription deleted while its receipt's write is held leaves the topic's
// other queue subscription handing out and settling events.
func TestDeletingAQueueSubscriptionUnderItsStateWriteSparesTheOthers(t *testing.T) {
	hs := &heldSubWrites{Store: store.NewMemory()}
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, "gone", router.QueueInfo{})
		h.SubscribeQueue(pullTopic, "stays", router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("a")))
		hs.hold("gone")
		var wg sync.WaitGroup
		wg.Go(func() {
			// Its receipt is never written: the answer never comes, and the call ends with ctx.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = h.Router().Receive(ctx, pullTopic, "gone", router.ReceiveOptions{MaxEvents: 1, MaxWait: 10 * time.Second})
		})
		h.Settle()
		select {
		case <-hs.entered:
		default:
			t.Fatal("queue subscription gone wrote no receipt")
		}
		if err := h.Router().DeleteSubscription(t.Context(), pullTopic, "gone"); err != nil {
			t.Fatal(err)
		}
		close(hs.release) // the receipt reaches the store, which no longer has the subscription
		h.Settle()
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("b")))
		evs := h.Receive(pullTopic, "stays", 10)
		if got := pulledIDs(t, evs); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("stays received %v, want [a b]", got)
		}
		if res := h.Acknowledge(pullTopic, "stays", testkit.LockTokens(evs)...); len(res.Succeeded) != 2 || len(res.Failed) != 0 {
			t.Errorf("acknowledge = %+v, want 2 succeeded", res)
		}
		h.Advance(time.Minute)
		wg.Wait()
	}, testkit.WithStore(hs))
}

// A subscription deleted while its state write is held, and created again under the same
// name before that write reaches the store: the late write belongs to the deleted
// subscription and changes nothing of the new one. It used to land on the new
// subscription's record, so the retry the deleted one had parked was delivered to the new
// subscription's endpoint once its actor next loaded the state (here, after a restart).
func TestLateStateWriteOfADeletedSubscriptionSparesItsSuccessor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := store.NewMemory()
		hs := &heldSubWrites{Store: mem}
		var oldAttempts atomic.Int32
		old := sinks.Func(func(context.Context, *sinks.Batch) error {
			oldAttempts.Add(1)
			return &sinks.DeliveryError{Outcome: schemas.GenericError, StatusCode: 500}
		})
		fresh := &recorder{}
		var r *router.Router
		start := func() {
			t.Helper()
			var err error
			r, err = router.New(router.Config{InsecureDev: true}, router.Deps{
				Store: hs, Sinks: map[string]sinks.Sink{"old": old, "new": fresh},
			})
			if err != nil {
				t.Fatalf("router.New: %v", err)
			}
		}
		closeRouter := func() {
			t.Helper()
			if r == nil {
				return
			}
			if err := r.Close(context.Background()); err != nil {
				t.Errorf("Close: %v", err)
			}
			r = nil
		}
		t.Cleanup(closeRouter)
		start()
		if _, err := r.CreateTopic(t.Context(), "orders", router.TopicSpec{}); err != nil {
			t.Fatalf("CreateTopic: %v", err)
		}
		if err := r.CreateSubscription(t.Context(), "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("old")}); err != nil {
			t.Fatalf("CreateSubscription: %v", err)
		}
		hs.hold("sub")
		publishN(t, r, "a", 1) // attempted once, refused with 500: parked for a retry
		synctest.Wait()
		select {
		case <-hs.entered:
		default:
			t.Fatal("subscription sub wrote no state")
		}
		if got := oldAttempts.Load(); got != 1 {
			t.Fatalf("the old endpoint got %d attempts, want 1", got)
		}
		// Its actor stops without waiting past its grace for the held write.
		if err := r.DeleteSubscription(t.Context(), "orders", "sub"); err != nil {
			t.Fatal(err)
		}
		if err := r.CreateSubscription(t.Context(), "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("new")}); err != nil {
			t.Fatalf("CreateSubscription again: %v", err)
		}
		synctest.Wait()
		close(hs.release) // the deleted subscription's write reaches the store
		synctest.Wait()
		publishN(t, r, "b", 1)
		testkit.Advance(time.Minute)

		st, err := mem.LoadSubscription(t.Context(), "orders", "sub")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Parked) != 0 {
			t.Errorf("the new subscription's stored state holds parked events %v: the deleted one's late write landed on it", parkedSeqs(st.Parked))
		}
		last, err := mem.LastSeq(t.Context(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		if st.Cursor != last {
			t.Errorf("stored cursor of the new subscription = %d, want %d", st.Cursor, last)
		}

		// A restart loads the stored state: the new endpoint gets its own event only.
		closeRouter()
		start()
		testkit.Advance(time.Hour)
		if got := fresh.delivered(); !slices.Equal(got, []string{"b-0"}) {
			t.Errorf("the new subscription's endpoint was delivered %v, want [b-0]", got)
		}
		if got := oldAttempts.Load(); got != 1 {
			t.Errorf("the deleted subscription's endpoint got %d attempts, want 1", got)
		}
	})
}

func parkedSeqs(ps []store.Parked) []uint64 {
	seqs := make([]uint64, len(ps))
	for i, p := range ps {
		seqs[i] = p.Seq
	}
	return seqs
}
