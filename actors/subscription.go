package actors

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// SubscriptionProps returns the props of a subscription actor.
//
// Its mailbox is protoactor's lock-free linked queue rather than the default ring buffer: an idle
// subscription then costs no queue storage, which matters at tens of thousands of them.
func SubscriptionProps(cfg *SubscriptionConfig) *actor.Props {
	return subscriptionProps(cfg, new(stopRegistry))
}

// subscriptionProps is SubscriptionProps with the registry of stop work the actor's stops
// are counted in, and its loads wait for: its incarnations share it (a restart reloads after
// the stop of the incarnation before), and a topic actor passes its own, so that an actor
// replacing another of the same name loads after it too.
func subscriptionProps(cfg *SubscriptionConfig, stops *stopRegistry) *actor.Props {
	mustShare(cfg)
	return actor.PropsFromProducer(func() actor.Actor { return &subscription{cfg: cfg, stops: stops} }, subscriptionMailbox)
}

var subscriptionMailbox = actor.WithMailbox(actor.UnboundedLockfree())

type itemState uint8

const (
	stateReady itemState = iota + 1
	stateInFlight
	stateWaiting  // parked until due
	stateFetching // due, its event being read from the store
	stateEnded
)

// item is one event a subscription has taken in and not yet finished with.
type item struct {
	seq          uint64
	publish      time.Time
	ev           *schemas.Event
	state        itemState
	parked       bool // a Parked record for it is in the store
	attempts     int  // attempts that count against maxDeliveryAttempts: not the cut ones
	cut          bool // an attempt of it was cut by a stop before it had a counted one
	firstAttempt time.Time
	lastAttempt  time.Time
	due          time.Time
	lastOutcome  schemas.Outcome
	lastStatus   int
	heapIndex    int
	seqIndex     int // in subscription.parkedSeq while parked
}

// batch is one attempt's events. Everything an attempt needs travels in it, so a
// single-event attempt (batching off) costs one allocation for its bookkeeping: the sink's
// [sinks.Batch], the events slice and the result message live inside it.
type batch struct {
	items   []*item
	started time.Time
	probe   bool

	one  [1]*item          // backing array of items for a batch of one
	ev1  [1]*schemas.Event // backing array of sb.Events for a batch of one
	sb   sinks.Batch       // what the sink is given
	done attemptDone       // the result, sent to the actor when the sink returns
	// body is sb.Body's pooled buffer. The attempt's goroutine hands it back to bufpool as
	// soon as the sink returns (a sink keeps no buffer of a batch after Deliver,
	// sinks.Sink), and sb.Body is not read after that.
	body *[]byte
}

var batchIDs atomic.Uint64

