// Package metrics holds egrid's counters under Event Grid's metric names (SPEC §7):
// PublishSuccessCount, PublishFailCount, MatchedEventCount, UnmatchedEventCount,
// DeliverySuccessCount, DeliveryAttemptFailCount (by error), DroppedEventCount (by reason),
// DeadLetteredCount (by reason) and AdvancedFilterEvaluationCount, each per topic or
// subscription; the durations PublishSuccessLatencyInMs and DestinationProcessingDurationInMs,
// and egrid's publish-to-delivery latency, as [Histogram]s; and the gauges the actors publish
// ([SubscriptionGauges], [Set.SetOutbox]). A [Set] is cheap to update from many goroutines and
// can be read at any time; the Prometheus collector (router/metrics/promexport) reads the same
// Set at scrape time and adds nothing to the paths that update it.
//
// metrics imports no other egrid package.
package metrics

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Metric names, as Event Grid spells them.
const (
	PublishSuccessCount      = "PublishSuccessCount"
	PublishFailCount         = "PublishFailCount"
	MatchedEventCount        = "MatchedEventCount"
	UnmatchedEventCount      = "UnmatchedEventCount"
	DeliverySuccessCount     = "DeliverySuccessCount"
	DeliveryAttemptFailCount = "DeliveryAttemptFailCount"
	// DroppedEventCount counts the events lost, by reason; DeadLetteredCount the events whose
	// delivery ended dead-lettered, by deadLetterReason, as it ends. A dead letter dropped
	// unwritten later (DeadLetterDestinationUnavailable) is counted in both, as Event Grid
	// counts it: once as dead-lettered, then as dropped.
	DroppedEventCount             = "DroppedEventCount"
	DeadLetteredCount             = "DeadLetteredCount"
	AdvancedFilterEvaluationCount = "AdvancedFilterEvaluationCount"
	// StoreCorruptionCount (egrid's own) counts the damage the store found, by kind (Dim:
	// marker, wal, table, entry, definition); each is also logged as an ERROR saying what
	// was lost.
	StoreCorruptionCount = "StoreCorruptionCount"

	// Pull delivery of namespace queue subscriptions (eventgrid-behaviour.md §8.2), per
	// subscription: events received, and lock tokens acknowledged, released, rejected and
	// renewed; the Failed counters count lock tokens refused, by error code (Dim: BadToken,
	// TokenLost).
	SuccessfulReceivedEvents     = "SuccessfulReceivedEvents"
	SuccessfulAcknowledgedEvents = "SuccessfulAcknowledgedEvents"
	FailedAcknowledgedEvents     = "FailedAcknowledgedEvents"
	SuccessfulReleasedEvents     = "SuccessfulReleasedEvents"
	FailedReleasedEvents         = "FailedReleasedEvents"
	SuccessfulRejectedEvents     = "SuccessfulRejectedEvents"
	FailedRejectedEvents         = "FailedRejectedEvents"
	SuccessfulRenewedLockEvents  = "SuccessfulRenewedLockEvents"
	FailedRenewedLockEvents      = "FailedRenewedLockEvents"

	// Histograms ([Set.Observe]).
	PublishSuccessLatencyInMs         = "PublishSuccessLatencyInMs"
	DestinationProcessingDurationInMs = "DestinationProcessingDurationInMs"
	// DeliveryLatency is egrid's own: from an event's publish to its delivery, per event.
	DeliveryLatency = "DeliveryLatency"
)

// Key identifies one counter: a metric name and its dimensions. Scope is the topic for topic
// metrics and "topic/subscription" for subscription metrics; Dim is the Error, DropReason or
// DeadLetterReason dimension, or empty.
type Key struct {
	Name  string
	Scope string
	Dim   string
}

// String renders the key as name{scope,dim}.
func (k Key) String() string {
	var b strings.Builder
	b.WriteString(k.Name)
	b.WriteString("{")
	b.WriteString(k.Scope)
	if k.Dim != "" {
		b.WriteString(",")
		b.WriteString(k.Dim)
	}
	b.WriteString("}")
	return b.String()
}

// Set is a set of counters. The zero value is ready to use and safe for concurrent use.
type Set struct {
	m    sync.Map // Key -> *atomic.Int64
	hist sync.Map // Key -> *Histogram
	// gauges holds the running subscription actors' gauges. A plain map under a lock, not a
	// sync.Map: it is written only when an actor starts or stops and read per scrape, and it
	// costs about 40 bytes an entry where the sync.Map's trie cost about 150 (with the scope
	// string), which tens of thousands of idle subscriptions pay.
	gaugesMu sync.RWMutex
	gauges   map[gaugeKey]*SubscriptionGauges
	outbox   atomic.Int64
}

// Observe counts the duration d in the histogram k.
func (s *Set) Observe(k Key, d time.Duration) { s.Histogram(k).Observe(d) }

// Histogram returns the histogram k, creating it on first use. A caller that observes often
// keeps the result, so that it skips the lookup.
func (s *Set) Histogram(k Key) *Histogram {
	if v, ok := s.hist.Load(k); ok {
		return v.(*Histogram)
	}
	v, _ := s.hist.LoadOrStore(k, new(Histogram))
	return v.(*Histogram)
}

// EachHistogram calls f with every histogram.
func (s *Set) EachHistogram(f func(Key, *Histogram)) {
	s.hist.Range(func(k, v any) bool {
		f(k.(Key), v.(*Histogram))
		return true
	})
}

// Add adds n to the counter k.
func (s *Set) Add(k Key, n int64) {
	if v, ok := s.m.Load(k); ok {
		v.(*atomic.Int64).Add(n)
		return
	}
	v, _ := s.m.LoadOrStore(k, new(atomic.Int64))
	v.(*atomic.Int64).Add(n)
}

// Get returns the value of counter k (0 when it was never added to).
func (s *Set) Get(k Key) int64 {
	if v, ok := s.m.Load(k); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// Snapshot is a point-in-time copy of a Set.
type Snapshot map[Key]int64

// Snapshot copies every counter.
func (s *Set) Snapshot() Snapshot {
	out := make(Snapshot)
	s.m.Range(func(k, v any) bool {
		out[k.(Key)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// Sum adds up every counter with the given name and scope, across dimensions.
func (s Snapshot) Sum(name, scope string) int64 {
	var n int64
	for k, v := range s {
		if k.Name == name && k.Scope == scope {
			n += v
		}
	}
	return n
}

// Keys returns the snapshot's keys in a stable order.
func (s Snapshot) Keys() []Key {
	keys := slices.Collect(maps.Keys(s))
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	return keys
}

// SubscriptionScope is the Scope of a subscription's counters.
func SubscriptionScope(topic, sub string) string { return topic + "/" + sub }

// SplitScope splits a Scope into its topic and subscription (empty for a topic's scope).
// Topic names cannot hold a slash, so the first one separates them.
func SplitScope(scope string) (topic, sub string) {
	topic, sub, _ = strings.Cut(scope, "/")
	return topic, sub
}
