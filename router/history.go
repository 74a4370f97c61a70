package router

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
)

// maxHistoryQueue bounds the steps waiting for the history writer; past it new steps are
// dropped (and logged): histories are advisory and must never hold delivery back. A step is
// about 450 bytes, so a full queue holds about 7 MB.
const maxHistoryQueue = 1 << 14

// maxHistoryBatch bounds the steps the writer takes from its queue for one write. A write
// holds, per step, the event's history (read back for a retry), its JSON and its share of the
// store's write batch, about 1.5 KB in all: had the writer taken the whole queue at once, a
// writer that fell behind (CPU scarce, thousands of deliveries a second) would hold that for
// the whole queue while the queue filled again behind it — 100 MB of the 1 M-event backlog
// test's peak live heap. Small batches also let each subscription's writes interleave.
const maxHistoryBatch = 1 << 10

// minHeldBack is the least wait past an attempt's due time a history tells.
const minHeldBack = time.Second

// historyExpireEvery is how often the history writer deletes expired histories.
const historyExpireEvery = time.Hour

// historyWriter writes the delivery histories of a router's events off the actors'
// mailboxes; see explain.go. Its goroutine is started by newHistoryWriter and stopped by
// close; the router owns both.
type historyWriter struct {
	store store.Store
	cfg   HistoryConfig
	log   *slog.Logger

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []historyStep
	queued  uint64 // steps ever queued (or dropped)
	written uint64 // steps ever taken and handled
	dropped int
	closed  bool

	wake chan struct{} // capacity 1
	done chan struct{}
}

func newHistoryWriter(st store.Store, cfg HistoryConfig, log *slog.Logger) *historyWriter {
	w := &historyWriter{store: st, cfg: cfg, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	go w.run()
	return w
}

// enqueue queues steps. It never blocks on I/O.
func (w *historyWriter) enqueue(steps []historyStep) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	room := maxHistoryQueue - len(w.queue)
	if len(steps) > room {
		w.dropped += len(steps) - room
		w.written += uint64(len(steps) - room) // nothing to wait for
		w.queued += uint64(len(steps) - room)
		steps = steps[:max(room, 0)]
	}
	w.queue = append(w.queue, steps...)
	w.queued += uint64(len(steps))
	select { // under mu, so close cannot close wake meanwhile
	case w.wake <- struct{}{}:
	default:
	}
	w.mu.Unlock()
}

// flush waits until every step queued before the call is written (or failed), or ctx ends.
func (w *historyWriter) flush(ctx context.Context) error {
	w.mu.Lock()
	target := w.queued
	w.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.cond.Broadcast()
	})
	defer stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.written < target && !w.closed && ctx.Err() == nil {
		w.cond.Wait()
	}
	return ctx.Err()
}

// close writes what is queued and stops the writer. It is idempotent.
func (w *historyWriter) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.wake)
	}
	w.mu.Unlock()
	<-w.done
}

func (w *historyWriter) run() {
	defer close(w.done)
	expire := time.NewTicker(historyExpireEvery)
	defer expire.Stop()
	for {
		select {
		case _, ok := <-w.wake:
			w.drain()
			if !ok {
				w.mu.Lock()
				w.cond.Broadcast()
				w.mu.Unlock()
				return
			}
		case now := <-expire.C:
			if err := w.store.ExpireHistory(context.Background(), now); err != nil && !errors.Is(err, store.ErrClosed) {
				w.log.Warn("expiring delivery histories", "err", err)
			}
		}
	}
}

