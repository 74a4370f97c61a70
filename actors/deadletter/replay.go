package deadletter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// This file is the replay actor (SPEC §5): it re-delivers dead-lettered events to one
// subscription, with a fresh attempt budget and the same event ids, and no other subscription
// sees them.
//
// It does so with the subscription actor itself: the replay actor runs, as its supervised
// child, a second subscription actor with the live subscription's config (same sink, policy,
// delivery schema, headers and hooks, no filter) reading a private in-memory journal that holds
// just the replayed events. Delivery semantics are therefore exactly those of the subscription:
// batching, retries, probation, dead-lettering again when an event still cannot be delivered.
// The replay actor counts the events as they settle and stops when all have.
//
// The events come in parts (the router's are its dead-letter objects), read one at a time off
// the mailbox and only while the events read and not yet settled take less than the window
// ([ReplayConfig.Window]): each part read is appended to the journal and handed to the
// subscription actor, and the journal is trimmed behind the subscription's cursor, so a replay
// of any number of objects holds about a window of events, not all of them.
//
// Stopping or restarting does not wait in the mailbox: the Stopping (or Restarting) turn
// cancels the part read or append under way, reports the result (when stopping) and returns;
// the stop work waits for those goroutines off the mailbox ([ReplayStops]), and the next reader
// of the same parts (the restarted actor, or a new replay of the subscription) reads its first
// part only after that.

// DefaultReplayWindow is the default [ReplayConfig.Window]: a replay reads its next part once
// the events it read and that have not settled take less than this (by [schemas.Event.Size]).
const DefaultReplayWindow = 64 << 20

// ReplayConfig is what a replay actor needs.
type ReplayConfig struct {
	// Subscription is the config of the live subscription to replay into (the router builds a
	// fresh one). Its Store is replaced by the replay's own journal and its filter dropped.
	Subscription *actors.SubscriptionConfig
	// Events are the events to re-deliver, in the topic's input schema, each id once, when
	// they are all at hand: they are the replay's only part. Set either Events or Read.
	Events []*schemas.Event
	// Read returns the events of the replay's parts one after another, in the topic's input
	// schema: part 0, 1, 2, … until it answers io.EOF (the parts need not be known in
	// advance: the router's are its dead-letter objects, read as a walk of the store comes to
	// them). No id occurs twice in a replay. It is called off the mailbox, one part at a time
	// and in order (from part 0 again when the replay actor restarts); ctx ends when the
	// replay stops. A restarted replay, and a later replay of the same StopKey in Stops, calls
	// it (for part 0) only once the call of the one before has returned, or 5 s after its ctx
	// ended (it is then abandoned, and may still be running). Another error says the part
	// cannot be read (it is logged), and the replay goes on with the next part.
	Read func(ctx context.Context, part int) ([]*schemas.Event, error)
	// Total is how many events the parts of Read are expected to hold: the total of the
	// progress until the last part is read. Expected events the parts turned out not to hold
	// (a part that could not be read, or held fewer) are counted in ReplayResult.Unread.
	Total int
	// Window bounds what the replay holds: the next part is read only while the events read
	// and not yet settled take less than Window bytes (default [DefaultReplayWindow]), so at
	// most Window plus one part. Events that keep failing hold the later parts back until
	// they end.
	Window int
	// PublishTime is the publish time the replayed events get: their time to live starts
	// again from it.
	PublishTime time.Time
	// OnProgress, when set, is called from the actor as events settle (delivered, or ended
	// again, or found unreadable). It must not block.
	OnProgress func(settled, total int)
	// OnDone, when set, is called once: when every event has settled, or when the replay is
	// stopped before that (Stopped set). It must not block. When stopped, the replay's last
	// part read may still be running: it returns (or is abandoned) in the replay's stop work
	// ([ReplayStops]).
	OnDone func(ReplayResult)
	// Stops, when set, counts the replay's stop work under StopKey, so that the owner can wait
	// for it and a later replay of the same key reads after it (see [ReplayStops]). ReplayProps
	// makes one when it is nil: the actor's incarnations share it.
	Stops *ReplayStops
	// StopKey names the replay in Stops (default: the subscription's topic and name): a
	// replay reads its first part only once the stop work of every earlier replay of its key
	// (and of its own earlier incarnations) has ended.
	StopKey string
}

