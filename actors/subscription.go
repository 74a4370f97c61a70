package actors

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/bufpool"
	"github.com/egridio/egrid/sinks"
)

// Defaults of a [SubscriptionConfig].
const (
	// DefaultMaxInFlight bounds the attempts one subscription runs at once.
	DefaultMaxInFlight = 16
	// DefaultWindow bounds the events a subscription keeps in memory; the rest waits in the
	// journal.
	DefaultWindow = 4096
	// DefaultMaxEventsPerBatch and DefaultPreferredBatchBytes apply when batching is on and only
	// one of the two limits is set (SPEC §2.3).
	DefaultMaxEventsPerBatch   = 5000
	DefaultPreferredBatchBytes = 64 * 1024
	// DefaultStopGrace is how long a stopping subscription waits (off its mailbox) for its
	// sink calls to return after cancelling them, and then for its last state write. A
	// router's close gives the attempts in flight as long to be answered before it stops the
	// subscriptions ([Drain]).
	DefaultStopGrace = 5 * time.Second
)

// SubscriptionConfig is everything a subscription actor needs. It is immutable once the actor
// is spawned; an update replaces the actor.
//
// The fields every subscription of a topic has in common are in [SubscriptionShared], one
// value per topic that the configs point to (its fields read as the config's own): at tens of
// thousands of subscriptions, each keeps only what is its own.
type SubscriptionConfig struct {
	// SubscriptionShared must be set. A copy that changes one of its fields (a replay's
	// journal) copies it first: writing through the pointer would change every subscription's.
	*SubscriptionShared

	Name           string
	DeliverySchema schemas.Schema // how events are encoded for the sink
	Filter         *filter.Filter // nil matches everything
	Policy         *retry.Policy  // retry, TTL and dead-letter policy
	Sink           sinks.Sink

	// Batching is off when both are zero: one event per request (SPEC §2.3). Setting either
	// turns it on; the other takes its default. With batching on, CloudEvents deliveries always
	// use the batch framing (a JSON array, application/cloudevents-batch+json), even for a
	// batch of one.
	MaxEventsPerBatch   int
	PreferredBatchBytes int

	Timeout time.Duration // per-attempt response timeout; 0 = sinks.DefaultTimeout
	Headers map[string]string

	// NoGauges keeps the actor from publishing its delivery state in Metrics' gauges: a
	// replay's actor, which shares the live subscription's name, sets it.
	NoGauges bool

	// OnDeadLetter receives every event that ends without delivery when the policy has a
	// dead-letter destination. It must not block.
	OnDeadLetter func(*DeadLetter)
	// Handoff, when set, takes those events into the dead-letter outbox in the same store
	// update that settles them (see [DeadLetterHandoff]).
	Handoff DeadLetterHandoff
	// OnFenced, when set, is called (from the actor, push or queue) when a state write failed with
	// [store.ErrFenced]: another writer (another cluster node) changed the subscription's
	// state since this actor loaded it. The actor then stops for good instead of restarting
	// and overwriting it; its owner decides whether to start it again. It must not block.
	OnFenced func()
	// OnLoaded, when set, is called (from the actor, push or queue) once the actor loaded its
	// stored state, with the epoch it loaded ([store.SubscriptionState.Epoch]): the life of
	// the subscription it runs, which is not the one its owner last listed when the store
	// gave the state a new epoch as it loaded it (a state that does not decode, started
	// afresh). It must not block.
	OnLoaded func(epoch uint64)
	// OnAttempt, when set, receives a record of every finished attempt, and of every event
	// that ended when it came due without an attempt ([AttemptRecord.NoAttempt]); a queue
	// subscription's actor a record of each step of its events' pull delivery
	// ([AttemptRecord.Pull]). It is called from the actor and must not block.
	OnAttempt func(*AttemptRecord)

	// Queue, when set, makes the subscription a queue (pull) subscription: consumers receive
	// and settle its events, and Sink is not used (see [QueueConfig]).
	Queue *QueueConfig

	// after, when set, is closed once the actor this one replaces has terminated, its stop
	// work under way (stopwork.go): the load waits for it, then for that stop work, which
	// ends once the old actor's last state write is in the store or its stop grace passed
	// (set by the topic actor: topic.add).
	after <-chan struct{}
}

