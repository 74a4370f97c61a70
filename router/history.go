package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// maxHistoryQueue bounds the steps (one event's share of an attempt record) waiting for the
// history writer; past it new steps are dropped (and logged): histories are advisory and must
// never hold delivery back. The queue holds the attempt records themselves, a few hundred
// bytes per event, so a full queue holds a few MB.
const maxHistoryQueue = 1 << 14

// maxHistoryBatch bounds the steps the writer takes from its queue for one write. A write
// holds, per step, the event's history (read back for a retry), its encoding and its share of
// the store's write batch, about 1 KB in all: had the writer taken the whole queue at once, a
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
	queue   []queuedRecord
	spare   []queuedRecord // an emptied queue array, for the next queue to reuse
	steps   int            // steps in queue
	queued  uint64         // steps ever queued (or dropped)
	written uint64         // steps ever taken and handled
	dropped int
	closed  bool

	wake chan struct{} // capacity 1
	done chan struct{}

	// expiring ends with close: an expiry still running then (a cluster store with many
	// expired histories takes seconds) is cut, and the next start's first hour runs it again,
	// instead of holding the router's close past its grace.
	expiring     context.Context
	stopExpiring context.CancelFunc

	// What write reuses from batch to batch; only the writer's goroutine touches it.
	pending []pendingHistory
	index   map[historyKey]int // into pending

	// waiting holds the payloads last written of queue subscriptions' events waiting for a
	// settlement or a receipt (Locked or Available), at most maxWaitingHistories of them:
	// the step that follows a receipt, an acknowledgement most often, reads its history
	// from here, not from the store. Only the writer's goroutine touches it.
	waiting map[historyKey][]byte
}

// maxWaitingHistories bounds historyWriter.waiting (a few hundred bytes each); when it is
// full it is emptied, and the next steps of the events it held read their histories from the
// store.
const maxWaitingHistories = 1 << 12

// queuedRecord is an attempt record waiting for the history writer: the steps of its events
// from to to (exclusive). The actor never changes a record once it reported it, so the
// record's fields shared by its events are read from it, not copied per event.
type queuedRecord struct {
	rec      *actors.AttemptRecord
	policy   *retry.Policy // the subscription's, for the deadline and maxDeliveryAttempts
	from, to int
}

// historyKey names one event's history, of one life (epoch) of its subscription: the steps
// of a deleted subscription and of one created again under its name are never merged.
type historyKey struct {
	topic, sub, id string
	epoch          uint64
}

// pendingHistory is an event's history while a batch is written: read back from the store
// for a retry, or new, with the batch's steps added.
type pendingHistory struct {
	key     historyKey
	e       Explanation
	expires time.Time
}

func newHistoryWriter(st store.Store, cfg HistoryConfig, log *slog.Logger) *historyWriter {
	w := &historyWriter{
		store: st, cfg: cfg, log: log, wake: make(chan struct{}, 1), done: make(chan struct{}),
		index: make(map[historyKey]int), waiting: make(map[historyKey][]byte),
	}
	w.expiring, w.stopExpiring = context.WithCancel(context.Background())
	w.cond = sync.NewCond(&w.mu)
	go w.run()
	return w
}

// enqueue queues the steps of rec's events. It never blocks on I/O and, once the queue's
// array has grown, allocates nothing.
func (w *historyWriter) enqueue(rec *actors.AttemptRecord, policy *retry.Policy) {
	n := len(rec.EventIDs)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	if room := maxHistoryQueue - w.steps; n > room {
		over := n - max(room, 0)
		w.dropped += over
		w.written += uint64(over) // nothing to wait for
		w.queued += uint64(over)
		n -= over
	}
	if n > 0 {
		if w.queue == nil {
			w.queue, w.spare = w.spare, nil
		}
		w.queue = append(w.queue, queuedRecord{rec: rec, policy: policy, to: n})
		w.steps += n
		w.queued += uint64(n)
	}
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
	w.stopExpiring()
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
			if err := w.store.ExpireHistory(w.expiring, now); err != nil && !errors.Is(err, store.ErrClosed) && w.expiring.Err() == nil {
				w.log.Warn("expiring delivery histories", "err", err)
			}
		}
	}
}

