package actors

import (
	"time"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// An event in a queue subscription and its life: available to receivers, locked by a
// receipt, delayed by a release, until it is acknowledged or ends (its delivery count or time
// to live spent, rejected, or not encodable); and the steps of that life reported for its
// delivery history.

type qstate uint8

const (
	qAvailable qstate = iota + 1 // waiting for a receiver; due at its time to live
	qLocked                      // received; due when its lock expires
	qDelayed                     // released with a delay; due when available again
)

// qitem is one event a queue subscription has taken in and not yet finished with.
type qitem struct {
	seq     uint64
	publish time.Time
	ev      *schemas.Event
	state   qstate
	parked  bool // a Parked record for it is in the store (it has been received)
	count   int  // deliveryCount: receipts so far
	first   time.Time
	receipt time.Time // of the current (or last) lock
	due     time.Time
	nonce   [nonceLen]byte // of the current lock; zero when not locked
	dueIdx  int
	seqIdx  int
}

// --- the life of an event ---

// makeAvailable offers it to receivers, unless it has been received maxDeliveryCount times or
// outlived its time to live: it then ends (eventgrid-behaviour.md §7.5), and makeAvailable
// returns the decision that ended it, for the caller's step of its history. It returns the
// zero Decision when the event is available.
func (q *queue) makeAvailable(it *qitem, now time.Time) retry.Decision {
	if it.count >= q.cfg.Policy.MaxAttempts() {
		dec := q.cfg.Policy.End(schemas.MaxDeliveryAttemptsExceeded)
		dec.Why.Rule, dec.Why.Attempts = retry.RuleMaxAttempts, it.count
		q.end(it, dec)
		return dec
	}
	if dec, expired := q.cfg.Policy.AtDue(it.publish, now); expired {
		q.end(it, dec)
		return dec
	}
	it.state, it.due = qAvailable, q.cfg.Policy.Deadline(it.publish)
	q.timed.push(it)
	q.avail.push(it)
	return retry.Decision{}
}

// delay keeps it invisible until at (a release's delay), or until its time to live ends.
func (q *queue) delay(it *qitem, at time.Time) {
	it.state, it.due = qDelayed, at
	if dl := q.cfg.Policy.Deadline(it.publish); dl.Before(at) {
		it.due = dl // the release delay is bounded by the time to live
	}
	q.timed.push(it)
}

// detach takes it out of the heaps it is in.
func (q *queue) detach(it *qitem) {
	if it.dueIdx >= 0 {
		q.timed.remove(it.dueIdx)
	}
	if it.seqIdx >= 0 {
		q.avail.remove(it.seqIdx)
	}
	if it.state == qLocked {
		q.locked--
		it.nonce = [nonceLen]byte{}
	}
	it.state = 0
}

// settle forgets an acknowledged or ended event.
func (q *queue) settle(it *qitem) {
	q.detach(it)
	if it.parked {
		q.pendingDel = append(q.pendingDel, it.seq)
		q.parked--
	}
	delete(q.items, it.seq)
}

// end finishes it without delivery as dec says: dead-lettered (in the namespace record shape,
// with the delivery count as deliveryattempts) or dropped, and counted either way.
func (q *queue) end(it *qitem, dec retry.Decision) {
	q.settle(it)
	reason := dec.Reason
	if dec.Action != retry.DeadLetter {
		q.cfg.Metrics.Add(metrics.Key{Name: metrics.DroppedEventCount, Scope: q.scope, Dim: string(reason)}, 1)
		q.log.Info("event dropped", logattr.EventID, it.ev.ID, "reason", string(reason), "deliveryCount", it.count)
		return
	}
	q.cfg.Metrics.Add(metrics.Key{Name: metrics.DeadLetteredCount, Scope: q.scope, Dim: string(reason)}, 1)
	d := &DeadLetter{
		Topic: q.cfg.Topic, Subscription: q.cfg.Name, TopicID: q.cfg.TopicID,
		InputSchema: q.cfg.InputSchema, DeliverySchema: q.cfg.DeliverySchema,
		Event: it.ev, Reason: reason, DeliveryAttempts: it.count,
		PublishTime: it.publish, LastAttemptTime: it.receipt,
	}
	if q.cfg.OnDeadLetter != nil {
		q.cfg.OnDeadLetter(d)
	}
	if q.cfg.Handoff == nil {
		return
	}
	rec, err := q.cfg.Handoff.Record(d)
	if err != nil {
		q.cfg.Metrics.Add(metrics.Key{Name: metrics.DroppedEventCount, Scope: q.scope, Dim: string(schemas.DeadLetterDestinationUnavailable)}, 1)
		q.log.Error("dead letter dropped: it cannot be put in the outbox", logattr.EventID, it.ev.ID, "err", err)
		return
	}
	q.pendingDL = append(q.pendingDL, rec)
}

// expire moves on every event whose due time has come: an available one has outlived its
// time to live, a locked one's lock expired (it is available again, and its next receipt
// counts one more delivery), a released one's delay is over.
func (q *queue) expire(now time.Time) {
	for q.timed.Len() > 0 && !q.timed.top().due.After(now) {
		it := q.timed.top()
		switch it.state {
		case qAvailable:
			dec, _ := q.cfg.Policy.AtDue(it.publish, now)
			if dec.Action == retry.Retry { // not expired after all (time scale rounding)
				dec = q.cfg.Policy.End(schemas.TimeToLiveExceeded)
			}
			q.end(it, dec)
			q.step(PullEnded, it, dec, now, time.Time{}, 1)
		case qLocked:
			q.detach(it)
			q.step(PullLockExpired, it, q.makeAvailable(it, now), now, time.Time{}, 1)
		default: // a release's delay is over
			q.detach(it)
			if dec := q.makeAvailable(it, now); dec.Action != 0 {
				q.step(PullEnded, it, dec, now, time.Time{}, 1)
			}
		}
	}
}

func (q *queue) record(it *qitem, nextDue time.Time) store.Parked {
	return store.Parked{
		Seq: it.seq, PublishTime: it.publish, Event: it.ev, Attempts: it.count,
		FirstAttempt: it.first, LastAttempt: it.receipt, NextDue: nextDue,
	}
}

// --- delivery history ---

// step adds event it to the turn's record of pull step k for its delivery history
// ([SubscriptionConfig.OnAttempt]), with dec the decision that ended it (the zero Decision
// when it goes on) and until the record's [AttemptRecord.Until]. Consecutive events of one
// step share a record; n is the room a new record makes for events. Nothing is recorded when
// nobody listens.
func (q *queue) step(k PullStep, it *qitem, dec retry.Decision, now, until time.Time, n int) {
	if q.cfg.OnAttempt == nil {
		return
	}
	r := q.steps
	if r == nil || r.Pull != k || !r.Until.Equal(until) || !r.Time.Equal(now) {
		q.report()
		r = newAttemptRecord(max(n, 1))
		r.Pull, r.Until, r.Time = k, until, now
		q.steps = r
	}
	r.EventIDs = append(r.EventIDs, it.ev.ID)
	r.Attempts = append(r.Attempts, it.count)
	r.Decisions = append(r.Decisions, dec)
	r.PublishTimes = append(r.PublishTimes, it.publish)
}

// report hands the turn's pull steps to [SubscriptionConfig.OnAttempt], which queues them
// for the history writer without blocking.
func (q *queue) report() {
	if r := q.steps; r != nil {
		q.steps = nil
		r.Topic, r.Subscription, r.Epoch = q.cfg.Topic, q.cfg.Name, q.epoch
		q.cfg.OnAttempt(r)
	}
}
