package actors_test

import (
	"context"
	"errors"
	"sync"
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

// countingSink counts its calls; it panics on the calls listed in panicOn and fails with a
// 503 on those listed in failOn.
type countingSink struct {
	mu      sync.Mutex
	calls   int
	panicOn map[int]bool
	failOn  map[int]bool
}

func (s *countingSink) Deliver(context.Context, *sinks.Batch) error {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	if s.panicOn[n] {
		panic("sink bug")
	}
	if s.failOn[n] {
		return &sinks.DeliveryError{Outcome: schemas.Busy, StatusCode: 503, Err: errors.New("busy")}
	}
	return nil
}

func (s *countingSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// journalOf returns a store whose topic orders has the subscriptions subs and then one event, e1.
func journalOf(t *testing.T, subs ...string) *store.Memory {
	t.Helper()
	ctx := context.Background()
	st := store.NewMemory()
	_ = st.PutTopic(ctx, "orders", nil)
	for _, sub := range subs {
		_ = st.PutSubscription(ctx, "orders", sub, nil)
	}
	evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"e1","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}]`), "/topics/orders", schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, "orders", time.Now(), evs); err != nil {
		t.Fatal(err)
	}
	return st
}

// A subscription without a router's state writer (a replay's) that its topic actor restarts
// after a sink panic writes its state with a writer of the new incarnation: the writer the
// crashed incarnation made for itself is closed with it, and must not be what the next one
// finds in the config. The event is delivered once after the restart and settled for good.
func TestRestartedSubscriptionWithoutWriterKeepsWriting(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		st := journalOf(t, "audit")
		sink := &countingSink{panicOn: map[int]bool{1: true}}
		h.Spawn(actors.TopicProps(&actors.TopicConfig{Name: "orders", Subscriptions: []*actors.SubscriptionConfig{{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set)},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true}, Sink: sink,
		}}}))
		h.Advance(time.Hour)
		if n := sink.count(); n != 2 {
			t.Errorf("sink called %d times in an hour, want 2: the panicking attempt, then one delivery after the restart", n)
		}
		state, err := st.LoadSubscription(context.Background(), "orders", "audit")
		if err != nil {
			t.Fatal(err)
		}
		if state.Cursor != 1 || len(state.Parked) != 0 {
			t.Errorf("stored state cursor %d, %d parked; want e1 settled (cursor 1, none parked)", state.Cursor, len(state.Parked))
		}
	})
}

// Subscriptions of one topic that share a SubscriptionShared without a writer each write
// with their own: removing one (which closes the writer it made) leaves the other writing.
func TestSiblingsWithoutWriterDoNotShareOne(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		st := journalOf(t, "audit", "billing")
		shared := &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set)}
		audit := &countingSink{failOn: map[int]bool{1: true}}
		billing := &countingSink{failOn: map[int]bool{1: true}}
		sub := func(name string, sink sinks.Sink) *actors.SubscriptionConfig {
			return &actors.SubscriptionConfig{SubscriptionShared: shared, Name: name, DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true}, Sink: sink}
		}
		pid := h.Spawn(actors.TopicProps(&actors.TopicConfig{Name: "orders", Subscriptions: []*actors.SubscriptionConfig{sub("audit", audit), sub("billing", billing)}}))
		h.Settle() // both failed once: each parked e1 for a retry
		if _, err := h.System().Root.RequestFuture(pid, &actors.RemoveSubscription{Name: "audit"}, time.Minute).Result(); err != nil {
			t.Fatal(err)
		}
		h.Advance(time.Hour)
		if n := billing.count(); n != 2 {
			t.Errorf("billing's sink called %d times in an hour, want 2: the failed attempt and its retry", n)
		}
		state, err := st.LoadSubscription(context.Background(), "orders", "billing")
		if err != nil {
			t.Fatal(err)
		}
		if state.Cursor != 1 || len(state.Parked) != 0 {
			t.Errorf("billing's stored state cursor %d, %d parked; want e1 settled (cursor 1, none parked)", state.Cursor, len(state.Parked))
		}
	})
}
