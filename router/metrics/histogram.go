package metrics

import (
	"sync/atomic"
	"time"
)

// Bounds are the upper bounds of every [Histogram]'s buckets: from 1 ms to about 2 hours,
// a factor of about 2.5 apart, wide enough for a publish's fsync, a webhook's answer and an
// event that waited hours for its retry. The last bucket, without a bound, takes the rest.
var Bounds = [...]time.Duration{
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
	30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 2 * time.Hour,
}

// Histogram counts durations into the buckets of [Bounds]. Observing one is a short scan of
// the bounds and three atomic adds, with no lock and no allocation; the zero value is ready.
type Histogram struct {
	buckets [len(Bounds) + 1]atomic.Uint64 // not cumulative; the last one is +Inf
	count   atomic.Uint64
	sum     atomic.Int64 // nanoseconds
}

// Observe counts one duration.
func (h *Histogram) Observe(d time.Duration) {
	i := 0
	for i < len(Bounds) && d > Bounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sum.Add(int64(d))
	h.count.Add(1)
}

// HistogramSnapshot is a copy of a [Histogram]. Buckets[i] counts the observations at most
// Bounds[i] (cumulative, as Prometheus wants them); Count is every observation, Sum their total.
type HistogramSnapshot struct {
	Buckets [len(Bounds)]uint64
	Count   uint64
	Sum     time.Duration
}

// Snapshot copies the histogram. Observations that race with it may be counted in Count and
// not yet in a bucket; Count is read last and is never less than the buckets' total.
func (h *Histogram) Snapshot() HistogramSnapshot {
	var s HistogramSnapshot
	var cum uint64
	for i := range Bounds {
		cum += h.buckets[i].Load()
		s.Buckets[i] = cum
	}
	cum += h.buckets[len(Bounds)].Load()
	s.Sum = time.Duration(h.sum.Load())
	s.Count = max(h.count.Load(), cum)
	return s
}