// ReplayStops tells when the stop work of replay actors has ended, by key (the subscription a
// replay re-delivers to). A stopping or restarting replay actor does not wait in its last turn
// for its part read or journal append: it cancels them and its Stopping (or Restarting) turn
// returns at once; its stop work then waits for them off the mailbox, at most 5 s, after which
// a read that ignores its context is abandoned (and logged). A replay that stops for good (by
// itself once every event settled, or stopped) has its stop work wait too until the actor has
// terminated, after its subscription actor, however long a turn of that actor holds its
// mailbox: that actor's stop work (its last write, which hands the events it dead-lettered to
// the dead-letter actor) has then begun, counted in the owner's [actors.Stops], which the
// owner waits for after this one and before it stops the dead-letter actor. The replay's parts are one pass
// over their source (ReplayConfig.Read: the router's walk of its dead-letter objects), read by
// one reader at a time: so the next incarnation, and a later replay of the same key, reads its
// first part only once that stop work has ended. The owner waits for it ([ReplayStops.Wait])
// before it closes the store the parts are read from. The zero value is ready to use; it is
// safe for concurrent use.
type ReplayStops struct {
	stops actors.Stops // by key
}

// begin counts a stop work of key as under way; the returned function ends it (once).
func (s *ReplayStops) begin(key string) func() { return s.stops.Begin(key) }

// idle returns a channel closed once no stop work of key begun so far is under way.
func (s *ReplayStops) idle(key string) <-chan struct{} { return s.stops.Idle(key) }

// Wait waits until no stop work begun so far is under way, or ctx ends (its error then).
// Each takes at most 5 s once its actor has terminated.
func (s *ReplayStops) Wait(ctx context.Context) error {
	return replayStopsErr(ctx, s.stops.Wait(ctx))
}

// WaitKey is Wait for the stop work of the replays of key alone.
func (s *ReplayStops) WaitKey(ctx context.Context, key string) error {
	return replayStopsErr(ctx, s.stops.WaitTopic(ctx, key))
}

// replayStopsErr says what a wait that ctx ended was for.
func replayStopsErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("waiting for the part reads of stopped dead-letter replays: %w", ctx.Err())
}

// source returns the events expected and the function that reads the parts.
func (c *ReplayConfig) source() (int, func(context.Context, int) ([]*schemas.Event, error)) {
	if c.Read != nil {
		return c.Total, c.Read
	}
	events := c.Events
	return len(events), func(_ context.Context, part int) ([]*schemas.Event, error) {
		if part > 0 || len(events) == 0 {
			return nil, io.EOF
		}
		return events, nil
	}
}

// ReplayResult is how a replay ended.
type ReplayResult struct {
	Total        int
	Delivered    int
	DeadLettered int
	Dropped      int
	// Unread counts the events expected (ReplayConfig.Total) that the parts did not hold:
	// parts that could not be read (ReplayConfig.Read failed), or that held fewer.
	Unread int
	// Stopped is set when the replay was stopped (router closed, subscription deleted or
	// replaced) before every event settled.
	Stopped bool
}

// ReplayProps returns the props of a replay actor.
// Its subscription actor is restarted with back-off when it fails, like a topic actor's.
func ReplayProps(cfg *ReplayConfig) *actor.Props {
	log := cfg.Subscription.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With(logattr.Topic, cfg.Subscription.Topic, logattr.Subscription, cfg.Subscription.Name, "replay", cfg.Subscription.Name)
	c := *cfg
	if c.Stops == nil {
		c.Stops = new(ReplayStops)
	}
	if c.StopKey == "" {
		c.StopKey = cfg.Subscription.Topic + "/" + cfg.Subscription.Name
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &replay{cfg: &c, log: log, ChildRestarts: actors.NewChildRestarts(100*time.Millisecond, time.Minute, log)}
	})
}

// replaySettled reports events of the replay that settled.
type replaySettled struct {
	ids     []string
	outcome replayOutcome
}

type replayOutcome uint8

const (
	replayDelivered replayOutcome = iota + 1
	replayDeadLettered
	replayDropped
)

// replayStopWait bounds how long the stop work of a replay waits for its part read and
// journal append, whose context it has cancelled ([ReplayStops]).
const replayStopWait = 5 * time.Second

