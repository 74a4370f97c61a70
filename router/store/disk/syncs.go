package disk

import (
	"math"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// SyncTimes is how long the store's log syncs took: every synced write (a publish's append,
// a dead-letter hand-over, a definition) waits for the one after it, so a disk that stalls
// a sync stalls every acknowledgement behind it, whatever egrid does. The times are pebble's
// own measurement of its write-ahead log's fdatasync, in its buckets: 100 µs wide up to
// 5 ms, then each about 17 % above the one before up to 10 s.
type SyncTimes struct {
	// Count is the number of syncs.
	Count uint64
	// Sum is the time they took together.
	Sum time.Duration
	// Buckets holds, by ascending upper bound, how many syncs took at most that long
	// (cumulative counts, as Prometheus keeps them).
	Buckets []SyncBucket
}

// SyncBucket is one bucket of a [SyncTimes].
type SyncBucket struct {
	UpperBound time.Duration
	Count      uint64
}

// LogSyncs returns the log syncs of the store's current pebble instance: since the store
// opened, or since it last reopened itself after a failure. Subtract an earlier reading
// ([SyncTimes.Sub]) for the syncs of a stretch of time. Pebble counts a sync just after it
// has released the writes waiting for it, so a reading taken as an acknowledgement returns
// may not hold that acknowledgement's sync yet. It returns the zero SyncTimes once the store
// is closed.
func (s *Store) LogSyncs() SyncTimes {
	c, err := s.enter("", "")
	if err != nil {
		return SyncTimes{}
	}
	defer c.done()
	h := c.g.db.Metrics().LogWriter.FsyncLatency
	if h == nil {
		return SyncTimes{}
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.Histogram == nil {
		return SyncTimes{}
	}
	t := SyncTimes{Count: m.Histogram.GetSampleCount(), Sum: time.Duration(m.Histogram.GetSampleSum()), Buckets: make([]SyncBucket, 0, len(m.Histogram.Bucket))}
	for _, b := range m.Histogram.Bucket {
		// Pebble observes nanoseconds.
		t.Buckets = append(t.Buckets, SyncBucket{UpperBound: time.Duration(b.GetUpperBound()), Count: b.GetCumulativeCount()})
	}
	return t
}

// Sub returns the syncs of t that earlier, a reading of the same instance, does not hold.
// When earlier holds more than t in any count (the store reopened itself between them) or
// its buckets differ, Sub gives t itself: the syncs since the reopening.
func (t SyncTimes) Sub(earlier SyncTimes) SyncTimes {
	if len(earlier.Buckets) != len(t.Buckets) || earlier.Count > t.Count {
		return t
	}
	out := SyncTimes{Count: t.Count - earlier.Count, Sum: t.Sum - earlier.Sum, Buckets: make([]SyncBucket, len(t.Buckets))}
	for i, b := range t.Buckets {
		if earlier.Buckets[i].UpperBound != b.UpperBound || earlier.Buckets[i].Count > b.Count {
			return t
		}
		out.Buckets[i] = SyncBucket{UpperBound: b.UpperBound, Count: b.Count - earlier.Buckets[i].Count}
	}
	return out
}

// Quantile returns the upper bound of the bucket that holds the q quantile (0 < q ≤ 1) of
// the syncs: at least that share of them took at most that long. It returns 0 when there
// were no syncs and [math.MaxInt64] when the quantile is past the last bucket (over 10 s).
func (t SyncTimes) Quantile(q float64) time.Duration {
	if t.Count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(t.Count)))
	for _, b := range t.Buckets {
		if b.Count >= rank {
			return b.UpperBound
		}
	}
	return math.MaxInt64
}

// Over returns how many syncs took longer than d, when d is a bucket bound; otherwise how
// many took longer than the largest bound under d.
func (t SyncTimes) Over(d time.Duration) uint64 {
	var within uint64
	for _, b := range t.Buckets {
		if b.UpperBound > d {
			break
		}
		within = b.Count
	}
	return t.Count - within
}
