package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store/jetstream"
)

// TestClusterDeletesADamagedDefinition: a topic or subscription whose stored definition does
// not decode is left out by every node, and its name stays taken; deleting it, the remedy
// the store's error gives, frees the name in cluster mode too, where a node does not delete
// a name it does not know unless the store finds its definition damaged (it may be one
// another node created a moment ago).
func TestClusterDeletesADamagedDefinition(t *testing.T) {
	ctx := t.Context()
	c, spec, kv := twoDefinitionsToDamage(t)
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

// probeRace is a node's store whose probe for damaged definitions runs then before it answers:
// another node's write between the probe and the delete that follows it.
type probeRace struct {
	*jetstream.Store
	then func()
}

func (p probeRace) DefinitionDamaged(ctx context.Context, topic, sub string) (bool, uint64, error) {
	damaged, rev, err := p.Store.DefinitionDamaged(ctx, topic, sub)
	p.then()
	return damaged, rev, err
}

// A damaged definition that another node replaces with one that reads, between the probe that
// found it damaged and the delete, is not deleted: the delete is of the damaged value alone,
// and it fails saying nothing was deleted and to retry (409 Conflict through the admin API).
func TestClusterDeleteOfADamagedDefinitionLeavesOneWrittenSince(t *testing.T) {
	ctx := t.Context()
	c, _, kv := twoDefinitionsToDamage(t)
	good := map[string][]byte{}
	for _, key := range []string{"topic.broken", "sub.orders.lost"} {
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		good[key] = e.Value()
		if _, err := kv.Put(ctx, key, []byte("not egrid's")); err != nil {
			t.Fatal(err)
		}
	}
	var replace string // the key the next probe's race writes its good value to
	c.configure = func(_ string, _ *router.Config, deps *router.Deps) {
		deps.Store = probeRace{Store: deps.Store.(*jetstream.Store), then: func() {
			if replace != "" {
				if _, err := kv.Put(ctx, replace, good[replace]); err != nil {
					t.Error(err)
				}
				replace = ""
			}
		}}
	}
	b := c.start("b")

	replace = "sub.orders.lost"
	err := b.r.DeleteSubscription(ctx, "orders", "lost")
	if !errors.Is(err, router.ErrDefinitionChanged) || !strings.Contains(err.Error(), "nothing was deleted") || !strings.Contains(err.Error(), "retry") {
		t.Errorf("DeleteSubscription of the damaged orders/lost replaced meanwhile = %v; want ErrDefinitionChanged saying nothing was deleted and to retry", err)
	}
	replace = "topic.broken"
	err = b.r.DeleteTopic(ctx, "broken")
	if !errors.Is(err, router.ErrDefinitionChanged) || !strings.Contains(err.Error(), "nothing was deleted") || !strings.Contains(err.Error(), "retry") {
		t.Errorf("DeleteTopic of the damaged broken replaced meanwhile = %v; want ErrDefinitionChanged saying nothing was deleted and to retry", err)
	}
	for key, val := range good {
		if e, err := kv.Get(ctx, key); err != nil || string(e.Value()) != string(val) {
			t.Errorf("%s: the definition written after the probe was deleted (%v)", key, err)
		}
	}
	// Read by the node (the conflict has it read the topic again), served, and deleted as
	// any other when the delete is retried.
	eventually(t, 20*time.Second, "orders/lost and broken read by b", func() bool {
		_, serr := b.r.Subscription("orders", "lost")
		_, terr := b.r.Topic("broken")
		return serr == nil && terr == nil
	})
	if err := b.r.DeleteSubscription(ctx, "orders", "lost"); err != nil {
		t.Errorf("DeleteSubscription retried: %v", err)
	}
	if err := b.r.DeleteTopic(ctx, "broken"); err != nil {
		t.Errorf("DeleteTopic retried: %v", err)
	}
}

// twoDefinitionsToDamage starts a cluster whose node a creates the topics orders and broken
// and the subscription orders/lost (spec), then stops: the test damages the stored
// definitions of broken and orders/lost in kv, the cluster's meta bucket, before it starts
// another node.
func twoDefinitionsToDamage(t *testing.T) (*testCluster, router.SubscriptionSpec, njs.KeyValue) {
	t.Helper()
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
	return c, spec, metaBucket(t, c, a)
}

// metaBucket returns the cluster's meta bucket (definitions and subscription records), read
// through n's connection.
func metaBucket(t *testing.T, c *testCluster, n *node) njs.KeyValue {
	t.Helper()
	js, err := njs.New(n.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), c.prefix+"_meta")
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
