package deadletter_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// replaySink fails every attempt of the event ids in failing and accepts the rest.
type replaySink struct {
	mu        sync.Mutex
	failing   map[string]bool
	delivered []string
	attempts  map[string]int
}

func (s *replaySink) Deliver(_ context.Context, b *sinks.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attempts == nil {
		s.attempts = map[string]int{}
	}
	for _, e := range b.Events {
		s.attempts[e.ID]++
	}
	if s.failing[b.Events[0].ID] {
		return &sinks.DeliveryError{Outcome: schemas.GenericError, StatusCode: 500}
	}
	for _, e := range b.Events {
		s.delivered = append(s.delivered, e.ID)
	}
	return nil
}

func replayEvents(t *testing.T, ids ...string) []*schemas.Event {
	t.Helper()
	var out []*schemas.Event
	for _, id := range ids {
		out = append(out, dlLetter(t, "sub-a", id, time.Now()).Event)
	}
	return out
}

// A replay re-delivers through the subscription's own config: same sink, fresh attempts, the
// same ids; an event that fails again is dead-lettered again through the subscription's
// hook; the filter is not applied a second time.
func TestReplayRedeliversToOneSubscription(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		sink := &replaySink{failing: map[string]bool{"bad": true}}
		f, err := filter.Compile(filter.Spec{IncludedEventTypes: []string{"Something.Else"}}, schemas.EventGrid)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var deadLettered []*actors.DeadLetter
		var progress [][2]int
		done := make(chan deadletter.ReplayResult, 1)
		cfg := &actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: dlTopicID, InputSchema: schemas.EventGrid, Metrics: new(metrics.Set)},
			Name:               "sub-a", DeliverySchema: schemas.EventGrid, Filter: f,
			Policy: &retry.Policy{Profile: retry.EventGrid(), MaxDeliveryAttempts: 2, DeadLetter: true, NoJitter: true},
			Sink:   sink,
			OnDeadLetter: func(d *actors.DeadLetter) {
				mu.Lock()
				deadLettered = append(deadLettered, d)
				mu.Unlock()
			},
		}
		published := time.Now()
		h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{
			Subscription: cfg, Events: replayEvents(t, "e1", "bad", "e2"), PublishTime: published,
			OnProgress: func(settled, total int) {
				mu.Lock()
				progress = append(progress, [2]int{settled, total})
				mu.Unlock()
			},
			OnDone: func(r deadletter.ReplayResult) { done <- r },
		}))
		h.Advance(time.Minute)
		res := <-done
		if res != (deadletter.ReplayResult{Total: 3, Delivered: 2, DeadLettered: 1}) {
			t.Errorf("result %+v, want 2 delivered and 1 dead-lettered of 3", res)
		}
		sink.mu.Lock()
		if d := slices.Sorted(slices.Values(sink.delivered)); !slices.Equal(d, []string{"e1", "e2"}) || sink.attempts["bad"] != 2 {
			t.Errorf("delivered %v with %d attempts of bad, want e1 and e2 once and bad attempted 2 times (a fresh budget)", d, sink.attempts["bad"])
		}
		sink.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		if len(deadLettered) != 1 || deadLettered[0].Event.ID != "bad" || deadLettered[0].DeliveryAttempts != 2 || !deadLettered[0].PublishTime.Equal(published) {
			t.Errorf("dead-lettered again: %+v, want bad after 2 attempts, published at the replay", deadLettered)
		}
		if len(progress) == 0 || progress[len(progress)-1] != [2]int{3, 3} {
			t.Errorf("progress %v, want it to end at 3 of 3", progress)
		}
	})
}

// A replay stopped before its events settle says so.
func TestReplayStopped(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		sink := &replaySink{failing: map[string]bool{"e1": true}}
		done := make(chan deadletter.ReplayResult, 1)
		cfg := &actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: dlTopicID, InputSchema: schemas.EventGrid, Metrics: new(metrics.Set)},
			Name:               "sub-a", DeliverySchema: schemas.EventGrid,
			Policy: &retry.Policy{Profile: retry.EventGrid(), DeadLetter: true}, Sink: sink,
		}
		pid := h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{
			Subscription: cfg, Events: replayEvents(t, "e1"), PublishTime: time.Now(),
			OnDone: func(r deadletter.ReplayResult) { done <- r },
		}))
		h.Advance(time.Minute)
		if err := h.System().Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		if res := <-done; !res.Stopped || res.Delivered != 0 {
			t.Errorf("result %+v, want Stopped", res)
		}
	})
}

func TestReplayOfNothingEndsAtOnce(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		done := make(chan deadletter.ReplayResult, 1)
		cfg := &actors.SubscriptionConfig{SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", Metrics: new(metrics.Set)}, Name: "sub-a", Policy: &retry.Policy{}, Sink: &replaySink{}}
		h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{Subscription: cfg, OnDone: func(r deadletter.ReplayResult) { done <- r }}))
		h.Settle()
		select {
		case res := <-done:
			if res.Stopped || res.Total != 0 {
				t.Errorf("result %+v, want a completed empty replay", res)
			}
		default:
			t.Fatal("an empty replay did not finish")
		}
	})
}

