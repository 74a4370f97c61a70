package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/testkit/brokertest"
)

// A topic deleted and created again, with the same keys and subscriptions, while the node
// running one of its subscriptions misses the notices (its connection down for less than the
// lease, so it keeps the lease and the actor): the node's sync sees that the stored
// subscription is of another life than the one its actor was built from and starts the actor
// again from the new state. The old actor's cursor (past the old journal's events) would
// otherwise wait for numbers the new journal, numbered from 1 again, reaches only later, and
// deliver none of the events before them.
func TestTopicCreatedAgainUnseenDeliversToTheNewLife(t *testing.T) {
	c := newCluster(t)
	p := brokertest.NewProxy(t, strings.TrimPrefix(serverURL, "nats://"))
	c.url = "nats://" + p.Addr()
	a := c.start("a")
	c.url = ""
	b := c.start("b")
	const subs = 4
	setup(t, subs, a, b)
	sub := ""
	for i := range subs {
		if s := fmt.Sprintf("sub%d", i); cluster.Owner([]string{"a", "b"}, cluster.Key{Topic: "orders", Subscription: s}) == "a" {
			sub = s
			break
		}
	}
	if sub == "" {
		t.Fatal("no subscription placed on a")
	}
	delivered := func(ids ...string) func() bool {
		return func() bool {
			for _, id := range ids {
				ok := false
				for _, d := range c.rec.attemptsOf(id) {
					ok = ok || (d.sub == sub && d.node == "a")
				}
				if !ok {
					return false
				}
			}
			return true
		}
	}
	old := []string{"old0", "old1", "old2", "old3", "old4"}
	if err := publish(t, b.r, "orders", old...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	eventually(t, 30*time.Second, "the old events delivered to "+sub+" on a", delivered(old...))
	eventually(t, 30*time.Second, sub+"'s cursor past the old events", func() bool {
		st, err := a.r.Status(t.Context(), "orders", sub)
		return err == nil && st.Cursor == uint64(len(old)) && st.Backlog == 0
	})

	p.Down()
	ctx := t.Context()
	spec, err := b.r.Topic("orders")
	if err != nil || spec.Key1 == "" {
		t.Fatalf("Topic: %+v, %v; want its keys", spec, err)
	}
	if err := b.r.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if _, err := b.r.CreateTopic(ctx, "orders", router.TopicSpec{Key1: spec.Key1, Key2: spec.Key2}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	for i := range subs {
		if err := b.r.CreateSubscription(ctx, "orders", fmt.Sprintf("sub%d", i), router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
			t.Fatalf("CreateSubscription: %v", err)
		}
	}
	// The notices went out while a was away; give them time to be gone for good.
	start := time.Now()
	eventually(t, 5*time.Second, "the notices gone", func() bool { return time.Since(start) > 300*time.Millisecond })
	p.Up()

	fresh := []string{"new0", "new1", "new2"}
	eventually(t, 30*time.Second, "publishes on b accepted", func() bool { return publish(t, b.r, "orders", fresh...) == nil })
	// Several full reads of the definitions (every 10 rounds of LeaseTTL/5).
	eventually(t, 6*leaseTTL+10*time.Second, "the events of the topic created again delivered to "+sub+" on a", delivered(fresh...))
	if err := publish(t, a.r, "orders", "new3"); err != nil {
		t.Fatalf("Publish on a: %v", err)
	}
	eventually(t, 20*time.Second, "new3 published on a delivered", delivered("new3"))
	if got := runners("orders", sub, a, b); len(got) != 1 || got[0] != "a" {
		t.Fatalf("%s runs on %v, want a alone (the lease kept)", sub, got)
	}
}
