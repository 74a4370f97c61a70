package router_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
)

// A NATS or RabbitMQ destination publishes on a connection of its own, which is closed when
// the subscription stops delivering: replaced by an update, deleted, with its topic deleted,
// or at the router's close. Nothing closed them: every subscription created and deleted left
// its connection (and its goroutines) open until the process ended. The connections are
// counted at a proxy in front of the broker; the subscriptions have custom delivery headers,
// whose wrapper hid the destination's Close.
func TestBrokerSubscriptionStopClosesItsConnection(t *testing.T) {
	for _, kind := range []broker.Kind{broker.NATSJetStream, broker.RabbitMQ} {
		t.Run(kind.String(), func(t *testing.T) { testStopClosesConnection(t, kind) })
	}
}

func testStopClosesConnection(t *testing.T, kind broker.Kind) {
	const subs = 4
	direct := brokertest.Servers(t, kind)
	prefix := brokertest.Unique("egridclose")
	if kind == broker.NATSJetStream {
		brokertest.CreateStream(t, *direct.NATS, strings.ToUpper(prefix), prefix+".>")
	}
	pubSide, proxy := brokertest.Through(t, direct, kind)
	b := openBrokers(t, pubSide)
	delivered := make(chan string, 64)
	r, err := router.New(router.Config{TimeScale: 100, NoJitter: true, InsecureDev: true}, router.Deps{
		Publishers: b.Publishers(),
		OnAttempt: func(rec *router.AttemptRecord) {
			if !rec.NoAttempt && rec.Outcome == schemas.Delivered {
				delivered <- rec.Subscription
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = r.Close(context.Background())
		}
	})
	ctx := context.Background()
	for _, topic := range []string{"orders", "other"} {
		if _, err := r.CreateTopic(ctx, topic, router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
	}
	spec := func(i, attempts int) router.SubscriptionSpec {
		s := router.SubscriptionSpec{
			Destination: router.BrokerDestination(kind, fmt.Sprintf("%s.q%d", prefix, i)),
			RetryPolicy: router.RetryPolicy{MaxDeliveryAttempts: attempts},
		}
		s.Destination.Properties.DeliveryAttributeMappings = []router.DeliveryAttributeMapping{
			{Name: "team", Type: router.MappingStatic, Properties: router.DeliveryAttributeMappingProperties{Value: "orders"}},
		}
		return s
	}
	// deliver publishes one event to topic and waits for n subscriptions to deliver it.
	deliver := func(topic string, n int) {
		t.Helper()
		if err := r.Publish(ctx, topic, event(brokertest.Unique("evt-"))); err != nil {
			t.Fatal(err)
		}
		for range n {
			select {
			case <-delivered:
			case <-time.After(brokerGuard):
				t.Fatalf("no delivery within %s", brokerGuard)
			}
		}
	}
	wantConns := func(n int, when string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, brokerGuard)
		defer cancel()
		if got := proxy.WaitConnections(wctx, n); got != n {
			t.Fatalf("%s: %d connections open to %s, want %d", when, got, kind, n)
		}
	}

	for i := range subs {
		if err := r.CreateSubscription(ctx, "orders", fmt.Sprintf("sub-%d", i), spec(i, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.CreateSubscription(ctx, "other", "sub", spec(subs, 3)); err != nil {
		t.Fatal(err)
	}
	deliver("orders", subs)
	deliver("other", 1)
	wantConns(subs+1, "after the first deliveries")

	for i := range subs { // each update replaces the subscription's actor and destination
		if err := r.CreateSubscription(ctx, "orders", fmt.Sprintf("sub-%d", i), spec(i, 4)); err != nil {
			t.Fatal(err)
		}
	}
	deliver("orders", subs)
	wantConns(subs+1, "after the updates")

	for i := range subs - 1 {
		if err := r.DeleteSubscription(ctx, "orders", fmt.Sprintf("sub-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	wantConns(2, "after the deletes")
	if err := r.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	wantConns(1, "after the topic's delete")
	closed = true
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wantConns(0, "after the router's close")
}