// A replay keeps its state to itself: the live subscription's state writer never sees the
// replay's private sequence numbers, so the live subscription's stored cursor and parked
// events are untouched by the replay's retries.
func TestReplayLeavesTheLiveStateAlone(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := store.NewMemory()
		_ = st.PutTopic(ctx, "orders", nil)
		_ = st.PutSubscription(ctx, "orders", "sub-a", nil)
		w := actors.NewStateWriter(st, "orders")
		defer w.Close()
		done := make(chan deadletter.ReplayResult, 1)
		cfg := &actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: dlTopicID, InputSchema: schemas.EventGrid, Store: st, Writer: w, Metrics: new(metrics.Set)},
			Name:               "sub-a", DeliverySchema: schemas.EventGrid,
			Policy: &retry.Policy{Profile: retry.EventGrid(), MaxDeliveryAttempts: 2, NoJitter: true},
			Sink:   &replaySink{failing: map[string]bool{"bad": true}},
		}
		h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{
			Subscription: cfg, Events: replayEvents(t, "bad"), PublishTime: time.Now(),
			OnDone: func(r deadletter.ReplayResult) { done <- r },
		}))
		h.Settle() // the first attempt failed: the event is parked for its retry in +10 s
		if err := w.Flush("sub-a", epochOf(t, st, "sub-a")); err != nil {
			t.Fatal(err)
		}
		live, err := st.LoadSubscription(ctx, "orders", "sub-a")
		if err != nil {
			t.Fatal(err)
		}
		if live.Cursor != 0 || len(live.Parked) != 0 {
			t.Errorf("live state during the replay = cursor %d, parked %+v; want it untouched", live.Cursor, live.Parked)
		}
		h.Advance(time.Minute)
		if res := <-done; res.Dropped != 1 {
			t.Errorf("result %+v, want the event dropped after its 2 attempts", res)
		}
	})
}

// An event a replay dead-letters again is in the durable outbox before its object is written:
// the replay's subscription settles it in its private journal, not in the router's store, so
// the dead-letter actor saves the record itself. A router stopped while the record waits out
// its delay leaves it to the next one, as it does a live subscription's.
func TestReplayedDeadLettersReachTheDurableOutbox(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		outbox := storeOutbox(t, store.NewMemory())
		objs := testkit.NewObjectStore()
		dlCfg := &deadletter.Config{Store: objs, Outbox: outbox}
		root := h.System().Root
		dl := h.Spawn(deadletter.Props(dlCfg))
		sink := &replaySink{failing: map[string]bool{"bad": true}}
		done := make(chan deadletter.ReplayResult, 1)
		cfg := &actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: dlTopicID, InputSchema: schemas.EventGrid, Metrics: new(metrics.Set)},
			Name:               "sub-a", DeliverySchema: schemas.EventGrid,
			Policy:  &retry.Policy{Profile: retry.EventGrid(), MaxDeliveryAttempts: 2, DeadLetter: true, NoJitter: true},
			Sink:    sink,
			Handoff: outbox.Handoff(root, dl, dlCfg, dlTarget("sub-a", false)),
		}
		h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{
			Subscription: cfg, Events: replayEvents(t, "e1", "bad"), PublishTime: time.Now(),
			OnDone: func(r deadletter.ReplayResult) { done <- r },
		}))
		h.Advance(time.Minute)
		if res := <-done; res.DeadLettered != 1 {
			t.Fatalf("result %+v, want bad dead-lettered again", res)
		}
		h.Settle()
		if err := root.StopFuture(dl).Wait(); err != nil { // before its delay: nothing written yet
			t.Fatal(err)
		}
		if n := objs.Puts(); n != 0 {
			t.Fatalf("%d objects written before the delay, want none", n)
		}
		recs, err := outbox.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].EventID != "bad" {
			t.Errorf("outbox after stopping holds %d records, want bad's, for the next router to write", len(recs))
		}
	})
}

// epochOf returns the stored epoch of subscription sub of topic orders: the key its live
// actor's writes are queued under in a state writer.
func epochOf(t *testing.T, st store.Store, sub string) uint64 {
	t.Helper()
	s, err := st.LoadSubscription(t.Context(), "orders", sub)
	if err != nil {
		t.Fatal(err)
	}
	return s.Epoch
}

// A replay reads its parts one at a time, the next only once the events it holds are under
// its window (one byte here: once the earlier events settled), until Read says there are no
// more, and counts the events expected that no part held (one that cannot be read) as unread,
// going on with the next.
func TestReplayReadsPartsAsEventsSettle(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		sink := &replaySink{}
		done := make(chan deadletter.ReplayResult, 1)
		cfg := &actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: dlTopicID, InputSchema: schemas.EventGrid, Metrics: new(metrics.Set)},
			Name:               "sub-a", DeliverySchema: schemas.EventGrid,
			Policy: &retry.Policy{Profile: retry.EventGrid(), DeadLetter: true, NoJitter: true}, Sink: sink,
		}
		parts := [][]*schemas.Event{replayEvents(t, "e1", "e2"), replayEvents(t, "lost"), replayEvents(t, "e3")}
		var mu sync.Mutex
		var deliveredAtRead []int
		h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{
			Subscription: cfg, Total: 4, Window: 1, PublishTime: time.Now(),
			Read: func(_ context.Context, part int) ([]*schemas.Event, error) {
				sink.mu.Lock()
				n := len(sink.delivered)
				sink.mu.Unlock()
				mu.Lock()
				deliveredAtRead = append(deliveredAtRead, n)
				mu.Unlock()
				if part == len(parts) {
					return nil, io.EOF
				}
				if part == 1 {
					return nil, errors.New("object gone")
				}
				return parts[part], nil
			},
			OnDone: func(r deadletter.ReplayResult) { done <- r },
		}))
		h.Advance(time.Minute)
		res := <-done
		if res != (deadletter.ReplayResult{Total: 4, Delivered: 3, Unread: 1}) {
			t.Errorf("result %+v, want 3 delivered and 1 unread of 4", res)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(deliveredAtRead, []int{0, 2, 2, 3}) {
			t.Errorf("events delivered when each part was read: %v, want [0 2 2 3]: a part is read once the earlier events settled", deliveredAtRead)
		}
	})
}
