package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/egridio/egrid/router/store"
)

// What a subscription actor (push or queue) does when it stops or restarts is done off its
// mailbox: its Stopping (or Restarting) turn cancels what runs, queues its last state update
// and starts its stop work, which then waits, each at most the stop grace, for the actor's
// goroutines (sink calls, journal and state reads) and for its last state write, and closes
// the state writer the actor made for itself. The actor's Terminated therefore comes at once,
// not after those waits, and whoever relied on the old order waits for the stop work instead:
//
//   - The next actor of the subscription (a restart by its supervisor, or the actor that an
//     update starts in the old one's place) reads the stored state only once the stop work of
//     the one before has ended: the load waits for it by name ([stopRegistry]) before it takes
//     its load slot (startLoad). Its stop work ending means its last write is in the store,
//     or the grace passed (see [StateWriter.FlushWithin] for what a write landing later
//     costs).
//   - A topic actor answers a [RemoveSubscription] once the actor has terminated and its stop
//     work ended, so cluster mode, which closes the actor's writer and gives its lease up after
//     the answer, still does so after the last write.
//   - The owner of the store waits for every stop work under way ([Stops]) before it closes
//     the store, the sinks or the dead-letter actor the last writes hand dead letters to.

// pendingWork counts work under way and tells when none is.
type pendingWork struct {
	n    int
	idle chan struct{} // closed when n drops to zero; nil while it is zero
}

// closedChan is what idle returns when nothing is under way.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// stopRegistry is the stop work under way by key: by subscription name, of a topic actor's
// children (shared by the topic actor's incarnations: a topic actor that restarts stops its
// children, and the new ones wait for them) or of the actors of one [SubscriptionProps]; by
// topic, of a router's ([Stops]). An entry lives only while a stop work of its key is under
// way, so a registry that lives as long as its topic holds nothing of the subscriptions that
// stopped long ago.
type stopRegistry struct {
	mu   sync.Mutex
	keys map[string]*pendingWork
}

// begin counts a stop work of key as under way; the returned function ends it (once). A nil
// registry counts nothing.
func (r *stopRegistry) begin(key string) func() {
	if r == nil {
		return func() {}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = make(map[string]*pendingWork)
	}
	p := r.keys[key]
	if p == nil {
		p = &pendingWork{}
		r.keys[key] = p
	}
	p.add()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if p.done() {
				delete(r.keys, key)
			}
		})
	}
}

// idle returns a channel closed once no stop work of key begun so far is under way (at once
// when none is). A stop work of key begun meanwhile delays it too: each is bounded.
func (r *stopRegistry) idle(key string) <-chan struct{} {
	if r == nil {
		return closedChan
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.keys[key]; p != nil {
		return p.idle
	}
	return closedChan
}

// add counts one more. The lock of its owner is held.
func (p *pendingWork) add() {
	if p.n == 0 {
		p.idle = make(chan struct{})
	}
	p.n++
}

// done counts one less and reports whether none is left. The lock of its owner is held.
func (p *pendingWork) done() bool {
	p.n--
	if p.n > 0 {
		return false
	}
	close(p.idle)
	p.idle = nil
	return true
}

// Stops counts the stop work of subscription actors under way: what a stopping or restarting
// actor does off its mailbox once it has terminated (waiting for its sink calls and reads, at
// most its stop grace; for its last state write, as long; closing the state writer it made
// for itself). Its owner (the router) waits for it ([Stops.Wait], [Stops.WaitTopic]) after
// stopping the actors and before it closes what their last writes need: the store, the
// sinks, the dead-letter actor that a replay's last write hands its dead letters to. Set it
// in [SubscriptionShared.Stops]; the zero value is ready to use. It is safe for concurrent
// use.
type Stops struct {
	topics stopRegistry // by topic

	mu  sync.Mutex
	all pendingWork
}

// Begin counts a stop work of key (a subscription actor's: its topic) as under way; the
// returned function ends it (once). Other stop work off a mailbox that its owner must wait
// for, by key and in all, counts itself here too (the dead-letter replays': their own Stops).
func (s *Stops) Begin(key string) func() {
	return s.begin(key)
}

// Idle returns a channel closed once no stop work of key begun so far is under way (at once
// when none is).
func (s *Stops) Idle(key string) <-chan struct{} {
	return s.topics.idle(key)
}

// begin counts a stop work of a subscription of topic as under way; the returned function
// ends it.
func (s *Stops) begin(topic string) func() {
	ended := s.topics.begin(topic)
	s.mu.Lock()
	s.all.add()
	s.mu.Unlock()
	return func() {
		ended()
		s.mu.Lock()
		s.all.done()
		s.mu.Unlock()
	}
}

// Wait waits until no stop work begun so far is under way, or ctx ends (its error then).
// Each stop work is bounded by its actor's stop grace, twice (sink calls, then the last
// write), except closing an actor's own state writer, which waits for the write under way.
func (s *Stops) Wait(ctx context.Context) error {
	s.mu.Lock()
	idle := s.all.idle
	s.mu.Unlock()
	return waitIdle(ctx, idle)
}

// WaitTopic is Wait for the stop work of topic's subscription actors alone.
func (s *Stops) WaitTopic(ctx context.Context, topic string) error {
	return waitIdle(ctx, s.topics.idle(topic))
}

// waitIdle waits for idle (nil: nothing under way) or ctx's end.
func waitIdle(ctx context.Context, idle <-chan struct{}) error {
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for stopping subscription actors to write their state: %w", ctx.Err())
	}
}

