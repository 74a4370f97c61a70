package actors

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// A queue whose oldest event stays locked (a consumer holding it, or releasing it with a delay
// again and again) while newer events are received and acknowledged keeps no trace of those:
// its taken-in order held every sequence number behind the locked one, so it grew with the
// traffic for as long as the event stayed (hours, up to its time to live).
func TestQueueForgetsSettledEventsBehindALockedOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := store.NewMemory()
		_ = mem.PutTopic(ctx, "orders", nil)
		_ = mem.PutSubscription(ctx, "orders", "workers", nil)
		system := actor.NewActorSystem()
		defer system.Shutdown()
		root := system.Root
		cfg := &SubscriptionConfig{
			SubscriptionShared: &SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.CloudEvents, Store: mem, Metrics: new(metrics.Set)},
			Name:               "workers", DeliverySchema: schemas.CloudEvents,
			Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &QueueConfig{LockDuration: time.Hour},
		}
		var q *queue
		pid := root.Spawn(actor.PropsFromProducer(func() actor.Actor { q = &queue{cfg: cfg}; return q }, subscriptionMailbox))
		n := 0
		publish := func(count int) {
			var body []string
			for range count {
				n++
				body = append(body, fmt.Sprintf(`{"specversion":"1.0","id":"e%d","source":"/o","type":"T"}`, n))
			}
			evs, err := schemas.DecodeCloudEvents([]byte("["+strings.Join(body, ",")+"]"), schemas.ClassicLimits)
			if err != nil {
				t.Fatal(err)
			}
			last, err := mem.Append(ctx, "orders", time.Now(), evs)
			if err != nil {
				t.Fatal(err)
			}
			entries, _ := mem.Read(ctx, "orders", last-uint64(count)+1, count)
			root.Send(pid, &Deliver{Entries: entries, Through: last, From: entries[0].Seq})
		}
		var id uint64
		receive := func(max int) []string {
			id++
			v, err := root.RequestFuture(pid, &ReceiveEvents{Subscription: "workers", ID: id, MaxEvents: max, MaxWait: time.Minute}, time.Hour).Result()
			res, ok := v.(*ReceivedEvents)
			if err != nil || !ok || len(res.Events) != max {
				t.Fatalf("receive = %v, %v; want %d events", v, err, max)
			}
			tokens := make([]string, len(res.Events))
			for i, e := range res.Events {
				tokens[i] = e.LockToken
			}
			return tokens
		}
		publish(1)
		receive(1) // e1 stays locked
		const rounds, batch = 100, 100
		for range rounds {
			publish(batch)
			tokens := receive(batch)
			v, err := root.RequestFuture(pid, &SettleEvents{Subscription: "workers", Op: Acknowledge, LockTokens: tokens}, time.Hour).Result()
			if res, ok := v.(*Settled); err != nil || !ok || len(res.Succeeded) != batch {
				t.Fatalf("acknowledge = %v, %v", v, err)
			}
		}
		synctest.Wait()
		if len(q.items) != 1 {
			t.Fatalf("%d events held, want 1 (the locked one)", len(q.items))
		}
		if got, limit := len(q.order), 2*len(q.items)+orderSlack; got > limit {
			t.Fatalf("the queue keeps %d sequence numbers for 1 event held after %d were acknowledged; want at most %d", got, rounds*batch, limit)
		}
	})
}