// SubscriptionShared is the part of a [SubscriptionConfig] that the subscriptions of a topic
// share: the topic, the router's limits, store, writer and telemetry. It is immutable once a
// config points to it.
type SubscriptionShared struct {
	Topic       string
	TopicID     string         // stamped into Event Grid events; the CloudEvents source
	InputSchema schemas.Schema // the topic's input schema
	// Encode holds egrid's extensions to the delivery encoding; the zero value is Azure's.
	Encode schemas.EncodeOptions

	MaxInFlight int // attempts at once; 0 = DefaultMaxInFlight
	Window      int // events kept in memory; 0 = DefaultWindow

	// StopGrace bounds how long a stopping or restarting actor waits for its attempts in
	// flight to return once their context is cancelled, and for its last state write; a queue
	// subscription's (pull delivery) for its journal and state reads and its last state write.
	// The actor waits off its mailbox, after it has terminated; the next actor of the
	// subscription loads its state once those waits ended ([Stops]). 0 = DefaultStopGrace. A
	// sink that ignores its context is abandoned after it: see [sinks.Sink].
	StopGrace time.Duration

	Store store.Store
	// LoadSlots, when set, bounds the subscriptions of a router that read their stored state
	// at once (one slot each, taken off the mailbox): a restart with a thousand subscriptions
	// then holds a few of them half-read, not all of them.
	LoadSlots chan struct{}
	// Writer, when set, writes state updates off the mailbox (see [StateWriter]); without it
	// the actor writes them itself.
	Writer *StateWriter
	// Stops, when set, counts the stop work of the actors: their waits, once they have
	// terminated, for their sink calls and their last state write, which run off their
	// mailboxes. The owner waits for it before it closes the store ([Stops.Wait]).
	Stops   *Stops
	Metrics *metrics.Set
	Logger  *slog.Logger
}

// stopGrace is StopGrace with its default.
func (c *SubscriptionShared) stopGrace() time.Duration {
	if c.StopGrace > 0 {
		return c.StopGrace
	}
	return DefaultStopGrace
}

func (c *SubscriptionConfig) batchLimits() (events, bytes int) {
	if c.MaxEventsPerBatch == 0 && c.PreferredBatchBytes == 0 {
		return 1, 0
	}
	events, bytes = c.MaxEventsPerBatch, c.PreferredBatchBytes
	if events == 0 {
		events = DefaultMaxEventsPerBatch
	}
	if bytes == 0 {
		bytes = DefaultPreferredBatchBytes
	}
	return events, bytes
}

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

// mustShare panics with what to do when cfg has no shared part: a programming error that
// would otherwise surface as a nil dereference inside the actor.
func mustShare(cfg *SubscriptionConfig) {
	if cfg.SubscriptionShared == nil {
		panic("actors: SubscriptionConfig.SubscriptionShared is nil; point it at the topic's SubscriptionShared")
	}
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
	attempts     int
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
		c.Respond(s.status())
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

// loadIDs numbers state loads across incarnations, so a restarted actor ignores the state its
// predecessor asked for.
var loadIDs atomic.Uint64

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

// fetch is the reading of parked events' bodies (see [subscription.fetchDue]).
type fetch struct {
	due     []*item // came due; waiting for their read
	id      uint64  // of the read in flight, 0 when none
	fetched []*item // the events it reads
}

func (s *subscription) endProbation() {
	if s.probation.State(time.Now()) != retry.Healthy {
		s.log.Info("probation ended by an operator", "cause", s.probation.Cause().String())
	}
	s.probation.End()
}

// fetchDue reads the events of parked events that came due without them, off the mailbox and
// at most maxReadEntries at a time, while the ready queue is short; they come back as a
// [parkedRead].
func (s *subscription) fetchDue() {
	f := s.fetch
	if f == nil || f.id != 0 || len(f.due) == 0 || len(s.ready) >= maxReadEntries {
		return
	}
	n := min(len(f.due), maxReadEntries)
	f.fetched = append(f.fetched[:0], f.due[:n]...)
	clear(f.due[:n])
	f.due = f.due[n:]
	seqs := make([]uint64, n)
	for i, it := range f.fetched {
		seqs[i] = it.seq
	}
	id := readIDs.Add(1)
	f.id = id
	st, topic, name := s.cfg.Store, s.cfg.Topic, s.cfg.Name
	root, self, ctx := s.system.Root, s.self, s.context()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		parked, err := st.ParkedEvents(ctx, topic, name, seqs)
		root.Send(self, &parkedRead{id: id, parked: parked, err: err})
	}()
}

