package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/bufpool"
	"github.com/egridio/egrid/sinks"
)

// How a push subscription actor starts its attempts: its ready events go out in batches, as
// many at once as MaxInFlight and the endpoint's probation allow, each encoded and handed to
// the attempt runner, which calls the sink off the mailbox.

// maxInFlight bounds the attempts the subscription runs at once.
func (s *subscription) maxInFlight() int {
	if s.cfg.MaxInFlight > 0 {
		return s.cfg.MaxInFlight
	}
	return DefaultMaxInFlight
}

// holdFor reports whether ready events, fewer than a batch, wait for journal read r before
// they go: they wait for one read, the first one in flight when they would have gone, not for
// the reads after it. A catch-up reads the journal a window at a time, and a subscription whose
// filter matches few of its events may never fill a batch (at most a window of events is
// ready, and a batch of preferredBatchSizeInKilobytes alone holds up to 5 000): its ready
// events waited for the whole catch-up, however long, their time to live running.
func (s *subscription) holdFor(r uint64) bool {
	if s.heldFor == 0 {
		s.heldFor = r
	}
	return s.heldFor == r
}

// dispatch starts attempts while there is room and the endpoint's probation allows (SPEC
// §2.2):
//
//   - Healthy: batches go out until MaxInFlight are in flight.
//   - OnProbation: nothing is sent and ready events wait — or, when a client error caused the
//     probation, they end now without an attempt.
//   - AwaitingProbe: exactly one batch goes out, as the probe.
//   - ProbeInFlight: nothing is sent until the probe's result.
func (s *subscription) dispatch() {
	now := time.Now()
	maxInFlight := s.maxInFlight()
	if s.draining {
		maxInFlight = 0 // its owner stops it next: no new attempt (see [Drain])
	}
	switch s.probation.State(now) {
	case retry.OnProbation:
		if s.draining {
			break
		}
		if s.probation.ClientError() && s.cfg.Policy.EndsOnClientErrorProbation() {
			s.endReady(now)
		}
	case retry.ProbeInFlight:
	default:
		for len(s.ready) > 0 && len(s.batches) < maxInFlight {
			if s.reading != 0 && len(s.ready) < s.maxEvents && s.holdFor(s.reading) {
				break // a catch-up read is on its way: send full batches, not its first events alone
			}
			s.heldFor = 0
			b := s.nextBatch(now)
			if b == nil {
				continue // every event it looked at had outlived its time to live
			}
			if s.probation.State(now) == retry.AwaitingProbe {
				s.probation.ProbeStarted(now)
				b.probe = true
				if s.send(b) {
					break // one probe; its result decides
				}
				continue // none of it could be encoded: the next batch is the probe
			}
			s.send(b)
		}
	}
	if s.attempts != nil && len(s.batches) == 0 {
		s.attempts.release() // nothing in flight: no goroutine waits for the next attempt
	}
	s.armTimer(now)
}

// endReady ends every ready event without an attempt because the endpoint is on probation
// caused by a client error (SPEC §2.2): dead-lettered (or dropped) with lastDeliveryOutcome
// Probation and reason UndeliverableDueToProbationCausedByClientError. An event whose time to
// live has also passed ends with TimeToLiveExceeded instead, as it would at an attempt.
func (s *subscription) endReady(now time.Time) {
	for _, it := range s.ready {
		if dec, expired := s.cfg.Policy.AtDue(it.publish, now); expired {
			s.endUnattempted(it, dec, 0, now)
			continue
		}
		it.lastOutcome = schemas.Probation
		s.endUnattempted(it, s.cfg.Policy.End(schemas.UndeliverableDueToProbationCausedByClientError), schemas.Probation, now)
	}
	clear(s.ready)
	s.ready = s.ready[:0]
}

