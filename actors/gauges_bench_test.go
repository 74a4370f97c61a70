package actors

import (
	"testing"
	"time"

	"github.com/egridio/egrid/router/metrics"
)

// BenchmarkPublishGauges is what a subscription actor's turn pays to publish its delivery state
// for the Prometheus collector, with a full window of events in memory and some parked.
func BenchmarkPublishGauges(b *testing.B) {
	set := new(metrics.Set)
	s := &subscription{cfg: &SubscriptionConfig{SubscriptionShared: &SubscriptionShared{Topic: "orders", Metrics: set}, Name: "billing"},
		items: make(map[uint64]*item), batches: make(map[uint64]*batch)}
	s.gauges = set.PublishGauges("orders", "billing")
	now := time.Now()
	for seq := uint64(1); seq <= DefaultWindow; seq++ {
		it := &item{seq: seq, publish: now}
		s.items[seq] = it
		if seq%8 == 0 {
			it.parked = true
			s.parkedSeq.Push(it)
			continue
		}
		s.order = append(s.order, seq)
	}
	b.ResetTimer()
	for b.Loop() {
		s.publishGauges()
	}
}
