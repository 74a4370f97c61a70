package actors

import (
	"container/heap"
	"errors"
	"time"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// What becomes of a push subscription's events after an attempt: each is settled, parked for
// its next attempt or ended (dead-lettered or dropped), and the attempt is recorded for the
// events' history. Events that come due and end without an attempt, and the attempts a stop
// cuts, are recorded the same way.

// finish applies the outcome of one attempt to every event of its batch.
func (s *subscription) finish(d *attemptDone) {
	b, ok := s.batches[d.id]
	if !ok {
		return // from before a restart
	}
	delete(s.batches, d.id)
	now := time.Now()
	m := s.cfg.Metrics
	s.makeHistograms()
	if s.procHist != nil {
		s.procHist.Observe(d.duration)
	}
	var rec *AttemptRecord // nil when nobody listens
	if s.cfg.OnAttempt != nil {
		rec = newAttemptRecord(len(b.items))
		rec.Topic, rec.Subscription, rec.Time, rec.Duration, rec.Probe = s.cfg.Topic, s.cfg.Name, b.started, d.duration, b.probe
	}
	if d.err == nil {
		if rec != nil {
			rec.Outcome, rec.StatusCode = schemas.Delivered, d.status
		}
		if b.probe {
			s.log.Info("probe delivered; probation over", "cause", s.probation.Cause().String())
		}
		s.probation.Succeeded()
		m.Add(metrics.Key{Name: metrics.DeliverySuccessCount, Scope: s.scope}, int64(len(b.items)))
		for _, it := range b.items {
			it.attempts++
			if rec != nil {
				rec.EventIDs = append(rec.EventIDs, it.ev.ID)
				rec.Attempts = append(rec.Attempts, it.attempts)
				rec.Decisions = append(rec.Decisions, retry.Decision{})
				rec.PublishTimes = append(rec.PublishTimes, it.publish)
				rec.noteCut(it)
			}
			if s.latHist != nil {
				s.latHist.Observe(now.Sub(it.publish))
			}
			s.settle(it)
		}
		s.record(rec)
		return
	}
	var ue *sinks.UnsendableError
	if errors.As(d.err, &ue) && s.unsendable(b, ue.Faults, now) {
		return
	}
	de := sinks.AsDeliveryError(d.err)
	if rec != nil {
		rec.Outcome, rec.StatusCode, rec.Detail = de.Outcome, de.StatusCode, de.Error()
	}
	// DeliveryAttemptFailCount counts every failed attempt of every event, by outcome.
	m.Add(metrics.Key{Name: metrics.DeliveryAttemptFailCount, Scope: s.scope, Dim: de.Outcome.String()}, int64(len(b.items)))
	// While the probe is out, only the probe's result moves probation on: a batch that was
	// sent before the probation began reports old news about the endpoint.
	if b.probe || s.probation.State(now) != retry.ProbeInFlight {
		wasHealthy := s.probation.State(now) == retry.Healthy
		s.probation.Failed(de.Outcome, now, s.cfg.Policy.TimeScale)
		switch {
		case wasHealthy && s.probation.State(now) != retry.Healthy:
			s.log.Warn("endpoint on probation", "cause", s.probation.Cause().String(), "until", s.probation.Until())
		case b.probe && retry.EventsFault(de.Outcome):
			s.log.Info("probe answered, refusing its events as their own fault; probation over", "outcome", de.Outcome.String(), "status", de.StatusCode)
		case b.probe:
			s.log.Warn("probe failed; endpoint back on probation", "outcome", de.Outcome.String(), "until", s.probation.Until())
		}
	}
	f := retry.Failure{Outcome: de.Outcome, StatusCode: de.StatusCode, RetryAfter: de.RetryAfter}
	for _, it := range b.items {
		it.attempts++
		if it.firstAttempt.IsZero() {
			it.firstAttempt = b.started
		}
		it.lastAttempt = b.started
		it.lastOutcome, it.lastStatus = de.Outcome, de.StatusCode
		dec := s.cfg.Policy.AfterFailure(f, it.attempts, it.ev.ID, it.publish, now)
		if rec != nil {
			rec.EventIDs = append(rec.EventIDs, it.ev.ID)
			rec.Attempts = append(rec.Attempts, it.attempts)
			rec.Decisions = append(rec.Decisions, dec)
			rec.PublishTimes = append(rec.PublishTimes, it.publish)
			rec.noteCut(it)
		}
		if dec.Action == retry.Retry {
			if !it.parked {
				heap.Push(&s.parkedSeq, it)
			}
			it.state, it.due, it.parked = stateWaiting, dec.At, true
			heap.Push(&s.waiting, it)
			s.pendingPut = append(s.pendingPut, s.parkedRecord(it))
			continue
		}
		s.end(it, dec)
	}
	s.record(rec)
}

// newAttemptRecord returns a record with room for n events; a record of one event is a
// single allocation (the per-event slices point into it).
func newAttemptRecord(n int) *AttemptRecord {
	if n == 1 {
		r := &struct {
			rec     AttemptRecord
			id      [1]string
			attempt [1]int
			dec     [1]retry.Decision
			publish [1]time.Time
		}{}
		r.rec.EventIDs, r.rec.Attempts, r.rec.Decisions, r.rec.PublishTimes = r.id[:0], r.attempt[:0], r.dec[:0], r.publish[:0]
		return &r.rec
	}
	return &AttemptRecord{
		EventIDs: make([]string, 0, n), Attempts: make([]int, 0, n),
		Decisions: make([]retry.Decision, 0, n), PublishTimes: make([]time.Time, 0, n),
	}
}

// noteCut sets [AttemptRecord.AfterCut] for the event just added to r when an earlier attempt
// of it was cut before it had a counted one. cutInFlight calls it before it marks the event
// cut, so the record of a first cut is not taken for a continuation. Only such events
// allocate the slice.
func (r *AttemptRecord) noteCut(it *item) {
	if !it.cut || it.attempts > 1 {
		return
	}
	i := len(r.EventIDs) - 1
	if len(r.AfterCut) <= i {
		r.AfterCut = append(r.AfterCut, make([]bool, i+1-len(r.AfterCut))...)
	}
	r.AfterCut[i] = true
}

func (s *subscription) record(rec *AttemptRecord) {
	if rec != nil && s.cfg.OnAttempt != nil {
		rec.Epoch = s.epoch
		s.cfg.OnAttempt(rec)
	}
}

func (s *subscription) parkedRecord(it *item) store.Parked {
	return store.Parked{
		Seq: it.seq, PublishTime: it.publish, Event: it.ev, Attempts: it.attempts,
		FirstAttempt: it.firstAttempt, LastAttempt: it.lastAttempt, NextDue: it.due,
		LastOutcome: it.lastOutcome, LastStatus: it.lastStatus,
	}
}

// settle forgets a delivered or ended event.
func (s *subscription) settle(it *item) {
	it.state = stateEnded
	if it.parked {
		s.pendingDel = append(s.pendingDel, it.seq)
		heap.Remove(&s.parkedSeq, it.seqIndex)
	}
	delete(s.items, it.seq)
}

// endUnattempted ends an event that came due but was not attempted (its time to live had
// passed, or a client-error probation was in force) and reports it in a NoAttempt
// [AttemptRecord], so the event's history shows when and why it ended. An event that never had
// an attempt and ends while the endpoint is not healthy was held back by the probation, so
// its lastDeliveryOutcome is Probation; otherwise it keeps its last attempt's outcome, which
// for an event whose only attempts a stop cut is theirs, Canceled (with 0 attempts: the cut
// ones are not counted).
func (s *subscription) endUnattempted(it *item, dec retry.Decision, outcome schemas.Outcome, now time.Time) {
	if it.attempts == 0 && !it.cut && s.probation.State(now) != retry.Healthy {
		it.lastOutcome = schemas.Probation
	}
	s.end(it, dec)
	rec := &AttemptRecord{
		Topic: s.cfg.Topic, Subscription: s.cfg.Name, Time: now, Outcome: outcome, NoAttempt: true,
		EventIDs: []string{it.ev.ID}, Attempts: []int{it.attempts}, Decisions: []retry.Decision{dec},
		PublishTimes: []time.Time{it.publish},
	}
	rec.noteCut(it)
	s.record(rec)
}

// end finishes an event without delivery as dec says: dead-lettered (handed to OnDeadLetter)
// or dropped, and counted either way (SPEC §5: nothing ends silently).
func (s *subscription) end(it *item, dec retry.Decision) {
	if it.state == stateWaiting {
		heap.Remove(&s.waiting, it.heapIndex)
	}
	s.settle(it)
	reason := dec.Reason
	if dec.Action == retry.DeadLetter {
		s.cfg.Metrics.Add(metrics.Key{Name: metrics.DeadLetteredCount, Scope: s.scope, Dim: string(reason)}, 1)
		d := &DeadLetter{
			Topic: s.cfg.Topic, Subscription: s.cfg.Name, TopicID: s.cfg.TopicID,
			InputSchema: s.cfg.InputSchema, DeliverySchema: s.cfg.DeliverySchema,
			Event: it.ev, Reason: reason, DeliveryAttempts: it.attempts,
			LastOutcome: it.lastOutcome, LastHTTPStatus: it.lastStatus,
			PublishTime: it.publish, LastAttemptTime: it.lastAttempt,
		}
		if s.cfg.OnDeadLetter != nil {
			s.cfg.OnDeadLetter(d)
		}
		s.handOff(d)
		return
	}
	s.cfg.Metrics.Add(metrics.Key{Name: metrics.DroppedEventCount, Scope: s.scope, Dim: string(reason)}, 1)
	s.log.Info("event dropped", logattr.EventID, it.ev.ID, "reason", string(reason), "attempts", it.attempts)
}

// cutInFlight parks the events of the attempts still in flight as the actor stops, whose
// results it will not see: due now (Canceled: its answer is unknown, and the event may have
// been delivered). The last state update then holds them, and moves the cursor past them to
// the oldest event neither settled nor parked, so the next incarnation attempts them again
// and not the events settled after them. A cut attempt does not count against
// maxDeliveryAttempts: the stop ended it, not the endpoint nor the event, so the event's next
// attempt has the cut one's number, and an event cut in its last allowed attempt still has
// that attempt (as after a crash, which records nothing of the attempt in flight). Each cut
// attempt is reported ([AttemptRecord], outcome Canceled, rule [retry.RuleStopped]), so the
// event's history says what became of it.
func (s *subscription) cutInFlight(now time.Time) {
	for _, b := range s.batches {
		var rec *AttemptRecord
		if s.cfg.OnAttempt != nil {
			rec = newAttemptRecord(len(b.items))
			rec.Topic, rec.Subscription, rec.Time, rec.Duration, rec.Probe = s.cfg.Topic, s.cfg.Name, b.started, now.Sub(b.started), b.probe
			rec.Outcome, rec.Detail = schemas.Canceled, "the subscription stopped before the destination answered"
		}
		dec := retry.Decision{Action: retry.Retry, At: now, Why: retry.Explanation{Rule: retry.RuleStopped, Outcome: schemas.Canceled}}
		for _, it := range b.items {
			if it.firstAttempt.IsZero() {
				it.firstAttempt = b.started
			}
			it.lastAttempt = b.started
			it.lastOutcome, it.lastStatus = schemas.Canceled, 0
			it.state, it.due = stateWaiting, now
			if !it.parked {
				heap.Push(&s.parkedSeq, it)
				it.parked = true
			}
			s.pendingPut = append(s.pendingPut, s.parkedRecord(it))
			if rec != nil {
				dec.Why.Attempts = it.attempts
				rec.EventIDs = append(rec.EventIDs, it.ev.ID)
				rec.Attempts = append(rec.Attempts, it.attempts+1)
				rec.Decisions = append(rec.Decisions, dec)
				rec.PublishTimes = append(rec.PublishTimes, it.publish)
				rec.noteCut(it) // before it.cut is set: only an earlier cut makes this one a continuation
			}
			if it.attempts == 0 {
				it.cut = true
			}
		}
		s.record(rec)
	}
}
