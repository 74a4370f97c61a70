package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/store"
)

// StateWriter writes the subscription state updates of one topic (cursor moves, parked
// retries) to the store off the subscription actors' mailboxes, one goroutine per topic while
// it has updates to write (none when idle: nothing to leak or to keep in memory).
//
// Why: a disk store commits in order, so a state write issued while a publish's synced journal
// append is in progress waits for that fsync; done inside Receive it would stall delivery
// behind ingest. Updates of one subscription are applied in the order they were queued —
// merged when several are waiting — so the store always holds a prefix of the actor's
// history: after a crash an event is at worst attempted again, never lost.
//
// A failed write is its own subscription's failure and never the others': after it nothing
// more of that subscription is written (what was queued behind it changes a state the store
// does not have) and its Enqueue and Flush return the failure while its actor can ask
// (below), so its actor crashes (or, after a write fenced by another writer,
// [store.ErrFenced], stops for good). The actor learns of it as the write fails, not at its
// next write: the written callback the actor passes to Enqueue sends it a message
// ([reportFailure]), so an idle actor does not hold on to a state the store does not have.
// In cluster mode each actor has a writer of its own, which the router
// replaces when a write fails, starting the actor again from the store (router/cluster.go);
// outside it the stores fail a state write only once closed or when the subscription is gone
// (the disk store keeps state writes in memory while it cannot write), and a subscription
// whose write failed otherwise stays failed until the process restarts (or it is deleted and
// created again: the new subscription's writes are its own, below). The topic's other
// subscriptions, which share the writer outside cluster mode, go on being written. A write
// that fails with [store.ErrNotFound] is not a failure: the subscription (or its topic) was
// deleted — its actor's stop work gave up waiting for its last write, the stop grace of
// [StateWriter.FlushWithin] — and has no state left to update, so the write and what is
// queued behind it are dropped, not reported as failures; their written callbacks are called
// with the error (the dead letters of a deleted subscription go with it, as its parked events
// do). The stores
// return ErrNotFound only for a subscription that has no record of the update's epoch, and a
// deleted subscription's actor is stopped before its record goes, so no later write of the
// same actor can be applied past a dropped one.
//
// A subscription created again under the name starts afresh, also while a write of the
// deleted one is still under way or queued: updates carry the epoch of the subscription
// their actor loaded ([store.Update.Epoch]), the writer keeps the updates, the write under
// way and the failure of each epoch of a name apart (never merging them), and the store
// refuses a write of the deleted subscription's epoch ([store.ErrStaleEpoch], which is an
// ErrNotFound: dropped as above), so it cannot land on the new subscription's state.
//
// The failures are kept only while something can ask for them, so that a topic's writer,
// which lives as long as the topic, holds at most one per subscription: a failure of an
// epoch of a name is forgotten when an update of another epoch of the name is queued (the
// subscription was deleted, and the actor of the deleted one stopped before that; an update
// of the old epoch queued later is refused by the store and dropped, as above; epoch zero,
// which the stores apply to whichever subscription holds the name, takes no part in this),
// and every failure of a name is forgotten by [StateWriter.Forget], which the owner calls
// once the subscription's actor has stopped for its deletion. [StateWriter.Close] returns
// the first failure even when it was forgotten.
//
// A subscription actor that stops or restarts waits for its queued updates to be written
// (at most its stop grace, off its mailbox once it has terminated: stopwork.go), and the next
// incarnation loads only after that wait, so it loads what the last one decided. The owner
// (the router, per topic) calls Close after the topic's actors have stopped.
type StateWriter struct {
	store store.Store
	topic string

	mu      sync.Mutex
	cond    *sync.Cond
	pending map[stateKey]*mergedUpdate // not yet taken by the writer
	order   []stateKey                 // subscriptions with pending updates, oldest first
	busy    map[stateKey]bool          // subscriptions whose update is being written
	failed  map[stateKey]error         // a subscription's first write failure; nothing more of it is written
	err     error                      // the first failure ever put in failed, which Close returns
	closed  bool
	running bool // the writing goroutine is running
}

// stateKey names the state of one life of a subscription: its name and its epoch
// ([store.SubscriptionState.Epoch]).
type stateKey struct {
	sub   string
	epoch uint64
}

type mergedUpdate struct {
	cursor      uint64
	ops         map[uint64]*store.Parked // nil value = delete
	probation   []byte                   // the latest non-nil Update.Probation; nil = unchanged
	deadLetters []store.DeadLetterRecord // in the order queued
	sync        bool                     // some queued update asked for a synced write
	written     []func(error)            // called, in order, once the update is in the store or failed
}

