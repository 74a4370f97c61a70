package cluster_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/testkit"
)

// Every event a publish acknowledged reaches every subscription at least once when nodes
// publish to one topic at the same time, and without any further publish: a subscription
// actor that misses entries appended elsewhere reads them from the journal by itself.
func TestEveryAcknowledgedEventReachesEverySubscription(t *testing.T) {
	t.Run("one NATS server", func(t *testing.T) { everyEventReachesEverySubscription(t, newCluster(t)) })
	t.Run("three NATS servers, three replicas", func(t *testing.T) {
		nc := testkit.StartNATSCluster(t, 3)
		c := newCluster(t)
		c.urls, c.replicas = nc.URLs(), 3
		everyEventReachesEverySubscription(t, c)
	})
}

func everyEventReachesEverySubscription(t *testing.T, c *testCluster) {
	a, b, d := c.start("a"), c.start("b"), c.start("c")
	nodes := []*node{a, b, d}
	const subs = 6
	var calls atomic.Int64
	c.rec.fail = func(_, _ string) bool { return calls.Add(1)%140 == 0 } // about 1 batch in 7: parked retries
	ctx := t.Context()
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	for i := range subs {
		spec := router.SubscriptionSpec{Destination: router.SinkDestination("hook")}
		spec.Destination.Properties.MaxEventsPerBatch = 20
		if i%2 == 1 {
			spec.Filter = filter.Spec{SubjectBeginsWith: "/orders/1"}
		}
		// A replica may not have the topic yet just after its creation: the store reads with
		// direct gets, which a lagging follower may answer (a known limit, see README).
		var err error
		eventually(t, 10*time.Second, "CreateSubscription", func() bool {
			err = a.r.CreateSubscription(ctx, "orders", fmt.Sprintf("sub%d", i), spec)
			return err == nil
		})
	}
	eventually(t, 30*time.Second, "every subscription placed", func() bool {
		for i := range subs {
			if len(runners("orders", fmt.Sprintf("sub%d", i), nodes...)) != 1 {
				return false
			}
		}
		return true
	})
	const perNode, batch = 1500, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []string
	var refused atomic.Int64
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perNode; i += batch {
				var ids []string
				for j := range batch {
					ids = append(ids, fmt.Sprintf("%s-%d", n.name, i+j))
				}
				var evs []any
				for k, id := range ids {
					evs = append(evs, json.RawMessage(fmt.Sprintf(
						`{"id":%q,"subject":"/orders/%d","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{"n":1},"dataVersion":"1.0"}`, id, k%2)))
				}
				if err := n.r.Publish(t.Context(), "orders", evs...); err != nil {
					refused.Add(1) // not acknowledged: the publisher would retry
					continue
				}
				mu.Lock()
				acked = append(acked, ids...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d publishes acknowledged, %d refused", len(acked)/batch, refused.Load())
	missing := func() (int, string) {
		got := map[string]map[string]bool{}
		for _, del := range c.rec.all() {
			if got[del.sub] == nil {
				got[del.sub] = map[string]bool{}
			}
			for _, id := range del.ids {
				got[del.sub][id] = true
			}
		}
		n, example := 0, ""
		for i := range subs {
			sub := fmt.Sprintf("sub%d", i)
			for k, id := range acked {
				if i%2 == 1 && k%batch%2 != 1 {
					continue // filtered out: subject /orders/0
				}
				if !got[sub][id] {
					if n == 0 {
						example = sub + "/" + id
					}
					n++
				}
			}
		}
		return n, example
	}
	start := time.Now()
	for {
		n, example := missing()
		if n == 0 {
			break
		}
		if time.Since(start) > 20*time.Second {
			for i := range subs {
				st, err := a.r.Status(t.Context(), "orders", fmt.Sprintf("sub%d", i))
				t.Logf("sub%d on %v: %+v %v", i, runners("orders", fmt.Sprintf("sub%d", i), nodes...), st, err)
			}
			t.Fatalf("%d acknowledged (event, subscription) pairs never delivered after publishing ended, e.g. %s", n, example)
		}
		<-time.After(50 * time.Millisecond)
	}
}
