package actors

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// What a subscription keeps of the Delivers that arrive while its state loads is bounded
// however many arrive: a filtered subscription is handed one Deliver without entries per
// append its filter does not match (and one per poll of the journal's end in cluster mode),
// and it kept every one of them for as long as the load took — with a thousand subscriptions
// waiting for a load slot behind a busy topic, or a store that stopped answering, without end.
// Past the bound it keeps only the journal's end and reads the rest back, so nothing is lost:
// once loaded, every event is settled.
func TestDeliversKeptWhileLoadingAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := ordersAudit(t)
		const n = 12000                // about three times maxEarlyEntries
		for i := 0; i < n; i += 1000 { // in requests under the publish limit
			var body []string
			for j := i + 1; j <= i+1000; j++ {
				body = append(body, fmt.Sprintf(`{"id":"e%d","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`, j))
			}
			evs, err := schemas.DecodeEventGrid([]byte("["+strings.Join(body, ",")+"]"), "/topics/orders", schemas.ClassicLimits)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := mem.Append(ctx, "orders", time.Now(), evs); err != nil {
				t.Fatal(err)
			}
		}
		none, err := filter.Compile(filter.Spec{SubjectBeginsWith: "/none"}, schemas.EventGrid)
		if err != nil {
			t.Fatal(err)
		}
		g := &gatedLoad{Store: mem, gate: make(chan struct{})}
		delivered := 0
		cfg := &SubscriptionConfig{
			SubscriptionShared: &SubscriptionShared{Topic: "orders", InputSchema: schemas.EventGrid, Store: g, Metrics: new(metrics.Set)},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true}, Filter: none,
			Sink: sinks.Func(func(context.Context, *sinks.Batch) error { delivered++; return nil }),
		}
		system := actor.NewActorSystem()
		defer system.Shutdown()
		var s *subscription
		pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { s = &subscription{cfg: cfg}; return s }, subscriptionMailbox))
		synctest.Wait() // loading, held at the gate
		for seq := uint64(1); seq <= n; seq++ {
			system.Root.Send(pid, &Deliver{Through: seq, From: seq}) // one append each, filtered out
		}
		synctest.Wait()
		if kept := len(s.boot.early.delivers); kept > maxEarlyEntries {
			t.Errorf("kept %d Delivers while loading, want at most %d", kept, maxEarlyEntries)
		}
		close(g.gate)
		synctest.Wait()
		if err := system.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		st, err := mem.LoadSubscription(ctx, "orders", "audit")
		if err != nil {
			t.Fatal(err)
		}
		if st.Cursor != n || delivered != 0 {
			t.Fatalf("after the load: cursor %d, %d deliveries; want cursor %d (every event filtered out and settled), none", st.Cursor, delivered, n)
		}
	})
}
