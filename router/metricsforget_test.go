package router_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
)

// scopesOf lists the scopes that hold a counter or a histogram of r, each once.
func scopesOf(r *router.Router) map[string]bool {
	scopes := map[string]bool{}
	for k := range r.Metrics().Snapshot() {
		scopes[k.Scope] = true
	}
	r.Metrics().EachHistogram(func(k metrics.Key, _ *metrics.Histogram) { scopes[k.Scope] = true })
	return scopes
}

// A subscription created, delivered to and deleted, over and over under new names, leaves no
// counters or histograms behind: they stayed in memory, in /metrics and in the console's
// counters until the process restarted, one series per name ever deleted. One created again
// under a deleted one's name starts from zero, and the topic's own counters stay.
func TestDeletedSubscriptionsLeaveNoCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := bubbleRouter(t, &watchedStore{Store: store.NewMemory(), t: t}, map[string]sinks.Sink{"rec": rec})
		spec := router.SubscriptionSpec{Destination: router.SinkDestination("rec")}
		for i := range 5 {
			name := fmt.Sprintf("ephemeral-%d", i)
			if err := r.CreateSubscription(t.Context(), "orders", name, spec); err != nil {
				t.Fatal(err)
			}
			publishN(t, r, name, 1)
			synctest.Wait()
			scope := metrics.SubscriptionScope("orders", name)
			if got := r.Metrics().Get(metrics.Key{Name: metrics.DeliverySuccessCount, Scope: scope}); got != 1 {
				t.Fatalf("%s delivered %d before its deletion, want 1", name, got)
			}
			if err := r.DeleteSubscription(t.Context(), "orders", name); err != nil {
				t.Fatal(err)
			}
		}
		for scope := range scopesOf(r) {
			if strings.Contains(scope, "ephemeral") {
				t.Errorf("deleted subscription's metrics remain: scope %s", scope)
			}
		}
		if !scopesOf(r)["orders"] {
			t.Error("the topic's own counters went with its subscriptions")
		}

		// Created again under a deleted name: it counts afresh.
		if err := r.CreateSubscription(t.Context(), "orders", "ephemeral-0", spec); err != nil {
			t.Fatal(err)
		}
		publishN(t, r, "again", 1)
		synctest.Wait()
		if got := r.Metrics().Get(metrics.Key{Name: metrics.DeliverySuccessCount, Scope: metrics.SubscriptionScope("orders", "ephemeral-0")}); got != 1 {
			t.Errorf("ephemeral-0 created again: %d delivered, want 1", got)
		}

		if err := r.DeleteTopic(t.Context(), "orders"); err != nil {
			t.Fatal(err)
		}
		if left := scopesOf(r); len(left) != 0 {
			t.Errorf("deleted topic's metrics remain: %v", left)
		}
	})
}