// drain writes everything queued, batch after batch of at most maxHistoryBatch steps.
func (w *historyWriter) drain() {
	for {
		w.mu.Lock()
		recs, steps := w.take()
		dropped := w.dropped
		w.dropped = 0
		w.mu.Unlock()
		if dropped > 0 {
			w.log.Warn("delivery history steps dropped: the history writer fell behind", "steps", dropped)
		}
		if steps == 0 {
			return
		}
		w.write(recs)
		clear(recs) // the records are written: let them go
		w.mu.Lock()
		w.written += uint64(steps)
		if w.spare == nil && cap(recs) <= 2*maxHistoryBatch {
			w.spare = recs[:0]
		}
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

// take removes and returns the oldest records queued, with at most maxHistoryBatch steps in
// all (the last one's steps split when it has more), and the number of steps; w.mu is held.
// The rest stays queued in place; the slots taken are cleared so that the queue's array does
// not keep what they referred to alive.
func (w *historyWriter) take() ([]queuedRecord, int) {
	if w.steps <= maxHistoryBatch {
		recs, steps := w.queue, w.steps
		w.queue, w.steps = nil, 0
		return recs, steps
	}
	n, i := 0, 0
	for n < maxHistoryBatch {
		n += w.queue[i].to - w.queue[i].from
		i++
	}
	recs := slices.Clone(w.queue[:i])
	if over := n - maxHistoryBatch; over > 0 { // the last record's later steps stay queued
		recs[i-1].to -= over
		w.queue[i-1].from = recs[i-1].to
		i--
	}
	clear(w.queue[:i])
	w.queue = w.queue[i:]
	w.steps -= maxHistoryBatch
	return recs, maxHistoryBatch
}

// subRef names one life (epoch) of a subscription.
type subRef struct {
	topic, sub string
	epoch      uint64
}

// write merges the records' steps into their events' histories and writes them, one
// PutHistory per subscription and epoch. A write of a deleted subscription's epoch is
// refused by the store (store.ErrStaleEpoch, an ErrNotFound) and dropped, so it cannot show
// up under a subscription created again under the name.
func (w *historyWriter) write(recs []queuedRecord) {
	ctx := context.Background()
	clear(w.index)
	w.pending = w.pending[:0]
	for _, q := range recs {
		rec := q.rec
		detail := ""
		if rec.Detail != "" {
			detail = excerpt(rec.Detail)
		}
		for i := q.from; i < q.to; i++ {
			key := historyKey{rec.Topic, rec.Subscription, rec.EventIDs[i], rec.Epoch}
			var publish time.Time
			if i < len(rec.PublishTimes) {
				publish = rec.PublishTimes[i]
			}
			k, ok := w.index[key]
			if !ok {
				k = len(w.pending)
				w.index[key] = k
				w.pending = slices.Grow(w.pending, 1)[:k+1]
				p := &w.pending[k]
				*p = pendingHistory{key: key, e: Explanation{Attempts: p.e.Attempts[:0]}}
				w.load(ctx, p, publish, rec, i)
			}
			p := &w.pending[k]
			p.expires = w.apply(&p.e, rec, i, publish, detail, q.policy)
		}
	}
	// One payload array for the batch: the stores copy what they keep.
	size := 0
	for i := range w.pending {
		size += 96 + 160*(len(w.pending[i].e.Attempts)-1)
	}
	buf := make([]byte, 0, size)
	type group struct {
		ref  subRef
		recs []store.HistoryRecord
	}
	var groups []group
	bySub := make(map[subRef]int, 1)
	for i := range w.pending {
		p := &w.pending[i]
		ref := subRef{p.key.topic, p.key.sub, p.key.epoch}
		g, ok := bySub[ref]
		if !ok {
			g = len(groups)
			bySub[ref] = g
			groups = append(groups, group{ref: ref, recs: make([]store.HistoryRecord, 0, len(w.pending)/(g+1))})
		}
		start := len(buf)
		buf = appendExplanation(buf, &p.e)
		if p.e.State == EventLocked || p.e.State == EventAvailable {
			if len(w.waiting) >= maxWaitingHistories {
				clear(w.waiting)
			}
			w.waiting[p.key] = slices.Clone(buf[start:])
		} else if len(w.waiting) > 0 {
			delete(w.waiting, p.key)
		}
		groups[g].recs = append(groups[g].recs, store.HistoryRecord{EventID: p.key.id, Expires: p.expires, Payload: buf[start:len(buf):len(buf)]})
	}
	for _, g := range groups {
		err := w.store.PutHistory(ctx, g.ref.topic, g.ref.sub, g.ref.epoch, g.recs)
		if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrClosed) {
			w.log.Warn("saving delivery histories", logattr.Topic, g.ref.topic, logattr.Subscription, g.ref.sub, "err", err)
		}
	}
}

// load fills p, whose key and e.Attempts array are set, with the stored history that event
// i of rec adds to, or starts it afresh. A first attempt (or a queue's first receipt), cut
// by a stop or not, starts afresh without a read, and so does an event that ended when it
// came due without ever being attempted (or received): no history of theirs can exist, so an
// event delivered at once costs one write and no read. After a cut attempt of the event
// (rec.AfterCut) they add to its history instead.
func (w *historyWriter) load(ctx context.Context, p *pendingHistory, publish time.Time, rec *actors.AttemptRecord, i int) {
	fresh := func() {
		p.e = Explanation{EventID: p.key.id, PublishTime: publish, Attempts: p.e.Attempts[:0]}
	}
	attempt, at := rec.Attempts[i], rec.Time
	first := attempt <= 1 && !rec.NoAttempt || rec.NoAttempt && attempt == 0
	if rec.DeadLetterDropped || i < len(rec.AfterCut) && rec.AfterCut[i] {
		first = false // it adds to the history that ended dead-lettered, or to the steps of its cut attempts
	}
	if rec.Pull != 0 {
		first = attempt <= 1 && rec.Pull == actors.PullReceived || attempt == 0 && rec.Pull == actors.PullEnded
	}
	if first {
		fresh()
		return
	}
	s := p.key
	// A waiting history of the same delivery count is the event's latest: no other step of it
	// came since, here or (in cluster mode) on a node that ran the subscription meanwhile.
	if b, ok := w.waiting[s]; ok && decodeExplanation(b, s.id, &p.e) == nil && p.e.AttemptsMade == attempt {
		return
	}
	stored, err := w.store.History(ctx, s.topic, s.sub, s.id, at)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrClosed) {
			w.log.Warn("reading a delivery history", logattr.Topic, s.topic, logattr.Subscription, s.sub, "err", err)
		}
		fresh()
		return
	}
	if err := decodeExplanation(stored.Payload, s.id, &p.e); err != nil {
		w.log.Warn("discarding an unreadable delivery history", logattr.Topic, s.topic, logattr.Subscription, s.sub, "err", err)
		fresh()
	}
}

