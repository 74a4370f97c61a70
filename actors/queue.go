package actors

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
)

// QueueConfig makes a subscription a queue (pull) subscription ([SubscriptionConfig.Queue]):
// consumers long-poll it for events and settle each by its lock token
// (eventgrid-behaviour.md §9). The subscription's Policy gives maxDeliveryCount
// (MaxDeliveryAttempts), the time to live and whether ended events are dead-lettered.
type QueueConfig struct {
	// LockDuration is how long a received event stays invisible unless settled
	// (receiveLockDurationInSeconds); 0 means [DefaultLockDuration]. The policy's TimeScale
	// divides it, like every policy delay.
	LockDuration time.Duration
}

// Queue subscription limits (eventgrid-behaviour.md §9).
const (
	// DefaultLockDuration is receiveLockDurationInSeconds' default.
	DefaultLockDuration = 60 * time.Second
	// MaxLockRenewal is how long after its receipt a lock may still be renewed.
	MaxLockRenewal = time.Hour
)

// QueueProps returns the props of a queue subscription actor: the actor that owns one queue
// subscription's events, their locks and delivery counts. It is a child of the topic actor,
// supervised like a push subscription actor, fed by the same [Deliver] messages, and reads the
// journal from the subscription's cursor when it falls behind, as a push subscription does.
// It reads its stored state off the mailbox at start, as a push subscription does (sharing the
// router's load slots): meanwhile it answers Stop, receives wait, Delivers are kept (bounded,
// see [earlyMessages]) and handled once the state is in, a status request waits for the load
// up to statusWait and is then answered with its loading status ([Status.Loading]; see
// [boot.hold]), and a settlement is answered at once: no lock is held
// before the load (locks live in memory, and this incarnation has handed none out), so every
// token fails as it would after it, TokenLost (BadToken for a malformed one or another
// subscription's).
//
// Durability: a received event is parked in the store with its delivery count (Attempts) and
// the cursor moves past it; an acknowledged one is deleted, a released one parked with its
// delay as NextDue, a rejected or ended one settled together with its dead letter. Each of
// these writes is synced ([store.Update.Sync]) before the consumer is answered, off the
// mailbox through the topic's [StateWriter]. Locks live in memory: after a restart every
// event received and not settled is available again at once, keeping its delivery count,
// and the lock tokens handed out before fail with TokenLost. Without a
// [SubscriptionConfig.Writer] the actor runs a writer of its own, closed when it stops. A
// state write the store fences ([store.ErrFenced]: another node took the subscription over)
// stops the actor for good, as it stops a push subscription's ([SubscriptionConfig.OnFenced]),
// instead of restarting it over the new owner's state.
//
// Each step of an event's pull delivery — a receipt, a settlement, a lock renewed or expired,
// an end — goes to [SubscriptionConfig.OnAttempt] as a record with [AttemptRecord.Pull] set,
// reported in the turn that took the step, before its answer goes out.
func QueueProps(cfg *SubscriptionConfig) *actor.Props {
	return queueProps(cfg, new(stopRegistry))
}

// queueProps is QueueProps with the registry of stop work (see subscriptionProps).
func queueProps(cfg *SubscriptionConfig, stops *stopRegistry) *actor.Props {
	mustShare(cfg)
	return actor.PropsFromProducer(func() actor.Actor { return &queue{cfg: cfg, stops: stops} }, subscriptionMailbox)
}

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

type waiter struct {
	id     uint64
	sender *actor.PID
	max    int
	// maxBytes and eventBytes are the receive's ReceiveEvents.MaxBytes and EventBytes.
	maxBytes, eventBytes int
	timer                *time.Timer
}