// NewStateWriter starts a writer for topic's subscriptions.
func NewStateWriter(st store.Store, topic string) *StateWriter {
	w := &StateWriter{
		store: st, topic: topic, pending: make(map[stateKey]*mergedUpdate),
		busy: make(map[stateKey]bool), failed: make(map[stateKey]error),
	}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// Enqueue queues u for subscription sub of epoch u.Epoch. It never blocks on I/O. It returns
// the first write failure of sub of that epoch, if any: the caller should crash and restart
// from the store. Failures of other subscriptions (or of another epoch of sub) do not count,
// nor does a write dropped because sub was deleted.
//
// written, when non-nil, is called once on the writer's goroutine when u's write has ended:
// with nil once u is in the store (durable when u carries dead letters: see
// [store.Update.DeadLetters]), or with the failure (wrapping the store's error, such as
// [store.ErrFenced] or [store.ErrNotFound]) when the write that carried u failed or was
// dropped, or when u was queued behind such a write and is dropped with it, so that whoever
// waits for u is answered at once rather than at its own timeout. It is called before
// [StateWriter.Flush] of u's subscription returns. It must not block.
func (w *StateWriter) Enqueue(sub string, u store.Update, written func(error)) error {
	k := stateKey{sub, u.Epoch}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failed) > 0 {
		if err := w.failed[k]; err != nil {
			return err
		}
		if u.Epoch != 0 {
			w.forgetOtherEpochs(k) // nothing can ask for them any more
		}
	}
	if w.closed {
		return fmt.Errorf("state writer of topic %s: closed", w.topic)
	}
	m, ok := w.pending[k]
	if !ok {
		m = &mergedUpdate{ops: make(map[uint64]*store.Parked)}
		w.pending[k] = m
		w.order = append(w.order, k)
	}
	m.cursor = max(m.cursor, u.Cursor)
	for _, seq := range u.Delete {
		m.ops[seq] = nil
	}
	for i := range u.Put {
		p := u.Put[i]
		m.ops[p.Seq] = &p
	}
	if u.Probation != nil {
		m.probation = u.Probation // the latest state wins, clearing ([]byte{}) included
	}
	m.deadLetters = append(m.deadLetters, u.DeadLetters...)
	m.sync = m.sync || u.Sync
	if written != nil {
		m.written = append(m.written, written)
	}
	if !w.running {
		w.running = true
		go w.run()
	}
	return nil
}

// Flush waits until every update queued for sub of epoch so far is written (or failed, or
// dropped) and returns its first write failure, if any. Updates of another epoch of sub are
// not waited for.
func (w *StateWriter) Flush(sub string, epoch uint64) error {
	k := stateKey{sub, epoch}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.pending[k] != nil || w.busy[k] {
		w.cond.Wait()
	}
	return w.failed[k]
}

// FlushWithin is Flush waiting at most d. It reports whether the updates were written (or
// failed) in time; when they were not, they go on being written in the background, and a
// next incarnation that loads the state meanwhile may load it without them. That costs
// duplicates, never a lost event: every update is a change to the state before it, and
// one that lands late only settles or parks what the next incarnation then attempts again.
// The stop work of stopping actors uses it (stopwork.go), so a store write that hangs (a
// disk that stopped answering) cannot hold the next incarnation's load, and whatever waits
// for the stop, forever.
func (w *StateWriter) FlushWithin(sub string, epoch uint64, d time.Duration) (bool, error) {
	done := make(chan error, 1)
	go func() { done <- w.Flush(sub, epoch) }() // ends with the write it waits for
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return true, err
	case <-t.C:
		return false, nil
	}
}

// Close writes what is queued and stops the writer. It is idempotent. It returns the first
// write failure of any subscription.
func (w *StateWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for w.running {
		w.cond.Wait()
	}
	return w.err
}

// run writes the queued updates until there are none left.
func (w *StateWriter) run() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if len(w.order) == 0 {
			w.running = false
			w.cond.Broadcast()
			return
		}
		k := w.order[0]
		w.order = w.order[1:]
		m := w.pending[k]
		delete(w.pending, k)
		w.busy[k] = true
		w.mu.Unlock()
		err := w.write(k, m)
		done := m.written
		if err != nil {
			w.mu.Lock()
			err, done = w.fail(k, m, err)
			w.mu.Unlock()
		}
		for _, f := range done {
			f(err)
		}
		w.mu.Lock()
		delete(w.busy, k)
		w.cond.Broadcast()
	}
}

