package metrics_test

import (
	"testing"
	"time"

	"github.com/egridio/egrid/router/metrics"
)

// ForgetSubscription drops every key of one subscription's scope and nothing else, unless an
// actor of the name has gauges published (a newer incarnation), as RetireGauges spares one.
// ForgetTopic drops the topic's scope with its subscriptions', under the same guard.
func TestForget(t *testing.T) {
	fill := func() *metrics.Set {
		s := new(metrics.Set)
		for _, scope := range []string{"orders", "orders/billing", "orders/billingx", "orders/audit", "orders2/billing"} {
			s.Add(metrics.Key{Name: metrics.DeliverySuccessCount, Scope: scope}, 1)
			s.Add(metrics.Key{Name: metrics.DroppedEventCount, Scope: scope, Dim: "TimeToLiveExceeded"}, 1)
			s.Observe(metrics.Key{Name: metrics.DeliveryLatency, Scope: scope}, time.Second)
		}
		return s
	}
	scopes := func(s *metrics.Set) map[string]int {
		out := map[string]int{}
		for k := range s.Snapshot() {
			out[k.Scope]++
		}
		s.EachHistogram(func(k metrics.Key, _ *metrics.Histogram) { out[k.Scope]++ })
		return out
	}
	for _, c := range []struct {
		name    string
		forget  func(*metrics.Set) bool
		running []string // topic/sub of actors with gauges published
		dropped bool
		want    map[string]int
	}{
		{name: "subscription", forget: func(s *metrics.Set) bool { return s.ForgetSubscription("orders", "billing") }, dropped: true,
			want: map[string]int{"orders": 3, "orders/billingx": 3, "orders/audit": 3, "orders2/billing": 3}},
		{name: "subscription in another case", forget: func(s *metrics.Set) bool { return s.ForgetSubscription("Orders", "Billing") }, dropped: true,
			want: map[string]int{"orders": 3, "orders/billingx": 3, "orders/audit": 3, "orders2/billing": 3}},
		{name: "subscription running again", forget: func(s *metrics.Set) bool { return s.ForgetSubscription("orders", "billing") },
			running: []string{"orders", "billing"},
			want:    map[string]int{"orders": 3, "orders/billing": 3, "orders/billingx": 3, "orders/audit": 3, "orders2/billing": 3}},
		{name: "topic", forget: func(s *metrics.Set) bool { return s.ForgetTopic("orders") }, dropped: true,
			want: map[string]int{"orders2/billing": 3}},
		{name: "topic with a subscription running again", forget: func(s *metrics.Set) bool { return s.ForgetTopic("orders") },
			running: []string{"orders", "audit"},
			want:    map[string]int{"orders": 3, "orders/billing": 3, "orders/billingx": 3, "orders/audit": 3, "orders2/billing": 3}},
	} {
		s := fill()
		var g *metrics.SubscriptionGauges
		if c.running != nil {
			g = s.PublishGauges(c.running[0], c.running[1])
		}
		if got := c.forget(s); got != c.dropped {
			t.Errorf("%s: dropped %v, want %v", c.name, got, c.dropped)
		}
		got := scopes(s)
		if len(got) != len(c.want) {
			t.Errorf("%s: left %v, want %v", c.name, got, c.want)
			continue
		}
		for k, n := range c.want {
			if got[k] != n {
				t.Errorf("%s: left %v, want %v", c.name, got, c.want)
				break
			}
		}
		if g != nil { // once the newer incarnation retires too, the drop goes through
			s.RetireGauges(c.running[0], c.running[1], g)
			if !c.forget(s) {
				t.Errorf("%s: nothing dropped once the actor retired", c.name)
			}
		}
	}
}
