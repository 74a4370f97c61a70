package metrics

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SubscriptionGauges is the delivery state a subscription actor publishes for readers outside
// it (the Prometheus collector): the actor stores the values at the end of each turn, readers
// load them at any time and never ask the actor. Each field is consistent on its own; two
// fields may come from neighbouring turns.
type SubscriptionGauges struct {
	// Backlog counts the events neither delivered nor ended (actors.Status.Backlog).
	Backlog atomic.Int64
	// InFlight counts the attempts running.
	InFlight atomic.Int64
	// Oldest is the publish time, in Unix nanoseconds, of the oldest event in memory not
	// delivered yet; 0 when there is none.
	Oldest atomic.Int64
	// Probation is the retry.ProbationState at the end of the latest turn, and ProbationUntil
	// when that period ends (Unix nanoseconds): a state of OnProbation whose Until has passed
	// reads as AwaitingProbe, since the actor moves on only at its next attempt.
	Probation      atomic.Uint32
	ProbationUntil atomic.Int64
}

// OldestAge is how long the oldest undelivered event has waited at now (0 when none).
func (g *SubscriptionGauges) OldestAge(now time.Time) time.Duration {
	o := g.Oldest.Load()
	if o == 0 {
		return 0
	}
	return max(0, now.Sub(time.Unix(0, o)))
}

// gaugeKey names a subscription in [Set]'s gauges.
type gaugeKey struct{ topic, sub string }

// PublishGauges registers a fresh gauge set for the subscription actor of topic/sub and
// returns it; it replaces the set of a previous incarnation of the actor.
func (s *Set) PublishGauges(topic, sub string) *SubscriptionGauges {
	g := new(SubscriptionGauges)
	s.gaugesMu.Lock()
	if s.gauges == nil {
		s.gauges = make(map[gaugeKey]*SubscriptionGauges)
	}
	s.gauges[gaugeKey{topic, sub}] = g
	s.gaugesMu.Unlock()
	return g
}

// RetireGauges removes g, unless a newer incarnation replaced it already. A stopping actor
// calls it, so a deleted subscription disappears from the gauges.
func (s *Set) RetireGauges(topic, sub string, g *SubscriptionGauges) {
	k := gaugeKey{topic, sub}
	s.gaugesMu.Lock()
	if s.gauges[k] == g {
		delete(s.gauges, k)
	}
	s.gaugesMu.Unlock()
}

// EachGauges calls f with the gauges of every running subscription actor. f runs without the
// set's lock (a collector may wait on its channel): the actors registered when EachGauges
// began, whatever starts or stops meanwhile.
func (s *Set) EachGauges(f func(topic, sub string, g *SubscriptionGauges)) {
	type entry struct {
		k gaugeKey
		g *SubscriptionGauges
	}
	s.gaugesMu.RLock()
	all := make([]entry, 0, len(s.gauges))
	for k, g := range s.gauges {
		all = append(all, entry{k, g})
	}
	s.gaugesMu.RUnlock()
	for _, e := range all {
		f(e.k.topic, e.k.sub, e.g)
	}
}

// SetOutbox records the number of dead letters waiting in the dead-letter outbox; the
// dead-letter actor calls it at the end of each turn.
func (s *Set) SetOutbox(n int) { s.outbox.Store(int64(n)) }

// Outbox returns the latest value given to [Set.SetOutbox].
func (s *Set) Outbox() int64 { return s.outbox.Load() }

// Probation states of [SubscriptionGauges.Probation], the values of retry.ProbationState.
const (
	ProbationHealthy       = 0
	ProbationOnProbation   = 1
	ProbationAwaitingProbe = 2
	ProbationProbeInFlight = 3
)

// ProbationAt returns the probation state at now: the published state, except that a
// probation period that ended before now reads as awaiting its probe.
func (g *SubscriptionGauges) ProbationAt(now time.Time) uint32 {
	st := g.Probation.Load()
	if st == ProbationOnProbation && !now.Before(time.Unix(0, g.ProbationUntil.Load())) {
		return ProbationAwaitingProbe
	}
	return st
}

// ForgetSubscription drops every counter and histogram of the subscription topic/sub (its
// scope, [SubscriptionScope], matched without regard to case as names are), so that a
// deleted subscription leaves nothing behind in [Set.Snapshot], [Set.EachHistogram] or the
// metrics read from them. Call it once the subscription's actor has stopped. It is guarded as
// [Set.RetireGauges] is: while an actor of topic/sub has gauges published — a newer
// incarnation, created again under the name since — it drops nothing and returns false, so
// the counters of the new subscription are never reset. A counter added after it ran (a late
// count of the deleted subscription) appears again; the next deletion of the name drops it.
func (s *Set) ForgetSubscription(topic, sub string) bool {
	s.gaugesMu.Lock() // held across the drop: an incarnation starting now publishes after it
	defer s.gaugesMu.Unlock()
	for k := range s.gauges {
		if strings.EqualFold(k.topic, topic) && strings.EqualFold(k.sub, sub) {
			return false
		}
	}
	s.forget(func(scope string) bool {
		t, sb := SplitScope(scope)
		return sb != "" && strings.EqualFold(t, topic) && strings.EqualFold(sb, sub)
	})
	return true
}

// ForgetTopic drops every counter and histogram of topic: its own and those of every one of
// its subscriptions. Call it once the topic's actors have stopped. Guarded as
// [Set.ForgetSubscription]: while any actor of a subscription of topic has gauges published
// (the topic created again since), it drops nothing and returns false.
func (s *Set) ForgetTopic(topic string) bool {
	s.gaugesMu.Lock()
	defer s.gaugesMu.Unlock()
	for k := range s.gauges {
		if strings.EqualFold(k.topic, topic) {
			return false
		}
	}
	s.forget(func(scope string) bool {
		t, _ := SplitScope(scope)
		return strings.EqualFold(t, topic)
	})
	return true
}

// forget deletes the counters and histograms whose scope match reports.
func (s *Set) forget(match func(scope string) bool) {
	for _, m := range []*sync.Map{&s.m, &s.hist} {
		m.Range(func(k, _ any) bool {
			if match(k.(Key).Scope) {
				m.Delete(k)
			}
			return true
		})
	}
}
