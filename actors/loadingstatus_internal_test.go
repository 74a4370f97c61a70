package actors

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// A status request that reaches a subscription while its state load hangs (a disk that
// stopped answering) is answered at once, from the actor: it says the subscription is loading
// its state and since when, and shows nothing of the state as if it were known. An
// EndProbation meanwhile is refused at once with ErrLoading and changes nothing. Both were kept
// in a list, one entry per request, and answered only once the load ended: the operator's
// status call waited exactly when the store hung, and every poll grew the list. Once the state
// is in, the status is the real one, and the probation the refused call did not end is still
// in force until an EndProbation after the load ends it.
func TestStatusWhileLoadingIsAnsweredAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := ordersAudit(t)
		evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"e1","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}},{"id":"e2","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}]`), "/topics/orders", schemas.ClassicLimits)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Append(ctx, "orders", time.Now(), evs); err != nil {
			t.Fatal(err)
		}
		// Stored: cursor 2, e1 parked for a retry in an hour, the endpoint on probation for an
		// hour.
		now := time.Now()
		if err := mem.UpdateSubscription(ctx, "orders", "audit", store.Update{
			Cursor: 2,
			Put: []store.Parked{{Seq: 1, PublishTime: now, Event: evs[0], Attempts: 1, FirstAttempt: now, LastAttempt: now,
				NextDue: now.Add(time.Hour), LastOutcome: schemas.Busy, LastStatus: 503}},
			Probation: encodeProbation(retry.ProbationSnapshot{Cause: schemas.Busy, Until: now.Add(time.Hour), Base: time.Hour, ConsecutiveFailures: 1}),
		}); err != nil {
			t.Fatal(err)
		}
		g := &gatedLoad{Store: mem, gate: make(chan struct{})}
		release := sync.OnceFunc(func() { close(g.gate) })
		system := actor.NewActorSystem()
		defer system.Shutdown()
		defer release() // a failing test still lets the load end, so the bubble empties
		cfg := &SubscriptionConfig{
			SubscriptionShared: &SubscriptionShared{Topic: "orders", InputSchema: schemas.EventGrid, Store: g, Metrics: new(metrics.Set)},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sinks.Func(func(context.Context, *sinks.Batch) error { return nil }),
		}
		var s *subscription
		started := time.Now()
		pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { s = &subscription{cfg: cfg}; return s }, subscriptionMailbox))
		synctest.Wait() // loading, held at the gate

		// Operators and consoles poll: many requests while the load hangs.
		const n = 1000
		futures := make([]*actor.Future, 0, 2*n)
		for range n {
			futures = append(futures,
				system.Root.RequestFuture(pid, &GetStatus{Subscription: "audit"}, time.Minute),
				system.Root.RequestFuture(pid, &EndProbation{Subscription: "audit"}, time.Minute))
		}
		synctest.Wait()
		for i, f := range futures {
			res, err := f.Result()
			if err != nil {
				t.Fatalf("request %d (%d requests) while the state load hangs: %v; want an answer at once", i, len(futures), err)
			}
			switch v := res.(type) {
			case *Status:
				want := Status{Topic: "orders", Subscription: "audit", Loading: true, LoadingSince: started}
				if *v != want {
					t.Fatalf("status while loading = %+v, want %+v: loading since the actor started, nothing of the unloaded state", *v, want)
				}
			case error:
				if !errors.Is(v, ErrLoading) || !strings.Contains(v.Error(), "try again") || !strings.Contains(v.Error(), `"audit"`) {
					t.Fatalf("EndProbation while loading answered %q; want an error wrapping ErrLoading that names the subscription and says to try again", v)
				}
			default:
				t.Fatalf("request %d answered %T %+v", i, res, res)
			}
		}
		if waited := time.Since(started); waited != 0 {
			t.Errorf("the answers came %v after the requests, want at once", waited)
		}
		// Nothing of the requests is kept for after the load.
		if e := s.boot.early; len(e.delivers) != 0 || e.through != 0 {
			t.Errorf("kept %d Delivers (through %d) while loading, none sent", len(e.delivers), e.through)
		}

		release()
		synctest.Wait()
		res, err := system.Root.RequestFuture(pid, &GetStatus{}, time.Minute).Result()
		if err != nil {
			t.Fatal(err)
		}
		st := res.(*Status)
		if st.Loading || !st.LoadingSince.IsZero() || st.Cursor != 2 || st.Backlog != 1 || !st.Probation.Active || st.Probation.Cause != schemas.Busy {
			t.Errorf("status after the load = %+v; want the loaded state: not loading, cursor 2, e1 parked, on probation (Busy) as stored", st)
		}
		res, err = system.Root.RequestFuture(pid, &EndProbation{}, time.Minute).Result()
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := res.(*Status); !ok || st.Loading || st.Probation.State != retry.Healthy {
			t.Errorf("EndProbation after the load answered %+v; want the status with the probation ended", res)
		}
		if err := system.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
	})
}
