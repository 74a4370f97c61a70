package actors

import (
	"crypto/rand"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
)

// How a queue subscription hands out its events: receivers wait in order, each up to its
// MaxWait, and get the oldest available events, locked, once their receipt is in the store.

type waiter struct {
	id     uint64
	sender *actor.PID
	max    int
	// maxBytes and eventBytes are the receive's ReceiveEvents.MaxBytes and EventBytes.
	maxBytes, eventBytes int
	claim                *AnswerClaim // the receive's ReceiveEvents.Claim
	timer                *time.Timer
}

func (q *queue) addWaiter(sender *actor.PID, r *ReceiveEvents) {
	w := &waiter{id: r.ID, sender: sender, max: max(r.MaxEvents, 1), maxBytes: r.MaxBytes, eventBytes: r.EventBytes, claim: r.Claim}
	root, self, id := q.system.Root, q.self, r.ID
	w.timer = time.AfterFunc(max(r.MaxWait, 0), func() { root.Send(self, &receiveTimeout{id: id}) })
	q.waiters = append(q.waiters, w)
}

func (q *queue) dropWaiter(id uint64) *waiter {
	for i, w := range q.waiters {
		if w.id == id {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			return w
		}
	}
	return nil
}

// serve hands available events to the waiting receivers, oldest receiver first. Each event is
// locked, its delivery count raised and its receipt parked in the store; the receiver is
// answered once that write is durable. A receiver with a byte bound (ReceiveEvents.MaxBytes)
// gets the events that fit in it, at least one; when the next event alone does not fit, it
// is answered at once with an [EventTooLargeError] and the event is left as it is, so a
// bound no answer can meet costs no event a delivery.
//
// Each event handed out takes its bytes from the router's [AnswerBudget] first. When the
// budget cannot cover the next event, the receiver gets the events it has, or keeps waiting
// when it has none, and serving stops until bytes are given back ([answerBudgetFreed]): the
// event stays available, neither locked nor counted.
func (q *queue) serve(now time.Time) {
	for len(q.waiters) > 0 && q.avail.Len() > 0 {
		w := q.waiters[0]
		var out []LockedEvent
		var tooLarge *EventTooLargeError
		used := 0
		var held int64
		spent := false // the budget could not cover the next event
		for len(out) < w.max && q.avail.Len() > 0 {
			it := q.avail.top()
			body, err := q.encode(it.ev)
			if err != nil {
				q.detach(it)
				q.log.Warn("event cannot be encoded as a CloudEvent; ended", logattr.EventID, clip.String(it.ev.ID), "err", err)
				dec := q.cfg.Policy.End(schemas.UndeliverableDueToEventContent)
				q.end(it, dec)
				q.step(PullEnded, it, dec, now, time.Time{}, 1)
				continue
			}
			if w.maxBytes > 0 {
				size := len(body) + tokenChars + w.eventBytes
				if used+size > w.maxBytes {
					if len(out) == 0 {
						tooLarge = &EventTooLargeError{Size: size, MaxBytes: w.maxBytes}
					}
					break // the event stays first in line, for the next receiver
				}
				used += size
			}
			if !q.cfg.AnswerBudget.take(int64(len(body)), q.self) {
				spent = true
				break // the event stays first in line, until bytes are given back
			}
			held += int64(len(body))
			q.detach(it)
			it.count++
			if it.first.IsZero() {
				it.first = now
			}
			it.receipt = now
			if _, err := rand.Read(it.nonce[:]); err != nil {
				panic(fmt.Errorf("making a lock token: %w", err))
			}
			it.state, it.due = qLocked, now.Add(q.lock)
			q.timed.push(it)
			q.locked++
			if !it.parked {
				it.parked = true
				q.parked++
			}
			// NextDue now: should the process die, the event is available again at once.
			q.pendingPut = append(q.pendingPut, q.record(it, now))
			q.step(PullReceived, it, retry.Decision{}, now, it.due, min(w.max, q.avail.Len()+1))
			out = append(out, LockedEvent{LockToken: q.token(it), DeliveryCount: it.count, Event: body})
		}
		if tooLarge != nil {
			q.waiters = q.waiters[1:]
			w.timer.Stop()
			q.system.Root.Send(w.sender, tooLarge) // nothing to write first: nothing changed
			continue
		}
		if len(out) == 0 {
			if spent {
				return // the receivers wait for bytes to be given back
			}
			continue // every event looked at ended; the receiver keeps waiting
		}
		q.waiters = q.waiters[1:]
		w.timer.Stop()
		q.cfg.Metrics.Add(metrics.Key{Name: metrics.SuccessfulReceivedEvents, Scope: q.scope}, int64(len(out)))
		ans := &ReceivedEvents{Events: out}
		if b := q.cfg.AnswerBudget; b != nil {
			ans.Hold = &AnswerHold{b: b}
			ans.Hold.n.Store(held)
			w.claim.attach(ans.Hold) // a receiver that gave up gets it released
		}
		q.pendingAfter = append(q.pendingAfter, answer{w.sender, ans})
		if spent {
			return
		}
	}
}

// encode returns ev as a structured CloudEvent. An event published as a CloudEvent is its own
// bytes, shared, not copied: an answer of 100 events of 1 MB would otherwise hold a second
// copy of them until its consumer has read it ([LockedEvent.Event] is read-only).
func (q *queue) encode(ev *schemas.Event) ([]byte, error) {
	if q.cfg.InputSchema == schemas.CloudEvents {
		return ev.Raw, nil
	}
	body, _, err := schemas.EncodeBatchWith(nil, q.cfg.InputSchema, schemas.CloudEvents, q.cfg.TopicID, []*schemas.Event{ev}, q.cfg.Encode)
	return body, err
}
