package metrics_test

import (
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router/metrics"
)

func TestHistogramBuckets(t *testing.T) {
	var h metrics.Histogram
	for _, d := range []time.Duration{0, time.Millisecond, time.Millisecond + 1, 3 * time.Second, 3 * time.Hour} {
		h.Observe(d)
	}
	s := h.Snapshot()
	if s.Count != 5 || s.Sum != 3*time.Hour+3*time.Second+2*time.Millisecond+1 {
		t.Errorf("count %d sum %v, want 5 and 3h0m3.002000001s", s.Count, s.Sum)
	}
	for _, c := range []struct {
		bound time.Duration
		want  uint64
	}{
		{time.Millisecond, 2}, // a bound is inclusive, as Prometheus's le
		{2500 * time.Microsecond, 3},
		{2500 * time.Millisecond, 3},
		{5 * time.Second, 4},
		{2 * time.Hour, 4}, // 3 h is only in +Inf, which Count is
	} {
		i := 0
		for metrics.Bounds[i] != c.bound {
			i++
		}
		if s.Buckets[i] != c.want {
			t.Errorf("bucket le=%v holds %d, want %d", c.bound, s.Buckets[i], c.want)
		}
	}
}

func TestHistogramConcurrent(t *testing.T) {
	var set metrics.Set
	k := metrics.Key{Name: metrics.DeliveryLatency, Scope: metrics.SubscriptionScope("t", "s")}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 1000 {
				set.Observe(k, time.Duration(i)*time.Millisecond)
			}
		})
	}
	wg.Wait()
	if s := set.Histogram(k).Snapshot(); s.Count != 8000 || s.Buckets[len(s.Buckets)-1] != 8000 {
		t.Errorf("count %d, last bucket %d, want 8000 each", s.Count, s.Buckets[len(s.Buckets)-1])
	}
}

func TestGaugesRetireOnlyTheirOwn(t *testing.T) {
	var set metrics.Set
	old := set.PublishGauges("t", "s")
	cur := set.PublishGauges("t", "s") // a restarted actor replaces the old one's set
	set.RetireGauges("t", "s", old)    // the old incarnation stops after
	var seen []*metrics.SubscriptionGauges
	set.EachGauges(func(topic, sub string, g *metrics.SubscriptionGauges) {
		if topic != "t" || sub != "s" {
			t.Errorf("gauges of %s/%s", topic, sub)
		}
		seen = append(seen, g)
	})
	if len(seen) != 1 || seen[0] != cur {
		t.Fatalf("gauges %v, want the current incarnation's only", seen)
	}
	set.RetireGauges("t", "s", cur)
	set.EachGauges(func(topic, sub string, _ *metrics.SubscriptionGauges) {
		t.Errorf("gauges of %s/%s after retiring", topic, sub)
	})
}

func TestProbationAt(t *testing.T) {
	var g metrics.SubscriptionGauges
	now := time.Unix(1000, 0)
	g.Probation.Store(metrics.ProbationOnProbation)
	g.ProbationUntil.Store(now.Add(time.Second).UnixNano())
	if got := g.ProbationAt(now); got != metrics.ProbationOnProbation {
		t.Errorf("before until: %d, want OnProbation", got)
	}
	if got := g.ProbationAt(now.Add(time.Second)); got != metrics.ProbationAwaitingProbe {
		t.Errorf("at until: %d, want AwaitingProbe", got)
	}
}

// BenchmarkObserve is the cost a histogram adds to a hot path that keeps the *Histogram.
func BenchmarkObserve(b *testing.B) {
	var h metrics.Histogram
	b.RunParallel(func(pb *testing.PB) {
		d := 3 * time.Millisecond
		for pb.Next() {
			h.Observe(d)
		}
	})
}

// BenchmarkAdd is the cost of a counter update through the Set, which the paths that now
// observe a histogram used to pay.
func BenchmarkAdd(b *testing.B) {
	var set metrics.Set
	k := metrics.Key{Name: metrics.DestinationProcessingDurationInMs, Scope: metrics.SubscriptionScope("orders", "billing")}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			set.Add(k, 3)
		}
	})
}

// A scrape's f runs without the set's lock: an actor that starts or stops meanwhile (a
// collector waiting on its channel) is not held by it, and the scrape sees the actors
// registered when it began.
func TestEachGaugesHoldsNoLockWhileFRuns(t *testing.T) {
	var set metrics.Set
	a := set.PublishGauges("t", "a")
	n := 0
	set.EachGauges(func(topic, sub string, _ *metrics.SubscriptionGauges) {
		n++
		set.PublishGauges("t", "b") // an actor starting
		set.RetireGauges("t", "a", a)
	})
	if n != 1 {
		t.Errorf("f called %d times, want once: the actors registered when the scrape began", n)
	}
	var now []string
	set.EachGauges(func(topic, sub string, _ *metrics.SubscriptionGauges) { now = append(now, sub) })
	if len(now) != 1 || now[0] != "b" {
		t.Errorf("gauges %v after, want b", now)
	}
}