// subscription is the subscription actor. All fields are owned by the actor's Receive.
type subscription struct {
	cfg    *SubscriptionConfig
	stops  *stopRegistry // the stop work of the subscription's actors (subscriptionProps)
	self   *actor.PID
	system *actor.ActorSystem
	log    *slog.Logger
	scope  string

	ctx      context.Context // of the reads and attempts, made at the first ([subscription.context]); cancelled when the actor stops or restarts
	cancel   context.CancelFunc
	ended    bool // cancelled: a context made after it is made cancelled
	wg       sync.WaitGroup
	attempts *attemptRunner // runs the sink calls; made at the first attempt
	// finished counts the attemptDone messages sent and not yet received: the attempt
	// goroutines add one before they send, the actor takes one off as it receives. While it
	// is above zero after a completion, another completion is already on its way, and the
	// state update waits for it (see [subscription.persistSoon]).
	finished atomic.Int32

	// boot is the state load in flight (nil once loaded): until it is back the actor takes in
	// no events, keeping them for after it (bounded: see [earlyMessages]); status requests and
	// EndProbations wait for it up to statusWait, then are answered with its loading status and
	// [ErrLoading] ([boot.hold]).
	boot *boot
	life uint64 // this incarnation's load id ([boot.id]): its writes' failures name it ([writeFailed])

	cursor uint64 // durable: every event up to it is settled
	// journalFeed is where the subscription stands in its topic's journal (next, head,
	// behind, stalled, the read in flight).
	journalFeed
	// turnOpen is set while Receive runs; still set when the next message comes, it says the
	// last turn panicked half way, so its state must not be written.
	turnOpen bool
	// heldFor is the journal read that ready events, fewer than a batch, wait for (0: none):
	// they wait for one read at most ([subscription.dispatch]).
	heldFor uint64

	items   map[uint64]*item
	order   []uint64 // taken-in sequence numbers, oldest first (lazily pruned)
	ready   []*item
	waiting dueHeap
	batches map[uint64]*batch

	parkedSeq seqHeap // parked events by sequence number, for the oldest undelivered one

	// fetch holds the parked events that came due without their event in memory (loaded at
	// start without bodies) while their bodies are read; nil when there are none.
	fetch *fetch

	gauges   *metrics.SubscriptionGauges // published at the end of each turn
	procHist *metrics.Histogram          // DestinationProcessingDurationInMs
	latHist  *metrics.Histogram          // DeliveryLatency

	probation  retry.Probation
	saved      *retry.ProbationSnapshot // the probation state last handed to the store; nil: zero
	timer      *time.Timer
	timerAt    time.Time
	timerGen   uint64
	maxEvents  int
	maxBytes   int
	pendingPut []store.Parked
	pendingDel []uint64
	pendingDL  []store.DeadLetterRecord // dead letters to hand off in the next update
	fenced     bool                     // a state write was fenced: the actor is stopping
	// draining is set by a [Drain]: its owner stops it next, so it starts no more attempts;
	// drains wait for the attempts in flight to be answered.
	draining bool
	drains   []*Drain
	// epoch is the epoch of the subscription whose state this actor loaded
	// ([store.SubscriptionState.Epoch]), set in each update: a write that lands after the
	// subscription was deleted and created again under its name changes nothing of it.
	epoch uint64
	// writer writes the state updates: the config's Writer, or without one a writer of this
	// incarnation's own (ownWriter), made at its first write and closed when it stops. It is
	// never put in the config, which the topic's other subscriptions and the next incarnation
	// share.
	writer    *StateWriter
	ownWriter bool
}

// Receive implements actor.Actor.
func (s *subscription) Receive(c actor.Context) {
	if d, ok := c.Message().(*Drain); ok {
		s.drain(d)
		return
	}
	if s.fenced {
		switch c.Message().(type) {
		case *actor.Restarting, *actor.Stopping:
		default:
			return // stopping: nothing more is sent or written
		}
	}
	if s.boot != nil {
		if s.boot.early.keep(c) {
			return
		}
		switch msg := c.Message().(type) {
		case *GetStatus:
			// Kept for the load's first statusWait, then answered with the loading status: an
			// operator asks exactly when the store stopped answering (see [boot.hold]).
			if !s.boot.hold(msg, c.Sender()) {
				c.Respond(s.boot.status(s.cfg))
			}
			return
		case *EndProbation:
			// The probation is in the state being read: ending it before the load would be
			// undone by it, so past statusWait the request is refused (see [boot.hold]).
			if !s.boot.hold(msg, c.Sender()) {
				c.Respond(s.boot.refuseEndProbation(s.cfg))
			}
			return
		case *slowLoad:
			if msg.id == s.boot.id {
				for _, r := range s.boot.overdue() {
					s.answerLoading(c, r)
				}
			}
			return
		case *journalRead, *parkedRead, *attemptDone, *wake:
			// From an earlier incarnation (this one starts nothing before its state is in):
			// a turn on the zero state would write a cursor from it (next 0: the largest
			// number), which the store keeps and the trimmer takes for settled.
			return
		}
	}
	broken := s.turnOpen
	s.turnOpen = true
	switch msg := c.Message().(type) {
	case *actor.Started:
		s.start(c)
	case *stateLoaded:
		s.applyLoad(c, msg)
	case *parkedRead:
		s.applyParked(msg)
		s.fill()
		s.dispatch()
		s.persist()
	case *Deliver:
		s.takeIn(msg)
		s.fill()
		s.dispatch()
		s.persist()
	case *journalRead:
		s.applyRead(msg)
		s.fill()
		s.dispatch()
		s.persist()
	case *attemptDone:
		if _, ours := s.batches[msg.id]; ours && s.attempts != nil {
			s.attempts.returned() // not for a batch of an earlier incarnation: not its goroutine
		}
		s.finish(msg)
		s.fill()
		s.dispatch()
		s.drained()
		if msg.panicked != nil {
			s.persist()
			panic(fmt.Sprintf("sink of subscription %s panicked: %v", s.scope, msg.panicked))
		}
		s.persistSoon()
	case *slowLoad: // the load ended within statusWait
		s.turnOpen = false
		return
	case *writeFailed:
		s.writeFailed(msg)
	case *wake:
		if msg.gen != s.timerGen {
			s.turnOpen = false
			return
		}
		s.timerAt = time.Time{}
		s.promoteDue(time.Now())
		s.fill() // events that ended at their due time made room
		s.dispatch()
		s.persist()
	case *GetStatus:
		st := s.status()
		if msg.EventID != "" {
			st.Event = s.held(msg.EventID, time.Now())
		}
		c.Respond(st)
	case *EndProbation:
		s.endProbation()
		s.dispatch()
		s.persist()
		c.Respond(s.status())
	case *actor.Stopping:
		// Completions whose update waited for one still on its way: this turn is the last.
		// Not after a panic (see Restarting), nor before the actor's state is loaded.
		// The attempts still in flight are cut: their events are parked, due at once, so
		// that the events settled after them stay settled (the cursor passes them) and the
		// next start attempts only them again.
		if !broken && s.self != nil && s.boot == nil && !s.fenced {
			s.cutInFlight(time.Now())
			s.persist()
		}
		if s.boot != nil {
			s.boot.abandon(c, s.cfg.Topic, s.cfg.Name)
		}
		s.stop()
		return
	case *actor.Restarting:
		// After a panic the turn that panicked may be half done, so nothing more is
		// written: the next incarnation loads the last update written and attempts again
		// whatever completed after it (a panicking sink's attempt is written before the
		// panic).
		if s.boot != nil {
			s.boot.abandon(c, s.cfg.Topic, s.cfg.Name)
		}
		s.stop()
		return
	}
	s.publishGauges()
	s.turnOpen = false
}