// replay is the replay actor. All fields are owned by Receive.
type replay struct {
	cfg    *ReplayConfig
	log    *slog.Logger
	expect int // the events expected ([ReplayConfig.Total])
	read   func(context.Context, int) ([]*schemas.Event, error)
	result ReplayResult
	done   bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// after is closed once the stop work of the replays of the key before this incarnation
	// has ended ([ReplayStops]): the first part is read after it.
	after <-chan struct{}
	// gen is the id of this incarnation (see [replayGens]): results of the goroutines of an
	// earlier one are ignored.
	gen     uint64
	journal *store.Memory // nil until prepared
	child   *actor.PID    // the subscription actor, spawned with the first events
	next    int           // the next part to read
	eof     bool          // every part is read
	taken   int           // the events read and taken (not already held)
	busy    bool          // a part is being read or appended
	// terminated is closed at the actor's Stopped, once it stops for good: its stop work
	// waits for it (see [replay.stop]).
	terminated chan struct{}
	// unsettled holds the size of each event read and not settled yet, by id; held sums them.
	unsettled map[string]int
	held      int
	settled   int // events delivered, dead-lettered again, dropped or unread

	// ChildRestarts restarts the subscription actor after its back-off when it fails, with
	// timers of the replay actor's own; it is the actor's supervisor strategy.
	*actors.ChildRestarts
}

// Receive implements actor.Actor.
func (r *replay) Receive(c actor.Context) {
	if r.ChildRestarts.Receive(c) {
		return
	}
	switch msg := c.Message().(type) {
	case *actor.Started:
		r.start(c)
	case *journalReady:
		if msg.gen != r.gen {
			return // from before a restart
		}
		if msg.err != nil {
			panic(fmt.Errorf("preparing the replay journal: %w", msg.err))
		}
		r.journal = msg.journal
		r.pull(c)
	case *partRead:
		r.partRead(c, msg)
	case *partAppended:
		r.partAppended(c, msg)
	case *replaySettled:
		for _, id := range msg.ids {
			size, ok := r.unsettled[id]
			if !ok || r.done {
				continue // delivered again after a restart: counted once
			}
			delete(r.unsettled, id)
			r.held -= size
			r.settled++
			switch msg.outcome {
			case replayDelivered:
				r.result.Delivered++
			case replayDeadLettered:
				r.result.DeadLettered++
			case replayDropped:
				r.result.Dropped++
			}
		}
		r.progress()
		r.pull(c)
	case *actors.GetStatus:
		c.Respond(&actors.Status{Topic: r.cfg.Subscription.Topic, Subscription: r.cfg.Subscription.Name, Backlog: r.result.Total - r.settled})
	case *actor.Restarting:
		r.stop(false)
	case *actor.Stopping:
		r.stop(true)
		r.finish(true)
	case *actor.Stopped: // its subscription actor has terminated before it
		if r.terminated != nil {
			close(r.terminated)
			r.terminated = nil
		}
	}
}

func (r *replay) start(c actor.Context) {
	r.expect, r.read = r.cfg.source()
	r.unsettled = make(map[string]int)
	r.result = ReplayResult{Total: r.expect}
	if r.cfg.Read == nil && len(r.cfg.Events) == 0 {
		r.finish(false)
		c.Stop(c.Self())
		return
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.after = r.cfg.Stops.idle(r.cfg.StopKey)
	// The journal is written off the mailbox, as every store is; the parts are read once it
	// is ready.
	r.gen = replayGens.Add(1)
	gen, live := r.gen, r.cfg.Subscription
	root, self := c.ActorSystem().Root, c.Self()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		msg := &journalReady{gen: gen, journal: store.NewMemory()}
		ctx := context.Background()
		if msg.err = msg.journal.PutTopic(ctx, live.Topic, nil); msg.err == nil {
			msg.err = msg.journal.PutSubscription(ctx, live.Topic, live.Name, nil)
		}
		root.Send(self, msg)
	}()
}