// applyParked gives the events read by fetchDue their bodies and moves them on as promoteDue
// does: to the ready queue, or ended when their time to live has passed.
func (s *subscription) applyParked(r *parkedRead) {
	f := s.fetch
	if f == nil || r.id != f.id {
		return // from before a restart
	}
	f.id = 0
	if r.err != nil {
		panic(fmt.Errorf("reading parked events of subscription %s: %w", s.scope, r.err))
	}
	byseq := make(map[uint64]*schemas.Event, len(r.parked))
	for _, p := range r.parked {
		byseq[p.Seq] = p.Event
	}
	now := time.Now()
	for _, it := range f.fetched {
		ev, ok := byseq[it.seq]
		if !ok || ev == nil {
			// Only this actor deletes its parked events; a missing one is damage in the store.
			s.log.Error("a parked event is missing from the store; forgetting it", "seq", it.seq)
			s.settle(it)
			continue
		}
		it.ev = ev
		s.ready1(it, now)
	}
	clear(f.fetched)
	f.fetched = f.fetched[:0]
	if len(f.due) == 0 {
		s.fetch = nil
	}
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
	for _, d := range s.drains {
		d.done()
	}
	s.drains = nil
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
	}.start(s.stops, s.cfg.Stops)
}

// room is how many more events the subscription may take in. Events parked for a retry do not
// count against the window (thousands of events waiting hours for their next attempt must not
// stop new events), but at most maxParkedFactor windows of them are kept in memory: past that
// the rest waits in the journal until retries settle.
func (s *subscription) room() int {
	active := len(s.items) - s.waiting.Len()
	return min(s.window()-active, maxParkedFactor*s.window()-len(s.items))
}

// maxParkedFactor bounds the parked events in memory, in windows.
const maxParkedFactor = 16

func (s *subscription) window() int {
	if s.cfg.Window > 0 {
		return s.cfg.Window
	}
	return DefaultWindow
}

// takeIn accepts the entries of a Deliver that the subscription has not seen yet, as far as the
// window allows.
func (s *subscription) takeIn(d *Deliver) {
	s.deliver(d, s.room, s.add)
}

// fill starts a journal read while the subscription is behind and the window has room. The
// read runs off the mailbox (a disk store may wait behind a publish's fsync); its entries come
// back as a [journalRead]. One read at a time, always from next: nothing moves next while the
// subscription is behind, so no entry is read twice.
func (s *subscription) fill() {
	s.fetchDue()
	if !s.readable() {
		return
	}
	room := s.room()
	if room <= 0 || room < s.minRead() && len(s.ready) > readReserve*s.maxInFlight()*s.maxEvents {
		return
	}
	s.read(s.context(), s.cfg.Store, s.cfg.Topic, min(room, maxReadEntries), &s.wg, s.system.Root, s.self)
}

// maxReadEntries bounds one catch-up read.
const maxReadEntries = 1024

// readReserve is how many rounds of its attempts in flight a subscription keeps ready before
// it reads the journal again for less than [subscription.minRead] entries.
const readReserve = 4

// minRead is the fewest entries a catch-up read asks for while the ready queue still holds
// [readReserve] rounds of attempts. A read costs a journal seek however few entries it
// returns: a subscription whose window is full frees a slot at a time, and reading each
// time one frees (an entry or two per seek, batching off) made the reads a tenth of the
// router's CPU per delivered event.
func (s *subscription) minRead() int {
	return max(1, min(maxReadEntries/4, s.window()/4))
}

// maxInFlight bounds the attempts the subscription runs at once.
func (s *subscription) maxInFlight() int {
	if s.cfg.MaxInFlight > 0 {
		return s.cfg.MaxInFlight
	}
	return DefaultMaxInFlight
}

// applyRead takes in the entries of the journal read in flight.
func (s *subscription) applyRead(r *journalRead) {
	s.readDone(r, s.cfg.Topic, feedFilter{s.cfg.Filter, s.cfg.Metrics, s.scope}, s.add)
}

func (s *subscription) add(e store.Entry) {
	if _, ok := s.items[e.Seq]; ok {
		return // parked before a restart
	}
	it := &item{seq: e.Seq, publish: e.PublishTime, ev: e.Event, state: stateReady}
	if s.items == nil {
		s.items = make(map[uint64]*item)
	}
	s.items[e.Seq] = it
	s.order = append(s.order, e.Seq)
	s.ready = append(s.ready, it)
}

