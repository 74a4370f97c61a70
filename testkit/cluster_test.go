package testkit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// nodeSink records which node delivered which event.
type nodeSink struct {
	mu sync.Mutex
	by map[string][]string // event id → node names, one per successful attempt
}

func (s *nodeSink) sink(node string) sinks.Sink {
	return sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		if got := b.Headers[router.NodeHeader]; got != node {
			return fmt.Errorf("node %s sent %s %q", node, router.NodeHeader, got)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, ev := range b.Events {
			s.by[ev.ID] = append(s.by[ev.ID], node)
		}
		return nil
	})
}

func (s *nodeSink) nodes(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.by[id])
}

// waitDelivered polls (bounded) until id was delivered and returns the nodes that did.
func (s *nodeSink) waitDelivered(t *testing.T, id string, bound time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		if n := s.nodes(id); len(n) > 0 {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("event %s not delivered within %v", id, bound)
		}
		<-time.After(10 * time.Millisecond)
	}
}

func event(id string) any {
	return json.RawMessage(fmt.Sprintf(`{"id":%q,"subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{},"dataVersion":"1"}`, id))
}

// Three routers on a three-server NATS cluster act as one: a subscription created on one node
// runs on exactly one, an event published on another reaches it, and when the node running it
// is killed another takes over and delivers what is published next; the killed node comes back
// under its name and the cluster counts it again.
func TestClusterFailover(t *testing.T) {
	rec := &nodeSink{by: map[string][]string{}}
	c := testkit.StartCluster(t, testkit.ClusterConfig{
		Config: router.Config{InsecureDev: true},
		Deps: func(node string) router.Deps {
			return router.Deps{Sinks: map[string]sinks.Sink{"hook": rec.sink(node)}}
		},
	})
	ctx := t.Context()
	if _, err := c.Router(0).CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Router(0).CreateSubscription(ctx, "orders", "billing", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
		t.Fatal(err)
	}
	owner := c.WaitRunner("orders", "billing", 30*time.Second)
	publishOn := (owner + 1) % c.Size()
	publishUntil(t, c, publishOn, "e1")
	if got := rec.waitDelivered(t, "e1", 30*time.Second); got[0] != c.Name(owner) {
		t.Errorf("e1 delivered by %v, want the owner %s", got, c.Name(owner))
	}

	killed := time.Now()
	c.Kill(owner)
	if c.Running(owner) || c.Router(owner) != nil {
		t.Fatal("the killed node still runs")
	}
	next := c.WaitRunner("orders", "billing", 30*time.Second, owner)
	t.Logf("%s killed; %s runs the subscription %v later (lease TTL 2 s)", c.Name(owner), c.Name(next), time.Since(killed).Round(time.Millisecond))
	publishUntil(t, c, publishOn, "e2")
	if got := rec.waitDelivered(t, "e2", 30*time.Second); got[0] != c.Name(next) {
		t.Errorf("e2 delivered by %v, want the new owner %s", got, c.Name(next))
	}

	c.Start(owner)
	deadline := time.Now().Add(30 * time.Second)
	for len(c.Router(publishOn).ClusterMembers()) != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("members %v after the restart, want all 3", c.Router(publishOn).ClusterMembers())
		}
		<-time.After(10 * time.Millisecond)
	}
	if rs := c.Runners("orders", "billing"); len(rs) > 1 {
		t.Errorf("the subscription runs on %v at once", rs)
	}
}

// publishUntil publishes id on node i, trying again (bounded) while the cluster is between
// owners or leaders: a publish that fails was not acknowledged.
func publishUntil(t *testing.T, c *testkit.Cluster, i int, id string) {
	t.Helper()
	var err error
	for range 100 {
		if err = c.Router(i).Publish(t.Context(), "orders", event(id)); err == nil {
			return
		}
		<-time.After(50 * time.Millisecond)
	}
	t.Fatalf("publishing %s on %s: %v", id, c.Name(i), err)
}