// stop cancels the part read or append under way and starts the stop work that waits for
// it, a bounded time, off the mailbox ([ReplayStops]): the turn returns at once. The stop
// work is counted under the replay's key here, in the turn, so that the next incarnation
// (started after this turn) and the owner (after the actor's Terminated, or when the replay
// stopped by itself) find it. When final (not a restart), it waits for the actor's Stopped
// first: its subscription actor has terminated then, its own stop work begun.
func (r *replay) stop(final bool) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	ended := r.cfg.Stops.begin(r.cfg.StopKey)
	wg, log := &r.wg, r.log
	var terminated <-chan struct{}
	if final {
		r.terminated = make(chan struct{})
		terminated = r.terminated
	}
	go func() {
		defer ended()
		if terminated != nil {
			<-terminated // as long as a turn of its subscription actor holds that actor's mailbox
		}
		if !actors.WaitBounded(wg, replayStopWait) {
			log.Error("a dead-letter replay's part read did not return after its context was cancelled; abandoning it", "waited", replayStopWait)
		}
	}()
}

// replayGens numbers the incarnations of replay actors, so that a restarted replay ignores
// what its predecessor's goroutines send.
var replayGens atomic.Uint64

// journalReady brings a replay its private journal, with the topic and subscription made.
type journalReady struct {
	gen     uint64
	journal *store.Memory
	err     error
}

// partRead brings a replay the events of one part, or why they cannot be read.
type partRead struct {
	gen    uint64
	part   int
	events []*schemas.Event
	err    error
}

// partAppended says the events of a part are in the replay's journal.
type partAppended struct {
	gen     uint64
	entries []store.Entry
	err     error
}

// pull reads the next part when none is under way and the events held leave room for it,
// and ends the replay when every part is read and every event settled.
func (r *replay) pull(c actor.Context) {
	if r.done || r.journal == nil || r.busy {
		return
	}
	if r.eof {
		if len(r.unsettled) == 0 {
			// The stop work is counted before OnDone tells the owner that the replay is over
			// (it forgets the replay then), not in the Stopping turn that comes after.
			r.stop(true)
			r.finish(false)
			c.Stop(c.Self())
		}
		return
	}
	window := r.cfg.Window
	if window <= 0 {
		window = DefaultReplayWindow
	}
	if len(r.unsettled) > 0 && r.held >= window {
		return // read on once earlier events settle
	}
	r.busy = true
	part, gen, read, ctx, after := r.next, r.gen, r.read, r.ctx, r.after
	r.next++
	root, self := c.ActorSystem().Root, c.Self()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if part == 0 {
			// The parts are one pass over their source: the first is read once the reads of
			// the incarnations (and replays of the key) before this one have returned.
			select {
			case <-after:
			case <-ctx.Done():
				return // stopped before: nobody reads the answer
			}
		}
		events, err := read(ctx, part)
		sendUnlessStopped(ctx, root, self, &partRead{gen: gen, part: part, events: events, err: err})
	}()
}

// partRead takes in the events of a part and appends them to the journal, off the mailbox.
func (r *replay) partRead(c actor.Context, m *partRead) {
	if m.gen != r.gen || r.done {
		return
	}
	if errors.Is(m.err, io.EOF) {
		// Every part is read: what was expected and not taken is unread.
		r.busy, r.eof = false, true
		if r.taken < r.expect {
			r.unread(r.expect-r.taken, fmt.Sprintf("%d of the %d events expected were not found in the parts read", r.expect-r.taken, r.expect))
		}
		r.pull(c)
		return
	}
	if m.err != nil {
		r.busy = false
		r.log.Warn("dead-letter replay: a part could not be read", "part", m.part, "problem", m.err)
		r.pull(c)
		return
	}
	var events []*schemas.Event
	for _, ev := range m.events {
		if _, dup := r.unsettled[ev.ID]; dup {
			continue
		}
		events = append(events, ev)
		r.unsettled[ev.ID] = ev.Size()
		r.held += ev.Size()
	}
	r.taken += len(events)
	if r.taken > r.result.Total {
		r.result.Total = r.taken // more than expected: the parts changed since they were counted
	}
	if len(events) == 0 {
		r.busy = false
		r.pull(c)
		return
	}
	// The events are counted before the subscription can see them, so each settles once.
	gen, journal, live, at, ctx := r.gen, r.journal, r.cfg.Subscription, r.cfg.PublishTime, r.ctx
	root, self := c.ActorSystem().Root, c.Self()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		// What the subscription has settled leaves the journal; its parked events keep their
		// own copy in its state. A failed trim only keeps entries longer.
		if cursors, err := journal.Cursors(ctx, live.Topic); err == nil && cursors[live.Name] > 0 {
			_ = journal.Trim(ctx, live.Topic, cursors[live.Name])
		}
		msg := &partAppended{gen: gen}
		last, err := journal.Append(ctx, live.Topic, at, events)
		if msg.err = err; err == nil {
			first := last - uint64(len(events)) + 1
			msg.entries = make([]store.Entry, len(events))
			for i, ev := range events {
				msg.entries[i] = store.Entry{Seq: first + uint64(i), PublishTime: at, Event: ev}
			}
		}
		sendUnlessStopped(ctx, root, self, msg)
	}()
}

