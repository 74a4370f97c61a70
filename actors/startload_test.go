package actors_test

import (
	"context"
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

// gatedLoad is a store whose subscription state loads wait until the test releases them (or
// their context ends), and that counts the parked events whose bodies were read.
type gatedLoad struct {
	store.Store
	gate chan struct{}

	mu     sync.Mutex
	bodies int
}

func (g *gatedLoad) LoadSubscriptionIndex(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return store.SubscriptionState{}, ctx.Err()
	}
	return g.Store.LoadSubscriptionIndex(ctx, topic, sub)
}

func (g *gatedLoad) ParkedEvents(ctx context.Context, topic, sub string, seqs []uint64) ([]store.Parked, error) {
	p, err := g.Store.ParkedEvents(ctx, topic, sub, seqs)
	g.mu.Lock()
	g.bodies += len(p)
	g.mu.Unlock()
	return p, err
}

// A subscription reads its state off its mailbox when it starts: while the read is held up
// the actor stops when asked, events that arrive meanwhile are handled once the state is in,
// and a status request is answered at once, saying it is loading
// (TestStatusWhileLoadingIsAnsweredAtOnce). Parked events start without their bodies, which are read when they come
// due, and keep their attempt counts and due times.
func TestSubscriptionLoadsItsStateOffTheMailbox(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := journalWithEvents(t, 3) // e1..e3, cursor 0
		now := time.Now()
		// e1 and e2 failed twice and are parked: e1 due in a minute, e2 in an hour.
		entries, _ := st.Read(ctx, "orders", 1, 3)
		park := func(e store.Entry, due time.Duration) store.Parked {
			return store.Parked{Seq: e.Seq, PublishTime: e.PublishTime, Event: e.Event, Attempts: 2,
				FirstAttempt: now.Add(-2 * time.Minute), LastAttempt: now.Add(-time.Minute), NextDue: now.Add(due),
				LastOutcome: schemas.Busy, LastStatus: 503}
		}
		if err := st.UpdateSubscription(ctx, "orders", "audit", store.Update{Cursor: 2, Put: []store.Parked{park(entries[0], time.Minute), park(entries[1], time.Hour)}}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		counts := map[string]int{} // event id → attempts before its delivery (Batch.DeliveryCount)
		at := map[string]time.Duration{}
		sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range b.Events {
				counts[e.ID] = b.DeliveryCount
				at[e.ID] = time.Since(now)
			}
			return nil
		})
		g := &gatedLoad{Store: st, gate: make(chan struct{})}
		cfg := &actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: g, Metrics: new(metrics.Set)},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sink,
		}

		// Held up, it still stops.
		pid := h.Spawn(actors.SubscriptionProps(cfg))
		h.Settle()
		if err := h.System().Root.StopFuture(pid).Wait(); err != nil {
			t.Fatalf("stopping a subscription whose state read is held up: %v", err)
		}

		started := time.Now()
		pid = h.Spawn(actors.SubscriptionProps(cfg))
		h.Settle()
		// e4 is published while the state loads: the topic actor hands it over.
		evs := events(t, "e4")
		last, err := st.Append(ctx, "orders", time.Now(), evs)
		if err != nil {
			t.Fatal(err)
		}
		h.System().Root.Send(pid, &actors.Deliver{Entries: []store.Entry{{Seq: last, PublishTime: time.Now(), Event: evs[0]}}, Through: last})
		status := h.System().Root.RequestFuture(pid, &actors.GetStatus{}, time.Hour)
		h.Settle()
		res, err := status.Result()
		if err != nil {
			t.Fatalf("status asked while loading: %v", err)
		}
		if s := res.(*actors.Status); !s.Loading || !s.LoadingSince.Equal(started) || s.Cursor != 0 || s.Backlog != 0 {
			t.Errorf("status asked while loading = %+v, want loading since the start, nothing of the state", s)
		}
		mu.Lock()
		if len(counts) != 0 {
			t.Errorf("delivered %v before the state was loaded", counts)
		}
		mu.Unlock()

		close(g.gate)
		h.Settle()
		res, err = h.System().Root.RequestFuture(pid, &actors.GetStatus{}, time.Hour).Result()
		if err != nil {
			t.Fatalf("status asked after the load: %v", err)
		}
		if s := res.(*actors.Status); s.Loading || s.Cursor < 2 || s.Backlog < 2 {
			t.Errorf("status asked after the load = %+v, want the loaded state (cursor ≥ 2, e1 and e2 parked)", s)
		}
		mu.Lock()
		if _, ok := counts["e3"]; !ok || counts["e3"] != 0 || counts["e4"] != 0 || len(counts) != 2 {
			t.Errorf("after the load delivered %v, want e3 (from the journal) and e4 (handed over while loading), once each", counts)
		}
		mu.Unlock()
		g.mu.Lock()
		if g.bodies != 0 {
			t.Errorf("read %d parked bodies before any was due, want none", g.bodies)
		}
		g.mu.Unlock()

		h.Advance(time.Minute)
		mu.Lock()
		if _, e2 := counts["e2"]; counts["e1"] != 2 || at["e1"] != time.Minute || e2 {
			t.Errorf("a minute on: e1 delivered after %d attempts after %v, e2 after %d; want e1 as its third attempt after exactly 1m, e2 not yet", counts["e1"], at["e1"], counts["e2"])
		}
		mu.Unlock()
		h.Advance(time.Hour)
		mu.Lock()
		if counts["e2"] != 2 || at["e2"] != time.Hour {
			t.Errorf("an hour on: e2 delivered after %d attempts after %v, want its third attempt after exactly 1h", counts["e2"], at["e2"])
		}
		mu.Unlock()
		g.mu.Lock()
		if g.bodies != 2 {
			t.Errorf("read %d parked bodies, want 2 (each once, when due)", g.bodies)
		}
		g.mu.Unlock()
		_ = h.System().Root.StopFuture(pid).Wait()
		state, _ := st.LoadSubscription(ctx, "orders", "audit")
		if state.Cursor != 4 || len(state.Parked) != 0 {
			t.Errorf("stored state = cursor %d, %d parked; want cursor 4, none parked", state.Cursor, len(state.Parked))
		}
	})
}

// events decodes one Event Grid event per id.
func events(t *testing.T, ids ...string) []*schemas.Event {
	t.Helper()
	var out []*schemas.Event
	for _, id := range ids {
		evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"`+id+`","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}]`), "/topics/orders", schemas.ClassicLimits)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, evs...)
	}
	return out
}
