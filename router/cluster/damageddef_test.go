package cluster_test

import (
	"testing"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router"
)

// TestClusterDeletesADamagedDefinition: a topic or subscription whose stored definition does
// not decode is left out by every node, and its name stays taken; deleting it, the remedy
// the store's error gives, frees the name in cluster mode too, where a node does not delete
// a name it does not know unless the store finds its definition damaged (it may be one
// another node created a moment ago).
func TestClusterDeletesADamagedDefinition(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t)
	a := c.start("a")
	for _, topic := range []string{"orders", "broken"} {
		if _, err := a.r.CreateTopic(ctx, topic, router.TopicSpec{}); err != nil {
			t.Fatalf("CreateTopic: %v", err)
		}
	}
	spec := router.SubscriptionSpec{Destination: router.SinkDestination("hook")}
	if err := a.r.CreateSubscription(ctx, "orders", "lost", spec); err != nil {
		t.Fatal(err)
	}
	if err := a.r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	js, err := njs.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, c.prefix+"_meta")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"topic.broken", "sub.orders.lost"} {
		if _, err := kv.Put(ctx, key, []byte("not egrid's")); err != nil {
			t.Fatal(err)
		}
	}
	b := c.start("b")
	if err := b.r.DeleteSubscription(ctx, "orders", "lost"); err != nil {
		t.Errorf("DeleteSubscription of the damaged orders/lost: %v", err)
	}
	if err := b.r.DeleteTopic(ctx, "broken"); err != nil {
		t.Errorf("DeleteTopic of the damaged broken: %v", err)
	}
	if _, err := b.r.CreateTopic(ctx, "broken", router.TopicSpec{}); err != nil {
		t.Errorf("CreateTopic after the delete: %v", err)
	}
	if err := b.r.CreateSubscription(ctx, "orders", "lost", spec); err != nil {
		t.Errorf("CreateSubscription after the delete: %v", err)
	}
	// A name no node knows and the store does not hold is not found, as before.
	if err := b.r.DeleteTopic(ctx, "never"); err == nil {
		t.Error("DeleteTopic of a topic never created: nil error, want not found")
	}
}
