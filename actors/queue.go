package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
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

// releaseAnswer gives back the budget share of an answer that is not sent (its write failed).
func releaseAnswer(msg any) {
	if r, ok := msg.(*ReceivedEvents); ok {
		r.Release()
	}
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
	case *answerBudgetFreed:
		// Bytes of the answer budget were given back: the turn serves the waiting receivers.
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
	q.loseLocks()
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
	// A turn that panicked before its update was queued left it here: it is not written.
	q.dropPending(errStopped)
	// The waits run off the mailbox (stopwork.go); answers waiting for their write go out
	// once it is in the store.
	stopWork{
		wg: &q.wg, grace: q.cfg.stopGrace(),
		abandoned: "a journal or state read did not return after its context was cancelled; abandoning it",
		writer:    q.writer, topic: q.cfg.Topic, sub: q.cfg.Name, epoch: q.epoch, owns: q.owns, log: q.log,
		late: "the queue's last state write did not finish in time; stopping without waiting for it (its answers go out if it lands; unanswered receipts are received again)",
	}.start(q.stops, q.cfg.Stops)
}

// loseLocks records, as the actor stops, the end of the locks it holds: they live in its
// memory, and the events are available again (their tokens TokenLost) once the subscription
// runs again, here or on another node. Without the step an event's history went from one
// receipt, "locked until", straight to the next.
func (q *queue) loseLocks() {
	if q.locked == 0 || q.boot != nil {
		return
	}
	now := time.Now()
	for _, seq := range q.order {
		if it := q.items[seq]; it != nil && it.state == qLocked {
			q.step(PullLockLost, it, retry.Decision{}, now, time.Time{}, q.locked)
		}
	}
	q.report()
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
					releaseAnswer(a.msg)
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
		// An earlier write of this subscription failed (the writer keeps the failure): the
		// turn's update is not queued, so its consumers are told at once, their answers'
		// bytes given back, and the actor restarts from its stored state.
		q.dropPending(err)
		panic(fmt.Errorf("saving state of subscription %s: %w", q.scope, err))
	}
	q.pendingPut, q.pendingDel, q.pendingDL, q.pendingAfter = nil, nil, nil, nil
}

// dropPending drops the turn's update, which will not be written: the consumers whose
// answers waited for it are told so with [unsaved] (err says why), and their answers' share
// of the answer budget is given back. Every path that drops pendingAfter goes through here;
// without it an answer's bytes were held for good and, once they and the next event passed
// the budget, the router's queue subscriptions handed out nothing more.
func (q *queue) dropPending(err error) {
	if len(q.pendingAfter) > 0 {
		refused := unsaved(q.cfg.Name, q.cfg.Topic, err)
		for _, a := range q.pendingAfter {
			releaseAnswer(a.msg)
			q.system.Root.Send(a.to, refused)
		}
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
	q.dropPending(err)
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

// errStopped is why a turn's update is not written when the actor stops or restarts before
// it was queued (a panic in the turn).
var errStopped = errors.New("the actor stopped before queueing the write")

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