// unread counts n events that cannot be read as settled, saying why.
func (r *replay) unread(n int, problem string) {
	r.result.Unread += n
	r.settled += n
	r.log.Warn("dead-letter replay: events not replayed", "events", n, "problem", problem)
	r.progress()
}

func (r *replay) progress() {
	if r.cfg.OnProgress != nil && !r.done {
		r.cfg.OnProgress(r.settled, r.result.Total)
	}
}

// partAppended hands the subscription actor the events of a part now in the journal; the
// first part starts it.
func (r *replay) partAppended(c actor.Context, m *partAppended) {
	if m.gen != r.gen || r.done {
		return
	}
	if m.err != nil {
		panic(fmt.Errorf("appending to the replay journal: %w", m.err))
	}
	r.busy = false
	if r.child == nil {
		r.child = r.spawn(c, r.journal)
	} else {
		c.Send(r.child, &actors.Deliver{Entries: m.entries, Through: m.entries[len(m.entries)-1].Seq, From: m.entries[0].Seq})
	}
	r.pull(c)
}

// spawn starts the copy of the live subscription that delivers the events of journal.
func (r *replay) spawn(c actor.Context, journal *store.Memory) *actor.PID {
	live := r.cfg.Subscription
	root, self := c.ActorSystem().Root, c.Self()
	sc := *live
	shared := *live.SubscriptionShared // the live subscription's is the topic's: copy, then change
	sc.SubscriptionShared = &shared
	sc.Store = journal
	// Its state is the private journal's: the live subscription's state writer must not see
	// the replay's sequence numbers. Its dead letters are handed to the dead-letter actor from
	// there, which puts them in the durable outbox itself (a replay that a crash interrupts
	// before that is run again from the objects it read).
	sc.Writer = nil
	if h, ok := sc.Handoff.(*storeHandoff); ok {
		own := *h
		own.save = true
		sc.Handoff = &own
	}
	sc.Filter = nil    // these events matched once; a replay re-delivers them all
	sc.NoGauges = true // the gauges are the live subscription's
	onAttempt, onDeadLetter := live.OnAttempt, live.OnDeadLetter
	sc.OnAttempt = func(a *actors.AttemptRecord) {
		// The epoch is the private journal's subscription's, not the live one's: its histories
		// go to whichever subscription holds the name (a delete stops the replay first, then
		// writes out the histories reported before removing the subscription's).
		a.Epoch = 0
		if onAttempt != nil {
			onAttempt(a)
		}
		var delivered, dropped []string
		for i, id := range a.EventIDs {
			if i >= len(a.Decisions) {
				break
			}
			switch dec := a.Decisions[i]; {
			case dec.Action == retry.Drop:
				dropped = append(dropped, id)
			case dec.Action == 0 && a.Outcome == schemas.Delivered:
				delivered = append(delivered, id)
			}
		}
		if len(delivered) > 0 {
			root.Send(self, &replaySettled{ids: delivered, outcome: replayDelivered})
		}
		if len(dropped) > 0 {
			root.Send(self, &replaySettled{ids: dropped, outcome: replayDropped})
		}
	}
	sc.OnDeadLetter = func(d *actors.DeadLetter) {
		if onDeadLetter != nil {
			onDeadLetter(d)
		}
		root.Send(self, &replaySettled{ids: []string{d.Event.ID}, outcome: replayDeadLettered})
	}
	if live.Logger != nil {
		live.Logger.Info("replaying dead letters", logattr.Topic, live.Topic, logattr.Subscription, live.Name, "events", r.result.Total)
	}
	return c.Spawn(actors.SubscriptionProps(&sc))
}

func (r *replay) finish(stopped bool) {
	if r.done {
		return
	}
	r.done = true
	r.result.Stopped = stopped
	if r.cfg.OnDone != nil {
		r.cfg.OnDone(r.result)
	}
}