// queue is the queue subscription actor. All fields are owned by Receive.
type queue struct {
	cfg    *SubscriptionConfig
	stops  *stopRegistry // the stop work of the subscription's actors (queueProps)
	self   *actor.PID
	system *actor.ActorSystem
	log    *slog.Logger
	scope  string
	writer *StateWriter
	owns   bool // the writer is this incarnation's own (no SubscriptionConfig.Writer)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// boot is the state load in flight (nil once loaded; see [startLoad]). Meanwhile receives
	// wait (their MaxWait runs), Delivers are kept for after it, status requests for up to
	// statusWait, and settlements are answered at once (see [QueueProps]).
	boot *boot
	life uint64 // this incarnation's load id ([boot.id]): its writes' failures name it ([writeFailed])

	tag         [tagLen]byte
	lock, renew time.Duration // scaled by the policy's TimeScale

	cursor uint64
	// journalFeed is where the queue stands in its topic's journal (next, head, behind,
	// stalled, the read in flight).
	journalFeed
	epoch uint64 // the loaded subscription's epoch, set in each update (see subscription.epoch)

	items  map[uint64]*qitem
	order  []uint64 // taken-in sequence numbers, oldest first (settled ones dropped: compactOrder)
	front  int      // order[:front] are all parked or gone
	avail  qheap    // available events, by sequence number
	timed  qheap    // events with a due time (byDue): available (its time to live), locked, delayed
	locked int
	parked int

	waiters []*waiter

	timer    *time.Timer
	timerAt  time.Time
	timerGen uint64

	pendingPut   []store.Parked
	pendingDel   []uint64
	pendingDL    []store.DeadLetterRecord
	pendingAfter []answer // sent once the turn's update is in the store
	fenced       bool     // a state write was fenced: the actor is stopping

	steps *AttemptRecord // the turn's pull steps not yet reported (see [queue.step])

	gauges *metrics.SubscriptionGauges
}

// answer is a consumer's answer that waits for a state write.
type answer struct {
	to  *actor.PID
	msg any
}

// Receive implements actor.Actor.
func (q *queue) Receive(c actor.Context) {
	if d, ok := c.Message().(*Drain); ok {
		d.done() // a queue makes no attempts: its consumers' receives end with the stop
		return
	}
	if q.fenced {
		switch c.Message().(type) {
		case *actor.Restarting, *actor.Stopping:
		case *ReceiveEvents, *SettleEvents:
			if c.Sender() != nil { // told at once, not left to its own timeout
				c.Send(c.Sender(), unsaved(q.cfg.Name, q.cfg.Topic, store.ErrFenced))
			}
			return
		default:
			return // stopping: nothing more is handed out, answered from memory or written
		}
	}
	if q.boot != nil {
		if q.boot.early.keep(c) {
			return
		}
		switch msg := c.Message().(type) {
		case *GetStatus, *EndProbation:
			// Kept for the load's first statusWait (see [boot.hold]), then answered with the
			// loading status.
			if !q.boot.hold(msg, c.Sender()) && c.Sender() != nil {
				c.Send(c.Sender(), q.status())
			}
			return
		case *slowLoad:
			if msg.id == q.boot.id {
				for _, r := range q.boot.overdue() {
					c.Send(r.sender, q.status())
				}
			}
			return
		}
	}
	switch msg := c.Message().(type) {
	case *slowLoad: // the load ended within statusWait
		return
	case *actor.Started:
		q.start(c)
		return // nothing to serve before the state is in
	case *stateLoaded:
		waiting := q.loadWaiting()
		if !q.applyLoad(msg) {
			return
		}
		for _, r := range waiting {
			c.Send(r.sender, q.status())
		}
	case *actor.Restarting, *actor.Stopping:
		if q.boot != nil {
			q.boot.abandon(c, q.cfg.Topic, q.cfg.Name)
		}
		q.stop()
		return
	case *writeFailed:
		q.writeFailed(msg)
		return
	default:
		q.handle(c, msg, c.Sender())
	}
	if q.boot != nil {
		return // loading: receivers wait for the state
	}
	now := time.Now()
	q.expire(now)
	q.serve(now)
	q.fill()
	q.report() // before the answers, which go out once the write is in
	q.persist()
	q.armTimer(now)
	q.publishGauges()
}