// publishGauges stores the turn's delivery state where readers outside the actor find it
// ([metrics.SubscriptionGauges]): a few atomic stores, and the oldest event found in O(1) from
// the front of the taken-in order and the parked events' sequence heap (journal order is
// publish order).
func (s *subscription) publishGauges() {
	g := s.gauges
	if g == nil {
		return
	}
	backlog := len(s.items) + s.unread()
	g.Backlog.Store(int64(backlog))
	g.InFlight.Store(int64(len(s.batches)))
	var oldest *item
	if len(s.order) > 0 {
		if it, ok := s.items[s.order[0]]; ok && !it.parked {
			oldest = it
		}
	}
	if len(s.parkedSeq) > 0 && (oldest == nil || s.parkedSeq[0].seq < oldest.seq) {
		oldest = s.parkedSeq[0]
	}
	var at int64
	if oldest != nil {
		at = oldest.publish.UnixNano()
	}
	g.Oldest.Store(at)
	snap := s.probation.Snapshot()
	state := retry.Healthy
	switch {
	case snap.Probing:
		state = retry.ProbeInFlight
	case !snap.Until.IsZero():
		state = retry.OnProbation
	}
	g.Probation.Store(uint32(state))
	var until int64
	if !snap.Until.IsZero() {
		until = snap.Until.UnixNano()
	}
	g.ProbationUntil.Store(until)
}

func (s *subscription) start(c actor.Context) {
	s.self = c.Self()
	s.system = c.ActorSystem()
	s.scope = metrics.SubscriptionScope(s.cfg.Topic, s.cfg.Name)
	s.log = s.cfg.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With(logattr.Topic, s.cfg.Topic, logattr.Subscription, s.cfg.Name)
	if s.cfg.Metrics != nil {
		if !s.cfg.NoGauges {
			s.gauges = s.cfg.Metrics.PublishGauges(s.cfg.Topic, s.cfg.Name)
		}
	}
	// items, batches and the context are made when the first event arrives: an idle
	// subscription has none.
	s.maxEvents, s.maxBytes = s.cfg.batchLimits()
	s.writer = s.cfg.Writer

	s.boot = startLoad(s.cfg, s.stops, false, &s.wg, s.system.Root, s.self) // see startLoad: off the mailbox
	s.life = s.boot.id
}