// stopWork is what a stopping or restarting subscription (or queue) actor has left to do
// once its last turn is over; see the comment at the top of this file.
type stopWork struct {
	// wg counts the actor's goroutines (sink calls, reads, its state load), whose context it
	// cancelled; abandoned (logged with abandonAttrs) after grace.
	wg           *sync.WaitGroup
	grace        time.Duration
	abandoned    string
	abandonAttrs []any
	// writer, when set, holds the actor's last state update (queued in its last turn), of
	// subscription sub of epoch; owns says the actor made it for itself, and closes it.
	writer *StateWriter
	topic  string
	sub    string
	epoch  uint64
	owns   bool
	late   string // logged when the last write did not finish within grace
	log    *slog.Logger
	// sink, when set, is the push actor's sink: released (see [ReleasingSink]) once the
	// actor's stop work is otherwise done.
	sink ReleasingSink
}

// start counts w as under way in names (by the subscription's name) and in all (when set),
// on the actor's mailbox, so that whoever waits for it after the actor's Terminated (or
// after the restart) finds it, and runs it in a goroutine of its own.
func (w stopWork) start(names *stopRegistry, all *Stops) {
	ended := names.begin(w.sub)
	var released func()
	if all != nil {
		released = all.begin(w.topic)
	}
	go func() {
		w.run(ended)
		if released != nil {
			released()
		}
	}()
}

// run waits for the actor's goroutines, then for its last write, each at most grace, and
// calls ended: the next actor of the subscription may load its state. It returns once the
// writer the actor owns is closed, which waits for a write under way however long it takes.
func (w stopWork) run(ended func()) {
	if w.sink != nil {
		// Last, after ended: the next actor of the subscription need not wait for it (it
		// delivers through resources of its own: see ReleasingSink), but the owner waiting
		// for every stop work (Stops) does, so the router's close closes them before the
		// brokers'.
		defer w.sink.Release()
	}
	defer ended()
	if !WaitBounded(w.wg, w.grace) {
		w.log.Error(w.abandoned, append(w.abandonAttrs, "grace", w.grace)...)
	}
	if w.writer == nil {
		return
	}
	written, err := w.writer.FlushWithin(w.sub, w.epoch, w.grace)
	switch {
	case !written:
		w.log.Error(w.late, "grace", w.grace)
	case errors.Is(err, store.ErrFenced):
		// Expected in cluster mode: another node took the subscription over and wrote its
		// state, and that node runs it from what it wrote.
		w.log.Warn("subscription is now owned elsewhere (another node wrote its state); its last state write from this node was not stored", "err", err)
	case err != nil:
		w.log.Error("flushing subscription state", "err", err)
	}
	if w.owns {
		ended() // Close returns once the write under way does: the next actor need not wait for it
		_ = w.writer.Close()
	}
}

// WaitBounded waits for wg at most d and reports whether it finished. When it did not, the
// goroutine waiting for wg stays until wg finishes. The stop work of stopping actors (above)
// uses it, so that a sink or writer that ignores its context cannot hold a stop, and
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