// handle applies one message from sender, answered by a send. While the state loads it gets
// the messages early.keep does not keep: receives wait, settlements and status requests are
// answered at once (see [QueueProps]).
func (q *queue) handle(c actor.Context, m any, sender *actor.PID) {
	switch msg := m.(type) {
	case *Deliver:
		q.takeIn(msg)
	case *journalRead:
		q.applyRead(msg)
	case *wake:
		if msg.gen != q.timerGen {
			return
		}
		q.timerAt = time.Time{}
	case *ReceiveEvents:
		if sender == nil {
			return // sent, not asked: nobody to hand the events to, so none is locked
		}
		q.addWaiter(sender, msg)
	case *receiveTimeout:
		if w := q.dropWaiter(msg.id); w != nil {
			c.Send(w.sender, &ReceivedEvents{})
		}
	case *CancelReceive:
		if w := q.dropWaiter(msg.ID); w != nil {
			w.timer.Stop()
			c.Send(w.sender, &ReceivedEvents{}) // frees the caller's future at once
		}
	case *SettleEvents:
		q.expire(time.Now())
		q.settleEvents(sender, msg)
	case *GetStatus, *EndProbation: // a queue has no endpoint, hence no probation
		if sender != nil {
			c.Send(sender, q.status())
		}
	}
}

// applyLoad takes in the stored state, then the Delivers kept meanwhile, in order. It reports
// whether the load was this incarnation's.
func (q *queue) applyLoad(m *stateLoaded) bool {
	if q.boot == nil || m.id != q.boot.id {
		return false // from before a restart
	}
	if m.err != nil {
		panic(m.err)
	}
	early := &q.boot.early
	q.boot.end()
	q.boot = nil
	st := m.state
	q.epoch = st.Epoch
	if q.cfg.OnLoaded != nil {
		q.cfg.OnLoaded(st.Epoch)
	}
	q.cursor = st.Cursor
	q.loadedAt(st.Cursor, m.head)
	now := time.Now()
	for _, p := range st.Parked {
		it := &qitem{
			seq: p.Seq, publish: p.PublishTime, ev: p.Event, parked: true, count: p.Attempts,
			first: p.FirstAttempt, receipt: p.LastAttempt, dueIdx: -1, seqIdx: -1,
		}
		q.items[p.Seq] = it
		q.order = append(q.order, p.Seq)
		q.parked++
		if p.NextDue.After(now) {
			q.delay(it, p.NextDue)
			continue
		}
		// Its lock, if it had one, died with the last process.
		if dec := q.makeAvailable(it, now); dec.Action != 0 {
			q.step(PullEnded, it, dec, now, time.Time{}, 1)
		}
	}
	q.front = len(q.order)
	for _, d := range early.delivers {
		q.takeIn(d)
	}
	q.announce(early.through)
	return true
}

func (q *queue) start(c actor.Context) {
	q.self, q.system = c.Self(), c.ActorSystem()
	q.scope = metrics.SubscriptionScope(q.cfg.Topic, q.cfg.Name)
	q.log = q.cfg.Logger
	if q.log == nil {
		q.log = slog.New(slog.DiscardHandler)
	}
	q.log = q.log.With(logattr.Topic, q.cfg.Topic, logattr.Subscription, q.cfg.Name)
	if q.cfg.Metrics != nil && !q.cfg.NoGauges {
		q.gauges = q.cfg.Metrics.PublishGauges(q.cfg.Topic, q.cfg.Name)
	}
	q.writer = q.cfg.Writer
	if q.writer == nil {
		q.writer, q.owns = NewStateWriter(q.cfg.Store, q.cfg.Topic), true
	}
	q.tag = tokenTag(q.cfg.Topic, q.cfg.Name)
	lock := DefaultLockDuration
	if q.cfg.Queue != nil && q.cfg.Queue.LockDuration > 0 {
		lock = q.cfg.Queue.LockDuration
	}
	q.lock, q.renew = q.scale(lock), q.scale(MaxLockRenewal)
	q.ctx, q.cancel = context.WithCancel(context.Background())
	q.items = make(map[uint64]*qitem)
	q.avail, q.timed = qheap{}, qheap{byDue: true}

	q.boot = startLoad(q.cfg, q.stops, true, &q.wg, q.system.Root, q.self)
	q.life = q.boot.id
}

func (q *queue) scale(d time.Duration) time.Duration {
	if ts := q.cfg.Policy.TimeScale; ts > 0 && ts != 1 {
		return time.Duration(float64(d) / ts)
	}
	return d
}

