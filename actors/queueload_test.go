package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
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

// gatedFullLoad is a store whose full subscription state loads (LoadSubscription, which a
// queue subscription starts from) wait until the test releases them or their context ends.
type gatedFullLoad struct {
	store.Store
	gate  chan struct{}
	loads atomic.Int32 // LoadSubscription calls
	ended atomic.Int32 // of them, those that gave up because their context ended
}

func (g *gatedFullLoad) LoadSubscription(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	g.loads.Add(1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		g.ended.Add(1)
		return store.SubscriptionState{}, ctx.Err()
	}
	return g.Store.LoadSubscription(ctx, topic, sub)
}

// answer is a request's answer, collected off the test's goroutine.
type answer struct {
	v   any
	err error
}

// pending sends msg to pid and returns where its answer arrives.
func pending(root *actor.RootContext, pid *actor.PID, msg any) chan answer {
	f := root.RequestFuture(pid, msg, time.Hour)
	ch := make(chan answer, 1)
	go func() {
		v, err := f.Result()
		ch <- answer{v, err}
	}()
	return ch
}

// A queue subscription reads its state off its mailbox when it starts: while the read is held
// up the actor stops when asked, a receive that arrives meanwhile is answered once the state is
// in, a settlement at once (its tokens fail as they would after the load: no lock is held
// before it), and a status request once the load has run for a second, saying the queue is
// loading. Both were kept in a list for after the load, which grew with every poll while a
// store hung. The receive gets the event parked before the
// restart (with its delivery count), then every other event once, from the journal and from a
// Deliver that arrived while loading.
func TestQueueLoadsItsStateOffTheMailbox(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := store.NewMemory()
		_ = st.PutTopic(ctx, "orders", nil)
		_ = st.PutSubscription(ctx, "orders", "workers", nil)
		ce := func(ids ...string) []*schemas.Event {
			var body []string
			for _, id := range ids {
				body = append(body, fmt.Sprintf(`{"specversion":"1.0","id":"%s","source":"/o","type":"T"}`, id))
			}
			evs, err := schemas.DecodeCloudEvents([]byte("["+strings.Join(body, ",")+"]"), schemas.ClassicLimits)
			if err != nil {
				t.Fatal(err)
			}
			return evs
		}
		if _, err := st.Append(ctx, "orders", time.Now(), ce("e1", "e2", "e3")); err != nil {
			t.Fatal(err)
		}
		// e1 was received once before the restart and not settled: parked, available at once.
		entries, _ := st.Read(ctx, "orders", 1, 1)
		now := time.Now()
		if err := st.UpdateSubscription(ctx, "orders", "workers", store.Update{Cursor: 1, Put: []store.Parked{{
			Seq: entries[0].Seq, PublishTime: entries[0].PublishTime, Event: entries[0].Event, Attempts: 1,
			FirstAttempt: now, LastAttempt: now, NextDue: now,
		}}}); err != nil {
			t.Fatal(err)
		}
		g := &gatedFullLoad{Store: st, gate: make(chan struct{})}
		props := actors.QueueProps(&actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.CloudEvents, Store: g, Metrics: new(metrics.Set)},
			Name:               "workers", DeliverySchema: schemas.CloudEvents,
			Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &actors.QueueConfig{},
		})
		root := h.System().Root

		// Held up, it still stops, and its load gives up.
		pid := h.Spawn(props)
		h.Settle()
		if err := root.StopFuture(pid).Wait(); err != nil {
			t.Fatalf("stopping a queue whose state read is held up: %v", err)
		}
		h.Settle() // its stop work waits for the load, off its mailbox
		if g.loads.Load() != 1 || g.ended.Load() != 1 {
			t.Fatalf("after the stop: %d loads, %d given up; want the one load given up", g.loads.Load(), g.ended.Load())
		}

		started := time.Now()
		pid = h.Spawn(props)
		h.Settle()
		// e4 is published while the state loads: the topic actor hands it over.
		e4 := ce("e4")
		last, err := st.Append(ctx, "orders", time.Now(), e4)
		if err != nil {
			t.Fatal(err)
		}
		root.Send(pid, &actors.Deliver{Entries: []store.Entry{{Seq: last, PublishTime: time.Now(), Event: e4[0]}}, Through: last})
		received := pending(root, pid, &actors.ReceiveEvents{Subscription: "workers", ID: 1, MaxEvents: 10, MaxWait: time.Minute})
		settled := pending(root, pid, &actors.SettleEvents{Subscription: "workers", Op: actors.Acknowledge, LockTokens: []string{"not-a-token"}})
		status := pending(root, pid, &actors.GetStatus{})
		h.Settle()
		select {
		case a := <-received:
			t.Fatalf("the receive was answered before the state was loaded: %+v", a)
		default:
		}
		var a answer
		select {
		case a = <-settled:
		default:
			t.Fatal("the settlement sent while loading is not answered yet; want it answered at once")
		}
		if waited := time.Since(started); waited != 0 {
			t.Errorf("the settlement was answered %v after it was sent, want at once", waited)
		}
		if s, ok := a.v.(*actors.Settled); a.err != nil || !ok || len(s.Failed) != 1 || s.Failed[0].Code != actors.TokenBad {
			t.Errorf("settlement sent while loading = %+v, %v; want its token refused as BadToken", a.v, a.err)
		}
		select {
		case a := <-status:
			t.Fatalf("the status asked while loading was answered before the load had run for a second: %+v", a)
		default:
		}
		a = <-status // the load has run for a second (statusWait): answered with the loading status
		if waited := time.Since(started); waited != time.Second {
			t.Errorf("the status asked while loading was answered %v after it, want after a second", waited)
		}
		if s, ok := a.v.(*actors.Status); a.err != nil || !ok || !s.Loading || !s.LoadingSince.Equal(started) || s.Cursor != 0 || s.Backlog != 0 {
			t.Errorf("status asked while loading = %+v, %v; want loading since the start, nothing of the state", a.v, a.err)
		}

		close(g.gate)
		h.Settle()
		if s := ask[*actors.Status](t, root, pid, &actors.GetStatus{}); s.Loading || s.Cursor != 1 || s.Backlog < 1 {
			t.Errorf("status asked after the load = %+v; want the loaded state (cursor 1, e1 parked)", s)
		}
		a = <-received
		first, ok := a.v.(*actors.ReceivedEvents)
		if a.err != nil || !ok || len(first.Events) == 0 {
			t.Fatalf("receive waiting while loading = %+v, %v; want events once the state is in", a.v, a.err)
		}

		var got []string
		counts := map[string]int{}
		take := func(res *actors.ReceivedEvents) {
			var tokens []string
			for _, e := range res.Events {
				var id struct{ ID string }
				_ = json.Unmarshal(e.Event, &id)
				got = append(got, id.ID)
				counts[id.ID] = e.DeliveryCount
				tokens = append(tokens, e.LockToken)
			}
			if s := ask[*actors.Settled](t, root, pid, &actors.SettleEvents{Subscription: "workers", Op: actors.Acknowledge, LockTokens: tokens}); len(s.Succeeded) != len(tokens) {
				t.Fatalf("acknowledge = %+v", s)
			}
		}
		take(first)
		for id := uint64(2); len(got) < 4 && id < 10; id++ {
			take(ask[*actors.ReceivedEvents](t, root, pid, &actors.ReceiveEvents{Subscription: "workers", ID: id, MaxEvents: 10, MaxWait: 10 * time.Second}))
		}
		if want := []string{"e1", "e2", "e3", "e4"}; !slices.Equal(got, want) {
			t.Fatalf("received %v, want %v: each event once, oldest first", got, want)
		}
		if counts["e1"] != 2 || counts["e2"] != 1 || counts["e4"] != 1 {
			t.Errorf("delivery counts %v; want e1 at 2 (received once before the restart), the others at 1", counts)
		}
		// Nothing more: no event comes twice.
		if res := ask[*actors.ReceivedEvents](t, root, pid, &actors.ReceiveEvents{Subscription: "workers", ID: 20, MaxEvents: 10, MaxWait: time.Second}); len(res.Events) != 0 {
			t.Errorf("a last receive got %d events; want none", len(res.Events))
		}
		_ = root.StopFuture(pid).Wait()
		state, _ := st.LoadSubscription(ctx, "orders", "workers")
		if state.Cursor != last || len(state.Parked) != 0 {
			t.Fatalf("stored state: cursor %d, %d parked; want cursor %d, none parked", state.Cursor, len(state.Parked), last)
		}
	})
}
