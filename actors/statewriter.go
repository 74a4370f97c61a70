package actors

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

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
// history: after a crash an event is at worst attempted again, never lost. After a failed
// write nothing more is written (what was queued behind it changes a state the store does
// not have).
//
// A subscription actor flushes its queued updates before it stops or restarts, so the next
// incarnation loads what the last one decided. The owner (the router, per topic) calls Close
// after the topic's actors have stopped.
type StateWriter struct {
	store store.Store
	topic string

	mu      sync.Mutex
	cond    *sync.Cond
	pending map[string]*mergedUpdate // by subscription, not yet taken by the writer
	order   []string                 // subscriptions with pending updates, oldest first
	busy    map[string]bool          // subscriptions whose update is being written
	err     error                    // first write failure; the store is then unusable
	closed  bool
	running bool // the writing goroutine is running
}

type mergedUpdate struct {
	cursor      uint64
	ops         map[uint64]*store.Parked // nil value = delete
	probation   []byte                   // the latest non-nil Update.Probation; nil = unchanged
	deadLetters []store.DeadLetterRecord // in the order queued
	sync        bool                     // some queued update asked for a synced write
	written     []func()                 // called, in order, once the update is in the store
}

// NewStateWriter starts a writer for topic's subscriptions.
func NewStateWriter(st store.Store, topic string) *StateWriter {
	w := &StateWriter{
		store: st, topic: topic, pending: make(map[string]*mergedUpdate),
		busy: make(map[string]bool),
	}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// Enqueue queues u for subscription sub. It never blocks on I/O. It returns the first write
// failure of the writer, if any: the caller should crash and restart from the store.
//
// written, when non-nil, is called on the writer's goroutine once u is in the store (durable
// when u carries dead letters: see [store.Update.DeadLetters]); never when the write fails.
// It must not block.
func (w *StateWriter) Enqueue(sub string, u store.Update, written func()) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return fmt.Errorf("state writer of topic %s: closed", w.topic)
	}
	m, ok := w.pending[sub]
	if !ok {
		m = &mergedUpdate{ops: make(map[uint64]*store.Parked)}
		w.pending[sub] = m
		w.order = append(w.order, sub)
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

// Flush waits until every update queued for sub so far is written (or failed).
func (w *StateWriter) Flush(sub string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for (w.pending[sub] != nil || w.busy[sub]) && w.err == nil {
		w.cond.Wait()
	}
	return w.err
}

// FlushWithin is Flush waiting at most d. It reports whether the updates were written (or
// failed) in time; when they were not, they go on being written in the background, and a
// next incarnation that loads the state meanwhile may load it without them. That costs
// duplicates, never a lost event: every update is a change to the state before it, and
// one that lands late only settles or parks what the next incarnation then attempts again.
// Stopping actors use it, so a store write that hangs (a disk that stopped answering)
// cannot hold a stop, and whatever waits for it, forever.
func (w *StateWriter) FlushWithin(sub string, d time.Duration) (bool, error) {
	done := make(chan error, 1)
	go func() { done <- w.Flush(sub) }() // ends with the write it waits for
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return true, err
	case <-t.C:
		return false, nil
	}
}

// flushOnStop is a stopping actor's last flush of sub's updates: it waits at most grace
// ([StateWriter.FlushWithin]), logs late (with the grace) when the write did not finish in
// time, and closes w when the actor owns it — at once, or in the background once the write
// returns.
func flushOnStop(w *StateWriter, sub string, grace time.Duration, owns bool, log *slog.Logger, late string) {
	written, err := w.FlushWithin(sub, grace)
	switch {
	case !written:
		log.Error(late, "grace", grace)
	case err != nil:
		log.Error("flushing subscription state", "err", err)
	}
	if !owns {
		return
	}
	if written {
		_ = w.Close()
		return
	}
	go func() { _ = w.Close() }() // returns once the write does
}

// Close writes what is queued and stops the writer. It is idempotent.
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
		if w.err != nil {
			// What is still queued was decided after the update that failed, and an update
			// is a change to the state before it: a subscription's later cursor written
			// without the parked events the failed update added would skip them for good.
			// Nothing more is written; the actors restart from the store.
			clear(w.pending)
			w.order = nil
		}
		if len(w.order) == 0 {
			w.running = false
			w.cond.Broadcast()
			return
		}
		sub := w.order[0]
		w.order = w.order[1:]
		m := w.pending[sub]
		delete(w.pending, sub)
		w.busy[sub] = true
		w.mu.Unlock()
		err := w.write(sub, m)
		if err == nil {
			for _, f := range m.written {
				f()
			}
		}
		w.mu.Lock()
		delete(w.busy, sub)
		if err != nil && w.err == nil {
			w.err = fmt.Errorf("saving state of subscription %s/%s: %w", w.topic, sub, err)
		}
		w.cond.Broadcast()
	}
}

func (w *StateWriter) write(sub string, m *mergedUpdate) error {
	u := store.Update{Cursor: m.cursor, Probation: m.probation, DeadLetters: m.deadLetters, Sync: m.sync}
	for seq, p := range m.ops {
		if p == nil {
			u.Delete = append(u.Delete, seq)
		} else {
			u.Put = append(u.Put, *p)
		}
	}
	return w.store.UpdateSubscription(context.Background(), w.topic, sub, u)
}