func (q *queue) stop() {
	if q.gauges != nil {
		q.cfg.Metrics.RetireGauges(q.cfg.Topic, q.cfg.Name, q.gauges)
	}
	if q.cancel != nil {
		q.cancel()
	}
	if q.boot != nil {
		q.boot.end()
	}
	if q.timer != nil {
		q.timer.Stop()
	}
	q.timerGen++
	root := q.system.Root
	for _, w := range q.waiters {
		w.timer.Stop()
		root.Send(w.sender, &ReceivedEvents{}) // nothing for them from this incarnation
	}
	q.waiters = nil
	// The waits run off the mailbox (stopwork.go); answers waiting for their write go out
	// once it is in the store.
	stopWork{
		wg: &q.wg, grace: q.cfg.stopGrace(),
		abandoned: "a journal or state read did not return after its context was cancelled; abandoning it",
		writer:    q.writer, topic: q.cfg.Topic, sub: q.cfg.Name, epoch: q.epoch, owns: q.owns, log: q.log,
		late: "the queue's last state write did not finish in time; stopping without waiting for it (its answers go out if it lands; unanswered receipts are received again)",
	}.start(q.stops, q.cfg.Stops)
}

// --- taking events in (the journal window, as a push subscription keeps it) ---

func (q *queue) window() int {
	if q.cfg.Window > 0 {
		return q.cfg.Window
	}
	return DefaultWindow
}

// room is how many more events the queue may take in: a window of events not yet received,
// and at most maxParkedFactor windows in all.
func (q *queue) room() int {
	return min(q.window()-(len(q.items)-q.parked), maxParkedFactor*q.window()-len(q.items))
}

// takeIn accepts the entries of a Deliver that the queue has not seen yet, as far as its room
// allows.
func (q *queue) takeIn(d *Deliver) {
	now := time.Now()
	q.deliver(d, q.room, func(e store.Entry) { q.add(e, now) })
}

// fill starts a journal read off the mailbox while the queue is behind and has room; its
// entries come back as a [journalRead]. After an empty read it waits for the next Deliver.
func (q *queue) fill() {
	if !q.readable() {
		return
	}
	if room := q.room(); room > 0 {
		q.read(q.ctx, q.cfg.Store, q.cfg.Topic, min(room, maxReadEntries), &q.wg, q.system.Root, q.self)
	}
}

// applyRead takes in the entries of the journal read in flight.
func (q *queue) applyRead(r *journalRead) {
	now := time.Now()
	q.readDone(r, q.cfg.Topic, feedFilter{q.cfg.Filter, q.cfg.Metrics, q.scope}, func(e store.Entry) { q.add(e, now) })
}