// fail handles the failure err of the write of m, queued under k: it drops what is queued
// behind m and returns the error to answer their written callbacks and m's with, and those
// callbacks, in the order queued. w.mu is held.
func (w *StateWriter) fail(k stateKey, m *mergedUpdate, err error) (error, []func(error)) {
	done := m.written
	if behind := w.pending[k]; behind != nil {
		done = append(slices.Clip(done), behind.written...)
	}
	w.drop(k)
	if errors.Is(err, store.ErrNotFound) {
		// Deleted (perhaps created again since: store.ErrStaleEpoch): nothing left of this
		// epoch to update, and what is queued behind was decided by the same stopped actor.
		// A new epoch's updates are queued under their own key.
		return fmt.Errorf("saving state of subscription %s/%s: the subscription was deleted: %w", w.topic, k.sub, err), done
	}
	// What is still queued for sub was decided after the update that failed, and an update
	// is a change to the state before it: a later cursor written without the parked events
	// the failed update added would skip them for good. Nothing more of sub is written; its
	// actor restarts from the store (or, fenced, stops for good).
	err = fmt.Errorf("saving state of subscription %s/%s: %w", w.topic, k.sub, err)
	w.failed[k] = err
	if w.err == nil {
		w.err = err
	}
	return err, done
}

// Forget forgets the write failures of subscription sub, of every epoch: call it once the
// subscription's actor has stopped for its deletion, when nothing asks for them any more, so
// that a writer does not keep one per deleted subscription for its life. Close still returns
// the first failure.
func (w *StateWriter) Forget(sub string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.failed {
		if k.sub == sub {
			delete(w.failed, k)
		}
	}
}

// forgetOtherEpochs deletes the failures of k's subscription name of other non-zero epochs
// than k's. w.mu is held.
func (w *StateWriter) forgetOtherEpochs(k stateKey) {
	for f := range w.failed {
		if f.sub == k.sub && f.epoch != k.epoch && f.epoch != 0 {
			delete(w.failed, f)
		}
	}
}

// drop forgets the updates queued under k. w.mu is held.
func (w *StateWriter) drop(k stateKey) {
	if _, ok := w.pending[k]; !ok {
		return
	}
	delete(w.pending, k)
	w.order = slices.DeleteFunc(w.order, func(o stateKey) bool { return o == k })
}

func (w *StateWriter) write(k stateKey, m *mergedUpdate) error {
	u := store.Update{Epoch: k.epoch, Cursor: m.cursor, Probation: m.probation, DeadLetters: m.deadLetters, Sync: m.sync}
	for seq, p := range m.ops {
		if p == nil {
			u.Delete = append(u.Delete, seq)
		} else {
			u.Put = append(u.Put, *p)
		}
	}
	return w.store.UpdateSubscription(context.Background(), w.topic, k.sub, u)
}

// writeFailed tells a subscription actor (push or queue) that a state write it queued
// failed, so that it restarts from its stored state (or, fenced, stops for good) at once
// rather than at its next write, which an idle subscription may not make for a long time
// while it holds what it can no longer keep (locks handed to consumers, its lease).
type writeFailed struct {
	life uint64 // the load id of the incarnation that queued the write ([boot.id])
	err  error
}

// handle is the actor's answer to m, the same for a push and a queue subscription: a failure
// of an earlier incarnation's write is ignored (incarnation life loaded after it); a fenced
// write calls fence, which stops the actor for good; any other failure crashes the actor, and
// its supervisor restarts it from the stored state.
func (m *writeFailed) handle(life uint64, scope string, fence func(error)) {
	if m.life != life {
		return
	}
	if errors.Is(m.err, store.ErrFenced) {
		fence(m.err)
		return
	}
	panic(fmt.Errorf("saving state of subscription %s: %w", scope, m.err))
}

// reportFailure returns the written callback of a state write of the actor self of
// incarnation life: it calls next (when non-nil), then, when the write failed, sends self a
// [writeFailed]. A write dropped because the subscription was deleted ([store.ErrNotFound])
// is no failure of the actor's (its stop comes anyway). It runs on the writer's goroutine, so
// it touches nothing of the actor: a message only. Without an actor system (an actor's state
// driven directly, not started) there is no one to tell, and it is next.
func reportFailure(sys *actor.ActorSystem, self *actor.PID, life uint64, next func(error)) func(error) {
	if sys == nil || self == nil {
		return next
	}
	root := sys.Root
	return func(err error) {
		if next != nil {
			next(err)
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			root.Send(self, &writeFailed{life: life, err: err})
		}
	}
}