// makeHistograms looks up the subscription's histograms at its first finished attempt: an
// idle subscription has none (they would cost it about half a kilobyte).
func (s *subscription) makeHistograms() {
	if s.procHist != nil || s.cfg.Metrics == nil {
		return
	}
	s.procHist = s.cfg.Metrics.Histogram(metrics.Key{Name: metrics.DestinationProcessingDurationInMs, Scope: s.scope})
	s.latHist = s.cfg.Metrics.Histogram(metrics.Key{Name: metrics.DeliveryLatency, Scope: s.scope})
}

// savedProbation is the probation state last handed to the store.
func (s *subscription) savedProbation() retry.ProbationSnapshot {
	if s.saved == nil {
		return retry.ProbationSnapshot{}
	}
	return *s.saved
}

// setSaved records snap as handed to the store; a healthy subscription keeps no copy.
func (s *subscription) setSaved(snap retry.ProbationSnapshot) {
	if snap == (retry.ProbationSnapshot{}) {
		s.saved = nil
		return
	}
	s.saved = &snap
}

// applyLoad takes in the stored state: the cursor, the parked events (without their events,
// read when they come due), the probation; then the Delivers that arrived meanwhile, in order,
// and the requests kept for it ([boot.hold]): the EndProbations, then an answer to each.
func (s *subscription) applyLoad(c actor.Context, m *stateLoaded) {
	if s.boot == nil || m.id != s.boot.id {
		return // from before a restart
	}
	if m.err != nil {
		panic(m.err)
	}
	early, waiting := &s.boot.early, s.boot.waiting
	s.boot.end()
	s.boot = nil
	st := m.state
	s.epoch = st.Epoch
	if s.cfg.OnLoaded != nil {
		s.cfg.OnLoaded(st.Epoch)
	}
	s.cursor = st.Cursor
	s.loadedAt(st.Cursor, m.head)
	if len(st.Parked) > 0 {
		s.items = make(map[uint64]*item, len(st.Parked))
		s.waiting = make(dueHeap, 0, len(st.Parked))
		s.parkedSeq = make(seqHeap, 0, len(st.Parked))
		for i, p := range st.Parked {
			it := &item{
				seq: p.Seq, publish: p.PublishTime, state: stateWaiting, parked: true,
				attempts: p.Attempts, firstAttempt: p.FirstAttempt, lastAttempt: p.LastAttempt,
				due: p.NextDue, lastOutcome: p.LastOutcome, lastStatus: p.LastStatus,
				heapIndex: i, seqIndex: i,
				// Only a cut attempt leaves an attempt's time without a counted attempt.
				cut: p.Attempts == 0 && !p.LastAttempt.IsZero(),
			}
			s.items[p.Seq] = it
			s.waiting = append(s.waiting, it)
			s.parkedSeq = append(s.parkedSeq, it) // loaded ordered by Seq: already a heap
		}
		heap.Init(&s.waiting)
	}
	if len(st.Probation) > 0 {
		snap, err := decodeProbation(st.Probation)
		if err != nil {
			// The state is advisory: starting healthy costs at most a few early attempts.
			s.log.Error("discarding stored probation state", "err", err)
		} else {
			s.probation = retry.RestoreProbation(snap)
			s.setSaved(s.probation.Snapshot())
		}
	}
	for _, m := range early.delivers {
		s.takeIn(m)
	}
	s.announce(early.through)
	for _, r := range waiting {
		if _, ok := r.msg.(*EndProbation); ok {
			s.endProbation()
		}
	}
	s.promoteDue(time.Now())
	s.fill()
	s.dispatch()
	s.persist()
	for _, r := range waiting {
		c.Send(r.sender, s.status())
	}
}

// answerLoading answers a request kept while the state loads, once the load has run for
// statusWait: a status request with the loading status, an EndProbation with its refusal.
func (s *subscription) answerLoading(c actor.Context, r earlyRequest) {
	if _, ok := r.msg.(*EndProbation); ok {
		c.Send(r.sender, s.boot.refuseEndProbation(s.cfg))
		return
	}
	c.Send(r.sender, s.boot.status(s.cfg))
}

