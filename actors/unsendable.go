package actors

import (
	"time"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
)

// unsendable handles a batch that was not sent because some of its events can never be sent
// (SPEC §8): each of those ends alone, as router/retry decides for an unsendable event
// (UndeliverableDueToEventContent), after an attempt that failed with GenericError; the
// others go back to the front of the ready queue, in order, without an attempt counted, to be
// sent again at once. Nothing reached the endpoint, so its probation is not touched, except
// that a probe that was not sent is no probe. It returns false, changing nothing, when faults
// do not name events of b (a sink's bug: the failure is then handled as a GenericError).
func (s *subscription) unsendable(b *batch, faults []sinks.EventFault, now time.Time) bool {
	faulty := make(map[int]error, len(faults))
	for _, f := range faults {
		if f.Index < 0 || f.Index >= len(b.items) || f.Err == nil {
			return false
		}
		faulty[f.Index] = f.Err
	}
	if len(faulty) == 0 {
		return false
	}
	if b.probe {
		s.probation.ProbeAbandoned()
	}
	s.cfg.Metrics.Add(metrics.Key{Name: metrics.DeliveryAttemptFailCount, Scope: s.scope, Dim: schemas.GenericError.String()}, int64(len(faulty)))
	rec := &AttemptRecord{
		Topic: s.cfg.Topic, Subscription: s.cfg.Name, Time: b.started, Outcome: schemas.GenericError, Probe: b.probe,
		Detail: "the event cannot be sent",
	}
	back := make([]*item, 0, len(b.items)-len(faulty))
	for i, it := range b.items {
		err, bad := faulty[i]
		if !bad {
			it.state = stateReady
			back = append(back, it)
			continue
		}
		it.attempts++
		if it.firstAttempt.IsZero() {
			it.firstAttempt = b.started
		}
		it.lastAttempt = b.started
		it.lastOutcome, it.lastStatus = schemas.GenericError, 0
		dec := s.cfg.Policy.AfterFailure(retry.Failure{Outcome: schemas.GenericError, Unsendable: true}, it.attempts, it.ev.ID, it.publish, now)
		// The id is shortened: it may be 100 KB when it was stored before publish validation
		// refused such ids.
		s.log.Warn("event can never be sent; ended without counting against the endpoint",
			logattr.EventID, clip.String(it.ev.ID), "seq", it.seq, "decision", dec.String(), "err", err)
		rec.EventIDs = append(rec.EventIDs, it.ev.ID)
		rec.Attempts = append(rec.Attempts, it.attempts)
		rec.Decisions = append(rec.Decisions, dec)
		rec.PublishTimes = append(rec.PublishTimes, it.publish)
		rec.noteCut(it)
		it.state = stateInFlight // not waiting: end must not look for it in the due heap
		s.end(it, dec)
	}
	s.ready = append(back, s.ready...)
	s.record(rec)
	return true
}