// drain writes everything queued, batch after batch of at most maxHistoryBatch steps.
func (w *historyWriter) drain() {
	for {
		w.mu.Lock()
		steps := w.take()
		dropped := w.dropped
		w.dropped = 0
		w.mu.Unlock()
		if dropped > 0 {
			w.log.Warn("delivery history steps dropped: the history writer fell behind", "steps", dropped)
		}
		if len(steps) == 0 {
			return
		}
		w.write(steps)
		w.mu.Lock()
		w.written += uint64(len(steps))
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

// take removes and returns the oldest steps queued, at most maxHistoryBatch; w.mu is held.
// The rest stays queued in place; the slots taken are cleared so that the queue's array does
// not keep what they referred to alive.
func (w *historyWriter) take() []historyStep {
	if len(w.queue) <= maxHistoryBatch {
		steps := w.queue
		w.queue = nil
		return steps
	}
	steps := slices.Clone(w.queue[:maxHistoryBatch])
	clear(w.queue[:maxHistoryBatch])
	w.queue = w.queue[maxHistoryBatch:]
	return steps
}

type subRef struct{ topic, sub string }

// write merges steps into their events' histories and writes them, one PutHistory per
// subscription.
func (w *historyWriter) write(steps []historyStep) {
	ctx := context.Background()
	type pending struct {
		e       *Explanation
		expires time.Time
	}
	bySub := make(map[subRef]map[string]*pending)
	var order []subRef
	for i := range steps {
		s := &steps[i]
		ref := subRef{s.topic, s.sub}
		events, ok := bySub[ref]
		if !ok {
			events = make(map[string]*pending)
			bySub[ref] = events
			order = append(order, ref)
		}
		p, ok := events[s.eventID]
		if !ok {
			p = &pending{e: w.load(ctx, s)}
			events[s.eventID] = p
		}
		p.expires = w.apply(p.e, s)
	}
	for _, ref := range order {
		recs := make([]store.HistoryRecord, 0, len(bySub[ref]))
		for id, p := range bySub[ref] {
			payload, err := json.Marshal(p.e)
			if err != nil {
				w.log.Error("encoding a delivery history", "err", err)
				continue
			}
			recs = append(recs, store.HistoryRecord{EventID: id, Expires: p.expires, Payload: payload})
		}
		err := w.store.PutHistory(ctx, ref.topic, ref.sub, recs)
		if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrClosed) {
			w.log.Warn("saving delivery histories", logattr.Topic, ref.topic, logattr.Subscription, ref.sub, "err", err)
		}
	}
}

// load returns the stored history s adds to, or a new one. A first attempt starts afresh
// without a read, so an event delivered at once costs one write and no read.
func (w *historyWriter) load(ctx context.Context, s *historyStep) *Explanation {
	fresh := &Explanation{EventID: s.eventID, PublishTime: s.publish, Attempts: []ExplainedAttempt{}}
	if s.attempt.Attempt <= 1 && !s.attempt.NoAttempt {
		return fresh
	}
	rec, err := w.store.History(ctx, s.topic, s.sub, s.eventID, s.attempt.Time)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrClosed) {
			w.log.Warn("reading a delivery history", logattr.Topic, s.topic, logattr.Subscription, s.sub, "err", err)
		}
		return fresh
	}
	var e Explanation
	if err := json.Unmarshal(rec.Payload, &e); err != nil {
		w.log.Warn("discarding an unreadable delivery history", logattr.Topic, s.topic, logattr.Subscription, s.sub, "err", err)
		return fresh
	}
	return &e
}

// apply adds step s to history e and returns when e expires.
func (w *historyWriter) apply(e *Explanation, s *historyStep) time.Time {
	a := s.attempt
	// How long the attempt waited past its due time: the previous retry's due time, or the
	// publish time for a first attempt.
	due := e.PublishTime
	if n := len(e.Attempts); n > 0 && !e.Attempts[n-1].Due.IsZero() {
		due = e.Attempts[n-1].Due
	}
	// Under minHeldBack it is the ordinary latency of dispatch, not worth telling, unless the
	// attempt was a probation's probe.
	if held := a.Time.Sub(due); !a.NoAttempt && !due.IsZero() && held > 0 && (held >= minHeldBack || a.Probe) {
		a.HeldBack = held
	}
	e.Attempts = append(e.Attempts, a)
	if over := len(e.Attempts) - w.cfg.Attempts; over > 0 {
		e.Attempts = append([]ExplainedAttempt(nil), e.Attempts[over:]...)
		e.EarlierAttempts += over
	}
	if !a.NoAttempt {
		e.AttemptsMade = a.Attempt
	}
	e.MaxDeliveryAttempts, e.Deadline = s.maxAttempts, s.deadline
	e.NextAttempt, e.Reason = time.Time{}, ""
	switch s.dec.Action {
	case retry.Retry:
		e.State, e.NextAttempt = EventRetrying, s.dec.At
		return s.dec.At.Add(w.cfg.Retention)
	case retry.DeadLetter:
		e.State, e.Reason = EventDeadLettered, s.dec.Reason
	case retry.Drop:
		e.State, e.Reason = EventDropped, s.dec.Reason
	default:
		e.State = EventDelivered
	}
	return a.Time.Add(a.Duration).Add(w.cfg.Retention)
}