func (q *queue) add(e store.Entry, now time.Time) {
	if _, ok := q.items[e.Seq]; ok {
		return // parked before a restart
	}
	it := &qitem{seq: e.Seq, publish: e.PublishTime, ev: e.Event, dueIdx: -1, seqIdx: -1}
	q.items[e.Seq] = it
	q.order = append(q.order, e.Seq)
	if dec := q.makeAvailable(it, now); dec.Action != 0 {
		q.step(PullEnded, it, dec, now, time.Time{}, 1)
	}
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

// --- receiving ---

func (q *queue) addWaiter(sender *actor.PID, r *ReceiveEvents) {
	w := &waiter{id: r.ID, sender: sender, max: max(r.MaxEvents, 1), maxBytes: r.MaxBytes, eventBytes: r.EventBytes}
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
func (q *queue) serve(now time.Time) {
	for len(q.waiters) > 0 && q.avail.Len() > 0 {
		w := q.waiters[0]
		var out []LockedEvent
		var tooLarge *EventTooLargeError
		used := 0
		for len(out) < w.max && q.avail.Len() > 0 {
			it := q.avail.top()
			body, _, err := schemas.EncodeBatchWith(nil, q.cfg.InputSchema, schemas.CloudEvents, q.cfg.TopicID, []*schemas.Event{it.ev}, q.cfg.Encode)
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
			continue // every event looked at ended; the receiver keeps waiting
		}
		q.waiters = q.waiters[1:]
		w.timer.Stop()
		q.cfg.Metrics.Add(metrics.Key{Name: metrics.SuccessfulReceivedEvents, Scope: q.scope}, int64(len(out)))
		q.pendingAfter = append(q.pendingAfter, answer{w.sender, &ReceivedEvents{Events: out}})
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

// --- settling ---

func (q *queue) settleEvents(sender *actor.PID, m *SettleEvents) {
	now := time.Now()
	res := &Settled{}
	for _, tok := range m.LockTokens {
		it, failed := q.lookup(tok)
		if failed != nil {
			res.Failed = append(res.Failed, *failed)
			continue
		}
		n := len(m.LockTokens)
		switch m.Op {
		case Acknowledge:
			q.settle(it)
			q.step(PullAcknowledged, it, retry.Decision{}, now, time.Time{}, n)
		case Release:
			q.detach(it)
			if m.Delay <= 0 {
				q.step(PullReleased, it, q.makeAvailable(it, now), now, time.Time{}, n)
			} else {
				at := now.Add(q.scale(m.Delay))
				q.delay(it, at)
				q.pendingPut = append(q.pendingPut, q.record(it, at))
				q.step(PullReleased, it, retry.Decision{}, now, it.due, n)
			}
		case Reject:
			dec := q.cfg.Policy.End(schemas.RejectedBySubscriber)
			q.end(it, dec)
			q.step(PullRejected, it, dec, now, time.Time{}, n)
		case RenewLock:
			if now.Sub(it.receipt) >= q.renew {
				res.Failed = append(res.Failed, FailedToken{LockToken: tok, Code: TokenLost,
					Message: "The lock cannot be renewed: locks are renewed only within 1 hour of the event's receipt; receive the event again once its lock expires."})
				continue
			}
			it.due = now.Add(q.lock)
			q.timed.fix(it.dueIdx)
			q.step(PullRenewed, it, retry.Decision{}, now, it.due, n)
		default:
			panic(fmt.Sprintf("unknown settle operation %d", m.Op))
		}
		res.Succeeded = append(res.Succeeded, tok)
	}
	q.count(m.Op, res)
	q.report() // before an answer sent at once
	if sender == nil {
		return // sent, not asked: settled, with nobody to tell
	}
	if len(res.Succeeded) == 0 || m.Op == RenewLock {
		q.system.Root.Send(sender, res) // nothing to write
		return
	}
	q.pendingAfter = append(q.pendingAfter, answer{sender, res})
}

// count adds a settle operation's results to the metrics, failures by error code.
func (q *queue) count(op SettleOp, res *Settled) {
	var ok, failed string
	switch op {
	case Acknowledge:
		ok, failed = metrics.SuccessfulAcknowledgedEvents, metrics.FailedAcknowledgedEvents
	case Release:
		ok, failed = metrics.SuccessfulReleasedEvents, metrics.FailedReleasedEvents
	case Reject:
		ok, failed = metrics.SuccessfulRejectedEvents, metrics.FailedRejectedEvents
	case RenewLock:
		ok, failed = metrics.SuccessfulRenewedLockEvents, metrics.FailedRenewedLockEvents
	}
	if n := len(res.Succeeded); n > 0 {
		q.cfg.Metrics.Add(metrics.Key{Name: ok, Scope: q.scope}, int64(n))
	}
	for _, f := range res.Failed {
		q.cfg.Metrics.Add(metrics.Key{Name: failed, Scope: q.scope, Dim: f.Code}, 1)
	}
}

// --- lock tokens ---

// A lock token is base64url (no padding) of: a version byte, 8 bytes naming the subscription
// (a hash of topic and subscription names, case-folded), the event's journal sequence number
// and a random 96-bit nonce of the lock. The nonce makes it unguessable and tells one lock of
// an event from the next; the name hash tells another subscription's token (BadToken) from an
// expired one of this subscription (TokenLost).
const (
	tokenVersion = 1
	tagLen       = 8
	nonceLen     = 12
	tokenLen     = 1 + tagLen + 8 + nonceLen
	tokenChars   = (tokenLen*8 + 5) / 6 // its length: base64.RawURLEncoding.EncodedLen(tokenLen)
)

func tokenTag(topic, sub string) [tagLen]byte {
	sum := sha256.Sum256([]byte(strings.ToLower(topic) + "\x00" + strings.ToLower(sub)))
	var tag [tagLen]byte
	copy(tag[:], sum[:])
	return tag
}

func (q *queue) token(it *qitem) string {
	var b [tokenLen]byte
	b[0] = tokenVersion
	copy(b[1:], q.tag[:])
	binary.BigEndian.PutUint64(b[1+tagLen:], it.seq)
	copy(b[1+tagLen+8:], it.nonce[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func malformedToken(tok string) *FailedToken {
	return &FailedToken{LockToken: tok, Code: TokenBad, Message: "The lock token is malformed: pass a lockToken exactly as receive returned it."}
}

// lookup finds the locked event of tok, or says why it cannot be settled.
func (q *queue) lookup(tok string) (*qitem, *FailedToken) {
	// The length first: a token is the client's text, of any length, and Decode panics on
	// input that decodes to more than b holds.
	var b [tokenLen]byte
	if len(tok) != base64.RawURLEncoding.EncodedLen(tokenLen) {
		return nil, malformedToken(tok)
	}
	if n, err := base64.RawURLEncoding.Decode(b[:], []byte(tok)); err != nil || n != tokenLen || b[0] != tokenVersion {
		return nil, malformedToken(tok)
	}
	if !bytes.Equal(b[1:1+tagLen], q.tag[:]) {
		return nil, &FailedToken{LockToken: tok, Code: TokenBad, Message: "The lock token belongs to another event subscription: settle it on the subscription it was received from."}
	}
	it := q.items[binary.BigEndian.Uint64(b[1+tagLen:])]
	if it == nil || it.state != qLocked || !bytes.Equal(it.nonce[:], b[1+tagLen+8:]) {
		return nil, &FailedToken{LockToken: tok, Code: TokenLost, Message: "Token has expired."}
	}
	return it, nil
}

// --- state, timer, status ---

// persist writes the cursor and the parked changes in one update, synced when a consumer
// waits for it; the answers waiting for it go out once it is in the store.
func (q *queue) persist() {
	for len(q.order) > 0 && q.items[q.order[0]] == nil {
		q.order = q.order[1:]
		q.front = max(q.front-1, 0)
	}
	for q.front < len(q.order) {
		if it := q.items[q.order[q.front]]; it != nil && !it.parked {
			break
		}
		q.front++
	}
	if len(q.order) > 2*len(q.items)+orderSlack {
		q.compactOrder()
	}
	cursor := q.next - 1
	if q.front < len(q.order) {
		cursor = q.order[q.front] - 1
	}
	if cursor <= q.cursor && len(q.pendingPut) == 0 && len(q.pendingDel) == 0 && len(q.pendingDL) == 0 && len(q.pendingAfter) == 0 {
		return
	}
	u := store.Update{Epoch: q.epoch, Put: q.pendingPut, Delete: q.pendingDel, DeadLetters: q.pendingDL, Sync: len(q.pendingAfter) > 0}
	if cursor > q.cursor {
		u.Cursor, q.cursor = cursor, cursor
	}
	var written func(error)
	if after, h, recs, root, name, topic := q.pendingAfter, q.cfg.Handoff, u.DeadLetters, q.system.Root, q.cfg.Name, q.cfg.Topic; len(after) > 0 || (h != nil && len(recs) > 0) {
		written = func(err error) {
			if err != nil {
				// Nothing of the update is stored: its consumers are told so at once, not
				// left to their own timeouts, and they send their requests again.
				refused := unsaved(name, topic, err)
				for _, a := range after {
					root.Send(a.to, refused)
				}
				return
			}
			if h != nil && len(recs) > 0 {
				h.Handed(recs)
			}
			for _, a := range after {
				root.Send(a.to, a.msg)
			}
		}
	}
	err := q.writer.Enqueue(q.cfg.Name, u, reportFailure(q.system, q.self, q.life, written))
	if errors.Is(err, store.ErrFenced) {
		q.fence(err)
		return
	}
	if err != nil {
		panic(fmt.Errorf("saving state of subscription %s: %w", q.scope, err))
	}
	q.pendingPut, q.pendingDel, q.pendingDL, q.pendingAfter = nil, nil, nil, nil
}

// writeFailed handles the failure of a state write this incarnation queued, at once rather
// than at its next write ([writeFailed.handle]): an idle queue would otherwise keep its
// consumers' locks (and, in cluster mode, its place) with a state the store does not have.
// The consumers whose answers waited for the write were told so by the writer ([unsaved]).
func (q *queue) writeFailed(m *writeFailed) { m.handle(q.life, q.scope, q.fence) }

// fence stops the actor for good after a fenced state write, as a push subscription's does
// ([stopFenced]). Nothing of the turn's update is written, and the consumers whose answer
// waited for it are told the subscription's actor is not running here ([ErrNotRunning]):
// their receipts and settlements are not in the store, and the events belong to the new
// owner, which hands them out again. The receivers still waiting are answered with no
// events as the actor stops; the consumers whose answers waited for the write that was
// fenced were told so by the writer as it failed ([unsaved]).
func (q *queue) fence(err error) {
	q.fenced = true
	q.cancel()
	refused := unsaved(q.cfg.Name, q.cfg.Topic, err)
	for _, a := range q.pendingAfter {
		q.system.Root.Send(a.to, refused)
	}
	q.pendingPut, q.pendingDel, q.pendingDL, q.pendingAfter = nil, nil, nil, nil
	stopFenced(q.log, err, q.cfg.OnFenced, q.system.Root, q.self)
}

// unsaved is the answer to a consumer whose receipt or settlement was in a state write of
// event subscription name of topic that failed with err: nothing of its request is stored,
// and it should send it again. It wraps [ErrNotRunning], which the router answers as a
// subscription to try again shortly, and err. A fenced write ([store.ErrFenced]) means
// another node took the subscription over: the request goes there next time.
func unsaved(name, topic string, err error) error {
	switch {
	case errors.Is(err, store.ErrFenced):
		return fmt.Errorf("event subscription %q of topic %q: its state was taken over elsewhere (another node runs it now); nothing of this request was stored, send it again: %w (%w)",
			name, topic, ErrNotRunning, err)
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("event subscription %q of topic %q was deleted; nothing of this request was stored: %w (%w)",
			name, topic, ErrNotRunning, err)
	}
	return fmt.Errorf("event subscription %q of topic %q: saving its state failed, so nothing of this request was stored and the subscription restarts from its stored state; send it again: %w (%w)",
		name, topic, ErrNotRunning, err)
}

// orderSlack is how many settled events' sequence numbers the taken-in order may hold beyond
// twice the events held before [queue.compactOrder] drops them.
const orderSlack = 1024

// compactOrder drops the sequence numbers of settled events from the taken-in order. Those
// at its front go as they settle (persist), but the events behind an oldest one that stays
// received or released with a delay — for hours, up to its time to live — settle behind it:
// without this the order grew with every event taken in meanwhile. Dropping them when they
// are more than half of it costs O(1) per event.
func (q *queue) compactOrder() {
	kept := make([]uint64, 0, 2*len(q.items))
	front := 0
	for i, seq := range q.order {
		if q.items[seq] == nil {
			continue
		}
		if i < q.front {
			front++
		}
		kept = append(kept, seq)
	}
	q.order, q.front = kept, front
}

func (q *queue) armTimer(now time.Time) {
	if q.timed.Len() == 0 {
		return
	}
	at := q.timed.top().due
	if at.Equal(q.timerAt) {
		return
	}
	if q.timer != nil {
		q.timer.Stop()
	}
	q.timerGen++
	q.timerAt = at
	gen, root, self := q.timerGen, q.system.Root, q.self
	q.timer = time.AfterFunc(at.Sub(now), func() { root.Send(self, &wake{gen: gen}) })
}

func (q *queue) backlog() int {
	return len(q.items) + q.unread()
}

func (q *queue) oldest() time.Time {
	if len(q.order) > 0 {
		if it := q.items[q.order[0]]; it != nil {
			return it.publish
		}
	}
	return time.Time{}
}

// loadWaiting returns the status requests kept while the state loads ([boot.hold]), to be
// answered once it is in.
func (q *queue) loadWaiting() []earlyRequest {
	if q.boot == nil {
		return nil
	}
	return q.boot.waiting
}

func (q *queue) status() *Status {
	if q.boot != nil {
		return q.boot.status(q.cfg)
	}
	return &Status{
		Topic: q.cfg.Topic, Subscription: q.cfg.Name, Backlog: q.backlog(), InFlight: q.locked,
		Cursor: q.cursor, OldestUndelivered: q.oldest(),
	}
}

// publishGauges stores the turn's state for the metrics: the backlog, the locked events as
// in flight, and the oldest event not yet acknowledged.
func (q *queue) publishGauges() {
	g := q.gauges
	if g == nil {
		return
	}
	g.Backlog.Store(int64(q.backlog()))
	g.InFlight.Store(int64(q.locked))
	var at int64
	if t := q.oldest(); !t.IsZero() {
		at = t.UnixNano()
	}
	g.Oldest.Store(at)
}

// qheap is a binary min-heap of a queue's events: by sequence number (avail: receivers get
// the oldest first), or by due time and then sequence number (timed). Each entry carries its
// ordering key beside the event, so ordering one compares two entries of the slice and reads
// no event: a queue keeps a window of thousands of events, and every receipt and settlement
// takes events out of and into its heaps (the comparisons through each event's time.Time were
// the queue actor's largest cost in `egrid bench --scenario pull`). It keeps each event's
// index in it (qitem.dueIdx or seqIdx; -1 when the event is not in it) so that an event can
// be taken out or moved wherever it is.
type qheap struct {
	e     []qentry
	byDue bool // ordered by due time and keeps dueIdx; else by sequence number and seqIdx
}

type qentry struct {
	due int64 // the event's due time, Unix nanoseconds (dueKey); 0 in avail
	seq uint64
	it  *qitem
}

// dueKey is t as a heap key: Unix nanoseconds, clamped to int64 (beyond the years 1678–2262,
// which no deadline of a running queue reaches, keys tie and the sequence number orders).
func dueKey(t time.Time) int64 {
	switch {
	case t.Before(minDueKey):
		return math.MinInt64
	case t.After(maxDueKey):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var minDueKey, maxDueKey = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

func (h *qheap) Len() int { return len(h.e) }

// top is the first event: the oldest (avail) or the soonest due (timed).
func (h *qheap) top() *qitem { return h.e[0].it }

func (h *qheap) less(i, j int) bool {
	a, b := &h.e[i], &h.e[j]
	return a.due < b.due || a.due == b.due && a.seq < b.seq
}

// place records in the event at i its index.
func (h *qheap) place(i int) {
	if h.byDue {
		h.e[i].it.dueIdx = i
	} else {
		h.e[i].it.seqIdx = i
	}
}

func (h *qheap) swap(i, j int) {
	h.e[i], h.e[j] = h.e[j], h.e[i]
	h.place(i)
	h.place(j)
}

func (h *qheap) push(it *qitem) {
	var due int64
	if h.byDue {
		due = dueKey(it.due)
	}
	h.e = append(h.e, qentry{due: due, seq: it.seq, it: it})
	h.place(len(h.e) - 1)
	h.up(len(h.e) - 1)
}

// remove takes out the event at i.
func (h *qheap) remove(i int) {
	n := len(h.e) - 1
	if i != n {
		h.swap(i, n)
		if !h.down(i, n) {
			h.up(i)
		}
	}
	it := h.e[n].it
	if h.byDue {
		it.dueIdx = -1
	} else {
		it.seqIdx = -1
	}
	h.e[n] = qentry{}
	h.e = h.e[:n]
}

// fix moves the event at i, whose due time changed, to its place (timed only).
func (h *qheap) fix(i int) {
	h.e[i].due = dueKey(h.e[i].it.due)
	if !h.down(i, len(h.e)) {
		h.up(i)
	}
}

func (h *qheap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if i == j || !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down moves the entry at i0 down among the first n, and reports whether it moved.
func (h *qheap) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 {
			break
		}
		j := j1
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