// promoteDue moves parked events whose time has come to the ready queue. An event whose time to
// live has passed ends here, at its due time and without an attempt (SPEC §2.1: the TTL is
// checked only when the next attempt comes due, so an event can end later than its TTL, never
// sooner).
func (s *subscription) promoteDue(now time.Time) {
	for s.waiting.Len() > 0 && !s.waiting[0].due.After(now) {
		it := heap.Pop(&s.waiting).(*item)
		if it.ev == nil { // loaded without its event: read it first (fetchDue)
			it.state = stateFetching
			if s.fetch == nil {
				s.fetch = new(fetch)
			}
			s.fetch.due = append(s.fetch.due, it)
			continue
		}
		s.ready1(it, now)
	}
}

// ready1 moves one due event to the ready queue, or ends it when its time to live has passed.
func (s *subscription) ready1(it *item, now time.Time) {
	it.state = stateReady
	if dec, expired := s.cfg.Policy.AtDue(it.publish, now); expired {
		s.endUnattempted(it, dec, 0, now)
		return
	}
	s.ready = append(s.ready, it)
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
			rec.Outcome = schemas.Delivered
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
// its lastDeliveryOutcome is Probation; otherwise it keeps its last attempt's outcome.
func (s *subscription) endUnattempted(it *item, dec retry.Decision, outcome schemas.Outcome, now time.Time) {
	if it.attempts == 0 && s.probation.State(now) != retry.Healthy {
		it.lastOutcome = schemas.Probation
	}
	s.end(it, dec)
	s.record(&AttemptRecord{
		Topic: s.cfg.Topic, Subscription: s.cfg.Name, Time: now, Outcome: outcome, NoAttempt: true,
		EventIDs: []string{it.ev.ID}, Attempts: []int{it.attempts}, Decisions: []retry.Decision{dec},
		PublishTimes: []time.Time{it.publish},
	})
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

// drain makes the actor start no more attempts (its owner stops it next) and answers d once
// none is in flight: at once when none is, else when the last one is answered
// ([subscription.drained]) or the actor stops.
func (s *subscription) drain(d *Drain) {
	s.draining = true
	if len(s.batches) == 0 || s.fenced {
		d.done()
		return
	}
	s.drains = append(s.drains, d)
}

// drained answers the drains waiting once no attempt is in flight.
func (s *subscription) drained() {
	if len(s.drains) == 0 || len(s.batches) > 0 {
		return
	}
	for _, d := range s.drains {
		d.done()
	}
	s.drains = nil
}

// cutInFlight parks the events of the attempts still in flight as the actor stops, whose
// results it will not see: due now, with the cut attempt counted (Canceled: its answer is
// unknown, and the event may have been delivered). The last state update then holds them,
// and moves the cursor past them to the oldest event neither settled nor parked, so the next
// incarnation attempts them again and not the events settled after them. Each cut attempt
// is reported ([AttemptRecord], outcome Canceled, rule [retry.RuleStopped]), so the event's
// history says what became of it.
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
			it.attempts++
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
				rec.Attempts = append(rec.Attempts, it.attempts)
				rec.Decisions = append(rec.Decisions, dec)
				rec.PublishTimes = append(rec.PublishTimes, it.publish)
			}
		}
		s.record(rec)
	}
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

// seqHeap orders parked events by sequence number.
type seqHeap []*item

func (h seqHeap) Len() int           { return len(h) }
func (h seqHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h seqHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].seqIndex, h[j].seqIndex = i, j
}
func (h *seqHeap) Push(x any) {
	it := x.(*item)
	it.seqIndex = len(*h)
	*h = append(*h, it)
}
func (h *seqHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.seqIndex = -1
	return it
}

// dueHeap orders parked events by due time.
type dueHeap []*item

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].seq < h[j].seq
	}
	return h[i].due.Before(h[j].due)
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}
func (h *dueHeap) Push(x any) {
	it := x.(*item)
	it.heapIndex = len(*h)
	*h = append(*h, it)
}
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil // the slot past the end must not keep the event alive
	*h = old[:len(old)-1]
	it.heapIndex = -1
	return it
}

// WaitBounded waits for wg at most d and reports whether it finished. When it did not, the
// goroutine waiting for wg stays until wg finishes. The stop work of stopping actors uses it
// (stopwork.go), so that a sink or writer that ignores its context cannot hold a stop, and
// the next incarnation's load, forever.
func WaitBounded(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
