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

// loadingAudit spawns subscription orders/audit on a store holding its state (cursor 2, e1
// parked for a retry in an hour, the endpoint on probation for an hour) whose state load waits
// until release is called. It returns once the actor waits for the load. Call it inside a
// synctest bubble.
func loadingAudit(t *testing.T) (system *actor.ActorSystem, pid *actor.PID, release func(), started time.Time) {
	t.Helper()
	ctx := context.Background()
	mem := ordersAudit(t)
	evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"e1","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}},{"id":"e2","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}]`), "/topics/orders", schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Append(ctx, "orders", time.Now(), evs); err != nil {
		t.Fatal(err)
	}
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
	release = sync.OnceFunc(func() { close(g.gate) })
	system = actor.NewActorSystem()
	t.Cleanup(system.Shutdown)
	t.Cleanup(release) // a failing test still lets the load end, so the bubble empties
	cfg := &SubscriptionConfig{
		SubscriptionShared: &SubscriptionShared{Topic: "orders", InputSchema: schemas.EventGrid, Store: g, Metrics: new(metrics.Set)},
		Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
		Sink: sinks.Func(func(context.Context, *sinks.Batch) error { return nil }),
	}
	started = time.Now()
	pid = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &subscription{cfg: cfg} }, subscriptionMailbox))
	synctest.Wait() // loading, held at the gate
	return system, pid, release, started
}

// checkLoadingAnswer fails t unless res is the answer to a request while audit's load has run
// for statusWait: the loading status, or EndProbation's refusal.
func checkLoadingAnswer(t *testing.T, i int, res any, err error, started time.Time) {
	t.Helper()
	if err != nil {
		t.Fatalf("request %d while the state load hangs: %v; want an answer", i, err)
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

// A status request that reaches a subscription while its state load hangs (a disk that
// stopped answering) waits for the load statusWait at most, then is answered from the actor:
// the subscription is loading its state, since when, and nothing of the state is shown as if
// it were known. An EndProbation is refused then with ErrLoading and changes nothing. Past
// maxEarlyRequests waiting, requests are answered at once, so pollers grow nothing; after
// statusWait every request is answered at once. Before, every request was kept, one entry
// each, and answered only once the load ended: the operator's status call waited exactly when
// the store hung. Once the state is in, the status is the real one, and the probation the
// refused calls did not end is still in force until an EndProbation after the load ends it.
func TestStatusWhileLoadingIsAnsweredWithinStatusWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		system, pid, release, started := loadingAudit(t)

		// Operators and consoles poll: many requests while the load hangs.
		const n = 1000
		futures := make([]*actor.Future, 0, 2*n)
		for range n {
			futures = append(futures,
				system.Root.RequestFuture(pid, &GetStatus{Subscription: "audit"}, time.Minute),
				system.Root.RequestFuture(pid, &EndProbation{Subscription: "audit"}, time.Minute))
		}
		for i := len(futures) - 1; i >= maxEarlyRequests; i-- {
			res, err := futures[i].Result()
			checkLoadingAnswer(t, i, res, err, started)
		}
		if waited := time.Since(started); waited != 0 {
			t.Errorf("the requests past the first %d were answered %v after them, want at once", maxEarlyRequests, waited)
		}
		for i := range maxEarlyRequests {
			res, err := futures[i].Result()
			checkLoadingAnswer(t, i, res, err, started)
		}
		if waited := time.Since(started); waited != statusWait {
			t.Errorf("the first %d requests were answered %v after them, want after statusWait (%v)", maxEarlyRequests, waited, statusWait)
		}
		res, err := system.Root.RequestFuture(pid, &GetStatus{}, time.Minute).Result()
		checkLoadingAnswer(t, -1, res, err, started)
		if waited := time.Since(started); waited != statusWait {
			t.Errorf("a request after statusWait was answered %v after it, want at once", waited-statusWait)
		}

		release()
		synctest.Wait()
		res, err = system.Root.RequestFuture(pid, &GetStatus{}, time.Minute).Result()
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

// Requests that reach a subscription whose state load ends within statusWait (a new
// subscription's, nearly every restart's) are answered with the loaded state, as if they had
// come after it: a client that creates a subscription and reads it back sees its delivery
// state, not a loading one, and an EndProbation sent then ends the stored probation.
func TestStatusDuringAShortLoadIsTheLoadedState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		system, pid, release, started := loadingAudit(t)
		status := system.Root.RequestFuture(pid, &GetStatus{}, time.Minute)
		end := system.Root.RequestFuture(pid, &EndProbation{}, time.Minute)
		<-time.After(statusWait / 10)
		release()
		res, err := status.Result()
		if err != nil {
			t.Fatal(err)
		}
		if st := res.(*Status); st.Loading || st.Cursor != 2 || st.Backlog != 1 {
			t.Errorf("status asked during a load of %v = %+v; want the loaded state: not loading, cursor 2, e1 parked", statusWait/10, st)
		}
		res, err = end.Result()
		if err != nil {
			t.Fatal(err)
		}
		if st, ok := res.(*Status); !ok || st.Loading || st.Probation.State != retry.Healthy {
			t.Errorf("EndProbation asked during a load of %v answered %+v; want the status with the probation ended", statusWait/10, res)
		}
		if waited := time.Since(started); waited != statusWait/10 {
			t.Errorf("answered %v after the requests, want when the load ended (%v)", waited, statusWait/10)
		}
		if err := system.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
	})
}