// apply adds the step of event i of rec (published at publish; detail is the excerpt of
// rec.Detail) to history e and returns when e expires.
func (w *historyWriter) apply(e *Explanation, rec *actors.AttemptRecord, i int, publish time.Time, detail string, policy *retry.Policy) time.Time {
	if rec.Pull != 0 {
		return w.applyPull(e, rec, i, publish, policy)
	}
	if rec.DeadLetterDropped {
		return w.applyDeadLetterDropped(e, rec, i)
	}
	dec := &rec.Decisions[i]
	a := ExplainedAttempt{
		Attempt: rec.Attempts[i], Time: rec.Time, Duration: rec.Duration,
		StatusCode: rec.StatusCode, Response: detail, Probe: rec.Probe, NoAttempt: rec.NoAttempt,
		Explanation: dec.Explain(),
	}
	if rec.Outcome != 0 {
		a.Outcome = rec.Outcome.String()
	}
	if dec.Action != 0 {
		a.Decision = dec.Action.String()
	}
	if dec.Why.Rule != 0 {
		a.Rule = dec.Why.Rule.String()
	}
	if dec.Action == retry.Retry {
		a.Due = dec.At
	}
	// How long the attempt waited past its due time: the previous retry's due time, or the
	// publish time for a first attempt. After an attempt cut by the subscription's stop it
	// waited for the subscription to run again (the router stopped, say), which that
	// attempt's explanation tells; no probation or in-flight limit held it.
	due := e.PublishTime
	if n := len(e.Attempts); n > 0 && !e.Attempts[n-1].Due.IsZero() {
		due = e.Attempts[n-1].Due
		if e.Attempts[n-1].Rule == retry.RuleStopped.String() {
			due = time.Time{}
		}
	}
	// Under minHeldBack it is the ordinary latency of dispatch, not worth telling, unless the
	// attempt was a probation's probe.
	if held := a.Time.Sub(due); !a.NoAttempt && !due.IsZero() && held > 0 && (held >= minHeldBack || a.Probe) {
		a.HeldBack = held
	}
	w.keep(e, a)
	switch {
	case dec.Why.Rule == retry.RuleStopped:
		e.CutAttempts++ // not counted: the next attempt has its number
	case !a.NoAttempt:
		e.AttemptsMade = a.Attempt
	}
	e.MaxDeliveryAttempts, e.Deadline = policy.MaxAttempts(), policy.Deadline(publish)
	e.NextAttempt, e.Reason = time.Time{}, ""
	switch dec.Action {
	case retry.Retry:
		e.State, e.NextAttempt = EventRetrying, dec.At
		return dec.At.Add(w.cfg.Retention)
	case retry.DeadLetter:
		e.State, e.Reason = EventDeadLettered, dec.Reason
	case retry.Drop:
		e.State, e.Reason = EventDropped, dec.Reason
	default:
		e.State = EventDelivered
	}
	return a.Time.Add(a.Duration).Add(w.cfg.Retention)
}

