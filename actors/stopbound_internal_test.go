package actors

import (
	"context"
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

// hungWrites is a store whose subscription state writes do not return until the test
// releases them, as on a disk that stopped answering.
type hungWrites struct {
	store.Store
	entered chan struct{} // closed at the first write
	release chan struct{}
	first   bool
}

func (h *hungWrites) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if !h.first {
		h.first = true
		close(h.entered)
	}
	<-h.release
	return h.Store.UpdateSubscription(ctx, topic, sub, u)
}

// A subscription actor stops within its stop grace even when its last state write never
// returns: the stop waited for the write without a bound, and with it whatever waited for the
// stop (a subscription's deletion, its topic's, the router's close). The write, once it
// lands, is still written. A queue subscription (pull delivery), whose receipts are state
// writes, stops the same way, within its own stop grace (it waited DefaultStopGrace whatever
// StopGrace said).
func TestStopDoesNotWaitForAHungStateWrite(t *testing.T) {
	for _, tt := range []struct {
		name  string
		queue bool
		write func(root *actor.RootContext, pid *actor.PID) // makes the actor write its state
	}{
		{"push", false, func(*actor.RootContext, *actor.PID) {}},
		{"queue", true, func(root *actor.RootContext, pid *actor.PID) {
			root.RequestFuture(pid, &ReceiveEvents{Subscription: "audit", ID: 1, MaxEvents: 1, MaxWait: time.Second}, time.Minute)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { testStopWithAHungWrite(t, tt.queue, tt.write) })
	}
}

func testStopWithAHungWrite(t *testing.T, queue bool, write func(*actor.RootContext, *actor.PID)) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := ordersAudit(t)
		h := &hungWrites{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
		system := actor.NewActorSystem()
		defer system.Shutdown()
		const grace = 3 * time.Second
		cfg := &SubscriptionConfig{
			SubscriptionShared: &SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: h, Metrics: new(metrics.Set), StopGrace: grace},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sinks.Func(func(context.Context, *sinks.Batch) error { return nil }),
		}
		props := SubscriptionProps
		if queue {
			cfg.Queue, cfg.Sink = &QueueConfig{}, nil
			props = QueueProps
		}
		pid := system.Root.Spawn(props(cfg))
		ev := &schemas.Event{ID: "e1", Raw: []byte(`{"id":"e1"}`)}
		seq, err := mem.Append(ctx, "orders", time.Now(), []*schemas.Event{ev})
		if err != nil {
			t.Fatal(err)
		}
		system.Root.Send(pid, &Deliver{Entries: []store.Entry{{Seq: seq, PublishTime: time.Now(), Event: ev}}, Through: seq, From: seq})
		write(system.Root, pid)
		synctest.Wait()
		select {
		case <-h.entered:
		default:
			t.Fatal("the actor wrote no state")
		}
		start := time.Now()
		if err := system.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != grace {
			t.Errorf("the stop took %v with its state write hung, want its stop grace (%v)", took, grace)
		}
		close(h.release)
		synctest.Wait() // the write lands after all
		st, err := mem.LoadSubscription(ctx, "orders", "audit")
		if err != nil {
			t.Fatal(err)
		}
		if st.Cursor == 0 && len(st.Parked) == 0 {
			t.Errorf("nothing stored once the hung write returned")
		}
	})
}