func (s *subscription) endProbation() {
	if s.probation.State(time.Now()) != retry.Healthy {
		s.log.Info("probation ended by an operator", "cause", s.probation.Cause().String())
	}
	s.probation.End()
}

// context returns the context of the actor's reads and attempts, made at its first use (about
// 100 bytes an idle subscription does without), and cancelled by [subscription.endContext].
func (s *subscription) context() context.Context {
	if s.ctx == nil {
		s.ctx, s.cancel = context.WithCancel(context.Background())
		if s.ended {
			s.cancel()
		}
	}
	return s.ctx
}

// endContext cancels the actor's context, and any made later: reads and attempts end.
func (s *subscription) endContext() {
	s.ended = true
	if s.cancel != nil {
		s.cancel()
	}
}

func (s *subscription) stop() {
	s.answerDrains()
	if s.gauges != nil {
		s.cfg.Metrics.RetireGauges(s.cfg.Topic, s.cfg.Name, s.gauges)
	}
	s.endContext()
	if s.boot != nil {
		s.boot.end()
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timerGen++
	// The waits for the attempts and the last write run off the mailbox (stopwork.go): the
	// next incarnation, and whoever waits for this one's end, waits for them.
	stopWork{
		wg: &s.wg, grace: s.cfg.stopGrace(),
		// The attempts still running are abandoned: their events are not settled (parked by
		// cutInFlight when the actor stops, left past the cursor when it restarts after a
		// panic), so the next incarnation (or the next process) attempts them again, and
		// their late results are ignored (their batch ids are unknown to it). Their
		// goroutines end when the sink returns.
		abandoned:    "sink calls did not return after their context was cancelled; abandoning them, their events will be attempted again",
		abandonAttrs: []any{"inFlight", len(s.batches)},
		writer:       s.writer, topic: s.cfg.Topic, sub: s.cfg.Name, epoch: s.epoch, owns: s.ownWriter, log: s.log,
		late: "the subscription's last state write did not finish in time; stopping without waiting for it (its events may be attempted again)",
		sink: releasing(s.cfg.Sink),
	}.start(s.stops, s.cfg.Stops)
}

// persistSoon writes the changes of a completion unless another completion is already on its
// way to the mailbox: attempts that finish together (a batching-off subscription finishes up
// to MaxInFlight at once) then cost one state update, written after the last of them, not one
// each. The update that waits holds nothing the store lacks for safety: until it is written,
// the events it settles are at worst attempted again after a crash, as with any update not
// yet written.
func (s *subscription) persistSoon() {
	if s.finished.Add(-1) > 0 {
		return
	}
	s.persist()
}

// persist writes the cursor, parked-set and probation changes in one atomic update. Nothing
// is written before the state is loaded: the zero state's cursor would be next-1 with next 0.
func (s *subscription) persist() {
	if s.boot != nil || s.next == 0 || s.fenced {
		return // a fenced actor writes nothing more: another writer owns the state
	}
	cursor := s.next - 1
	for len(s.order) > 0 {
		it, ok := s.items[s.order[0]]
		if ok && !it.parked {
			cursor = it.seq - 1
			break
		}
		s.order = s.order[1:]
	}
	snap := s.probation.Snapshot()
	probationChanged := snap != s.savedProbation()
	if cursor <= s.cursor && len(s.pendingPut) == 0 && len(s.pendingDel) == 0 && !probationChanged && len(s.pendingDL) == 0 {
		return
	}
	u := store.Update{Epoch: s.epoch, Put: s.pendingPut, Delete: s.pendingDel, DeadLetters: s.pendingDL}
	if cursor > s.cursor {
		u.Cursor, s.cursor = cursor, cursor
	}
	if probationChanged {
		u.Probation = encodeProbation(snap)
		s.setSaved(snap)
	}
	handed := s.handed(u.DeadLetters)
	if s.writer == nil {
		// Writes go off the mailbox: without a router's writer (a replay, a test) the actor
		// makes its own at its first write, so an idle subscription has none; stop closes it.
		s.writer, s.ownWriter = NewStateWriter(s.cfg.Store, s.cfg.Topic), true
	}
	err := s.writer.Enqueue(s.cfg.Name, u, reportFailure(s.system, s.self, s.life, handed))
	if errors.Is(err, store.ErrFenced) {
		s.fence(err)
		return
	}
	if err != nil {
		panic(fmt.Errorf("saving state of subscription %s: %w", s.scope, err))
	}
	s.pendingPut, s.pendingDel, s.pendingDL = nil, nil, nil
}

// writeFailed handles the failure of a state write this incarnation queued, at once rather
// than at its next write, which an idle subscription may not make for hours
// ([writeFailed.handle]).
func (s *subscription) writeFailed(m *writeFailed) { m.handle(s.life, s.scope, s.fence) }

// fence stops the actor for good after a fenced state write: another writer owns the state
// now, and a restart would load it and overwrite it. Attempts in flight are cancelled; their
// events belong to the new owner.
func (s *subscription) fence(err error) {
	s.fenced = true
	s.endContext()
	stopFenced(s.log, err, s.cfg.OnFenced, s.system.Root, s.self)
}

// stopFenced stops subscription actor self (push or queue) after a state write of it the
// store fenced ([store.ErrFenced]: another writer, another cluster node, changed the state
// since it was read): it logs it, tells onFenced (when set) and stops the actor, which
// neither restarts nor writes again. The actor has marked itself fenced (it ignores what
// comes before its Stopping) and cancelled what it runs.
func stopFenced(log *slog.Logger, err error, onFenced func(), root *actor.RootContext, self *actor.PID) {
	log.Warn("subscription state changed elsewhere (another node took it over); stopping this actor", "err", err)
	if onFenced != nil {
		onFenced()
	}
	root.Stop(self)
}

// armTimer makes sure a wake message arrives when the earliest parked event comes due or
// probation ends.
func (s *subscription) armTimer(now time.Time) {
	var at time.Time
	if s.waiting.Len() > 0 {
		at = s.waiting[0].due
	}
	if u := s.probation.Until(); u.After(now) && len(s.ready) > 0 && (at.IsZero() || u.Before(at)) {
		at = u
	}
	if at.IsZero() || at.Equal(s.timerAt) {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timerGen++
	s.timerAt = at
	gen, root, self := s.timerGen, s.system.Root, s.self
	s.timer = time.AfterFunc(at.Sub(now), func() { root.Send(self, &wake{gen: gen}) })
}

// held returns where event id stands when the actor holds it (taken in, not finished), nil
// otherwise. It looks through the events in memory (a bounded window) and the attempts in
// flight, without I/O: a parked event loaded without its event's body is not matched (its
// history, written when it was attempted, tells its story).
func (s *subscription) held(id string, now time.Time) *HeldEvent {
	for _, it := range s.items {
		if it.ev == nil || it.ev.ID != id || it.state == stateEnded {
			continue
		}
		h := &HeldEvent{PublishTime: it.publish, Attempts: it.attempts, MaxAttempts: s.cfg.Policy.MaxAttempts(), Deadline: s.cfg.Policy.Deadline(it.publish)}
		switch it.state {
		case stateInFlight:
			h.InFlight = true
			for _, b := range s.batches {
				if slices.Contains(b.items, it) {
					h.AttemptStarted = b.started
					break
				}
			}
		case stateWaiting, stateFetching:
			h.Due = it.due
		}
		return h
	}
	return nil
}

func (s *subscription) status() *Status {
	if s.boot != nil {
		return s.boot.status(s.cfg)
	}
	st := &Status{
		Topic: s.cfg.Topic, Subscription: s.cfg.Name, Backlog: len(s.items) + s.unread(), InFlight: len(s.batches),
		Cursor: s.cursor,
	}
	for _, it := range s.items {
		if st.OldestUndelivered.IsZero() || it.publish.Before(st.OldestUndelivered) {
			st.OldestUndelivered = it.publish
		}
	}
	now := time.Now()
	st.Probation = ProbationStatus{
		Active: s.probation.Active(now), State: s.probation.State(now),
		Until: s.probation.Until(), Cause: s.probation.Cause(),
		ConsecutiveFailures: s.probation.ConsecutiveFailures(),
	}
	return st
}
