package actors

import (
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// DeadLetterHandoff takes the events a subscription ends without delivery into the dead-letter
// outbox atomically with their settlement ([SubscriptionConfig.Handoff]): the subscription
// puts the records Record returns in the same [store.Update] that moves its cursor past the
// events (or forgets them as parked), so after a crash an ended event is either settled and in
// the outbox, or neither and attempted again — never settled and lost.
//
// Record and Handed are called from the subscription actor or its state writer, possibly
// concurrently for different subscriptions; neither may block.
type DeadLetterHandoff interface {
	// Record encodes d as an outbox record with a fresh id.
	Record(d *DeadLetter) (store.DeadLetterRecord, error)
	// Handed is told the records once the update holding them is durable in the store.
	Handed(recs []store.DeadLetterRecord)
}

// handOff queues d's outbox record for the next update.
func (s *subscription) handOff(d *DeadLetter) {
	if s.cfg.Handoff == nil {
		return
	}
	rec, err := s.cfg.Handoff.Record(d)
	if err != nil {
		// Only an event that cannot be encoded gets here; retrying cannot help.
		s.cfg.Metrics.Add(metrics.Key{Name: metrics.DroppedEventCount, Scope: s.scope, Dim: string(schemas.DeadLetterDestinationUnavailable)}, 1)
		s.log.Error("dead letter dropped: it cannot be put in the outbox", logattr.EventID, d.Event.ID, "err", err)
		return
	}
	s.pendingDL = append(s.pendingDL, rec)
}

// handed returns what tells the hand-off that recs are in the store, nil when there are none.
// Records whose write failed are not handed: they are not in the store.
func (s *subscription) handed(recs []store.DeadLetterRecord) func(error) {
	if len(recs) == 0 || s.cfg.Handoff == nil {
		return nil
	}
	h := s.cfg.Handoff
	return func(err error) {
		if err == nil {
			h.Handed(recs)
		}
	}
}