// nextBatch takes events off the front of the ready queue into a batch (SPEC §2.3): never more
// than the maximum count, never over the preferred size unless a single event is larger (it
// goes alone), never waiting to fill — what is ready goes. Retried events and new ones share
// the queue, so they are batched together, each keeping its own attempt count and time to
// live. An event whose time to live passed while it waited (behind a probation, or behind
// other batches) ends here without an attempt; nextBatch returns nil when that leaves the
// batch empty.
func (s *subscription) nextBatch(now time.Time) *batch {
	b := &batch{started: now}
	if s.maxEvents == 1 {
		b.items = b.one[:0]
	} else {
		b.items = make([]*item, 0, min(len(s.ready), s.maxEvents))
	}
	size := 0
	n := 0
	for n < len(s.ready) && len(b.items) < s.maxEvents {
		it := s.ready[n]
		if dec, expired := s.cfg.Policy.AtDue(it.publish, now); expired {
			n++
			s.endUnattempted(it, dec, 0, now)
			continue
		}
		sz := it.ev.Size()
		if len(b.items) > 0 && s.maxBytes > 0 && size+sz > s.maxBytes {
			break
		}
		b.items = append(b.items, it)
		size += sz
		n++
	}
	clear(s.ready[:n]) // drop the references so the backing array does not pin settled events
	s.ready = s.ready[n:]
	if len(b.items) == 0 {
		return nil
	}
	return b
}

// batching reports whether batching is on for the subscription (SPEC §2.3).
func (s *subscription) batching() bool {
	return s.cfg.MaxEventsPerBatch > 0 || s.cfg.PreferredBatchBytes > 0
}

// send starts the attempt of b off the mailbox and reports whether it did. Events that cannot
// be encoded end alone ([subscription.unsendable]) and the rest go back to the front of the
// ready queue; send then returns false.
func (s *subscription) send(b *batch) bool {
	events := b.ev1[:]
	if len(b.items) != 1 {
		events = make([]*schemas.Event, len(b.items))
	}
	count := 0
	for i, it := range b.items {
		events[i] = it.ev
		count = max(count, it.attempts)
	}
	enc := schemas.Encoding{In: s.cfg.InputSchema, Out: s.cfg.DeliverySchema, TopicID: s.cfg.TopicID, Batched: s.batching(), Options: s.cfg.Encode}
	size := len(events) + 1 // what the body takes when the schema is kept; a conversion grows it
	for _, ev := range events {
		size += len(ev.Raw)
	}
	buf := bufpool.Get(size)
	body, contentType, err := enc.AppendBatch(*buf, events)
	*buf = body
	if err != nil {
		bufpool.Put(buf)
		var ee *schemas.EncodeError
		if !errors.As(err, &ee) || ee.Index < 0 || ee.Index >= len(b.items) {
			// Refused at create time; reaching it is a wiring bug.
			panic(fmt.Errorf("encoding batch for %s: %w", s.scope, err))
		}
		s.unsendable(b, []sinks.EventFault{{Index: ee.Index, Err: ee}}, time.Now())
		return false
	}
	id := batchIDs.Add(1)
	if s.batches == nil {
		s.batches = make(map[uint64]*batch)
	}
	s.batches[id] = b
	for _, it := range b.items {
		it.state = stateInFlight
	}
	b.sb = sinks.Batch{
		Topic: s.cfg.Topic, Subscription: s.cfg.Name, Schema: s.cfg.DeliverySchema,
		Body: body, ContentType: contentType, Events: events, DeliveryCount: count,
		Headers: s.cfg.Headers, InputSchema: s.cfg.InputSchema, TopicID: s.cfg.TopicID,
		EncodeOptions: s.cfg.Encode,
	}
	b.body = buf
	b.done = attemptDone{id: id}
	if s.attempts == nil {
		timeout := s.cfg.Timeout
		if timeout <= 0 {
			timeout = sinks.DefaultTimeout
		}
		s.attempts = &attemptRunner{
			work: make(chan *batch, s.maxInFlight()), root: s.system.Root, self: s.self, sink: s.cfg.Sink,
			parent: s.context(), values: context.WithoutCancel(s.context()), timeout: timeout, wg: &s.wg, finished: &s.finished,
		}
	}
	s.attempts.start(b)
	return true
}