// StepDeadLetterDropped is the step ([ExplainedAttempt.Step]) that ends the history of a
// dead-lettered event whose record the dead-letter destination never took: it was dropped
// after the destination failed (or refused) the writes for four hours.
const StepDeadLetterDropped = "DeadLetterDropped"

// applyDeadLetterDropped ends history e of event i of rec, a DeadLetterDropped record: the
// event, dead-lettered, is Dropped with reason DeadLetterDestinationUnavailable, and a last
// step says why. It returns when e expires.
func (w *historyWriter) applyDeadLetterDropped(e *Explanation, rec *actors.AttemptRecord, i int) time.Time {
	w.keep(e, ExplainedAttempt{
		Attempt: rec.Attempts[i], Time: rec.Time, Step: StepDeadLetterDropped, Decision: retry.Drop.String(),
		Explanation: "the dead-letter record was dropped unwritten: " + rec.Detail,
	})
	if e.AttemptsMade == 0 {
		e.AttemptsMade = rec.Attempts[i]
	}
	e.State, e.Reason, e.NextAttempt = EventDropped, schemas.DeadLetterDestinationUnavailable, time.Time{}
	return rec.Time.Add(w.cfg.Retention)
}

// keep adds a to e's attempts, keeping the latest HistoryConfig.Attempts of them.
func (w *historyWriter) keep(e *Explanation, a ExplainedAttempt) {
	e.Attempts = append(e.Attempts, a)
	if over := len(e.Attempts) - w.cfg.Attempts; over > 0 {
		n := copy(e.Attempts, e.Attempts[over:])
		clear(e.Attempts[n:])
		e.Attempts = e.Attempts[:n]
		e.EarlierAttempts += over
	}
}

// applyPull adds the pull step of event i of rec (a queue subscription's record, published at
// publish) to history e and returns when e expires: Retention after the step that ended the
// event, or after the event's time to live while it waits for a settlement or a receipt (no
// step of it can come later).
func (w *historyWriter) applyPull(e *Explanation, rec *actors.AttemptRecord, i int, publish time.Time, policy *retry.Policy) time.Time {
	dec := &rec.Decisions[i]
	count := rec.Attempts[i]
	a := ExplainedAttempt{Attempt: count, Time: rec.Time, Step: rec.Pull.String()}
	e.AttemptsMade, e.MaxDeliveryAttempts, e.Deadline = count, policy.MaxAttempts(), policy.Deadline(publish)
	e.NextAttempt, e.Reason = time.Time{}, ""
	at := func(t time.Time) string { return t.UTC().Format(time.TimeOnly) }
	switch rec.Pull {
	case actors.PullReceived:
		a.LockedUntil = rec.Until
		a.Explanation = fmt.Sprintf("received (delivery %d of %d), locked until %s", count, e.MaxDeliveryAttempts, at(rec.Until))
		e.State = EventLocked
	case actors.PullRenewed:
		a.LockedUntil = rec.Until
		a.Explanation = "lock renewed until " + at(rec.Until)
		e.State = EventLocked
	case actors.PullAcknowledged:
		a.Explanation = "acknowledged"
		e.State = EventDelivered
	case actors.PullReleased:
		a.Explanation = "released"
		if !rec.Until.IsZero() {
			a.Due, e.NextAttempt = rec.Until, rec.Until
			a.Explanation = fmt.Sprintf("released with a delay of %s, available again at %s", rec.Until.Sub(rec.Time), at(rec.Until))
		}
		e.State = EventAvailable
	case actors.PullRejected:
		a.Explanation = "rejected"
	case actors.PullLockExpired:
		a.Explanation = "lock expired unsettled"
		e.State = EventAvailable
	case actors.PullLockLost:
		a.Explanation = "lock lost unsettled before it expired: the event subscription stopped here (it was updated, moved to another node or restarted, or the server stopped), and locks live in its memory; the event is available again once it runs, its delivery count kept"
		e.State = EventAvailable
	default: // PullEnded
		a.Explanation = "ended"
	}
	if dec.Action != 0 {
		a.Decision = dec.Action.String()
		if dec.Why.Rule != 0 {
			a.Rule = dec.Why.Rule.String()
		}
		if why := dec.Explain(); strings.HasPrefix(why, " ") {
			a.Explanation += why
		} else {
			a.Explanation += ": " + why
		}
		e.State, e.Reason = EventDropped, dec.Reason
		if dec.Action == retry.DeadLetter {
			e.State = EventDeadLettered
		}
	}
	w.keep(e, a)
	if e.State == EventLocked || e.State == EventAvailable {
		return e.Deadline.Add(w.cfg.Retention)
	}
	return a.Time.Add(w.cfg.Retention)
}
