package disk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/store"
)

// A subscription's state: its cursor (held in memory as well), parked events and probation,
// read by LoadSubscription and ParkedEvents and written by UpdateSubscription through write,
// which keeps the writes in memory while the store is failed (pending.go). Delivery histories
// are in history.go.

type sub struct {
	id  uint64
	ops sync.WaitGroup // calls under way on the subscription; DeleteSubscription waits

	mu     sync.Mutex // guards cursor, damaged and lost
	cursor uint64
	// damaged holds the parked events whose records were found not to decode, reported
	// once each (parkedDamage).
	damaged map[uint64]bool
	// lost holds the parts of the state found in damaged table blocks, reported once each
	// (stateDamage).
	lost []stateLoss
	// cursorUnread is set by load when the cursor is in a damaged table block, or does not
	// decode (cursorUndecodable too); repairCursors starts the subscription again at its
	// journal's oldest entry.
	cursorUnread, cursorUndecodable bool
	cursorErr                       error // pebble's error for a cursor in a damaged block
}

func (sb *sub) getCursor() uint64 {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.cursor
}

// raise moves the in-memory cursor up to c (never down).
func (sb *sub) raise(c uint64) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.cursor = max(sb.cursor, c)
}

// pendingWrite is a subscription state write (UpdateSubscription or Trim) taken while the
// store's generation has failed, written to the next one in order.
type pendingWrite struct {
	t       *topic
	sb      *sub // nil for a Trim
	u       store.Update
	cursor  uint64 // the cursor after u
	through uint64 // a Trim's bound
	from    uint64 // a Trim's first seq
	// merged, when set, holds the updates of the subscription merged into this one (and u
	// only their cursor): see pending.go.
	merged *mergedUpdate
}

// write writes a subscription state write (an update or a trim) without a sync. When the
// generation has failed, the write is kept in memory (Store.pending) and nil returned: it is
// written to the next generation, in order, before that one takes any other write.
func (s *Store) write(g *generation, w pendingWrite) error {
	for {
		if !g.isFailed() {
			b := g.db.NewBatch()
			if err := w.build(b); err != nil {
				_ = b.Close()
				return err
			}
			if b.Empty() {
				_ = b.Close()
				return nil
			}
			opts := pebble.NoSync
			if w.durable() {
				opts = pebble.Sync
			}
			err := g.commit(b, opts, s.onFail)
			if err == nil || !isFailure(err) {
				return err
			}
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		if s.gen == g {
			s.keep(w)
			s.mu.Unlock()
			return nil
		}
		g = s.gen // reopened meanwhile: write to the new instance
		s.mu.Unlock()
	}
}

// durable reports whether w is synced when written: an update that hands dead letters over
// ([store.Update.DeadLetters]) or asks for it ([store.Update.Sync]).
func (w *pendingWrite) durable() bool {
	if w.merged != nil {
		return w.merged.sync || len(w.merged.dl) > 0
	}
	return w.sb != nil && (len(w.u.DeadLetters) > 0 || w.u.Sync)
}

// build adds w to b.
func (w *pendingWrite) build(b *pebble.Batch) error {
	if w.sb == nil {
		return errors.Join(
			b.DeleteRange(seqKey(prefixJournal, w.t.id, w.from), seqKey(prefixJournal, w.t.id, w.through+1), nil),
			b.Set(idKey(prefixFloor, w.t.id), encodeUint64(w.through), nil))
	}
	return buildUpdate(b, w.sb.id, w.cursor, w.update())
}

// Cursors implements [store.Store]. It reads the cursors kept in memory: no disk read. A
// cursor is taken there only after its update is committed (or, while the store is failed,
// kept in memory in order), so a Trim based on it is written to the log after that update,
// and a crash that keeps the Trim keeps the update too.
func (s *Store) Cursors(ctx context.Context, topicName string) (map[string]uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	t, ok := s.topics[topicName]
	if !ok {
		return nil, fmt.Errorf("topic %q: %w", topicName, store.ErrNotFound)
	}
	cursors := make(map[string]uint64, len(t.subs))
	for name, sb := range t.subs {
		cursors[name] = sb.getCursor()
	}
	return cursors, nil
}

// LoadSubscription implements [store.Store]. While the store is failed it returns the state
// on disk with the updates kept in memory applied.
func (s *Store) LoadSubscription(ctx context.Context, topicName, name string) (store.SubscriptionState, error) {
	return s.loadSubscription(ctx, topicName, name, true)
}

// LoadSubscriptionIndex implements [store.Store]: LoadSubscription decoding only the head of
// each parked value (its attempts, times and outcome come before the event).
func (s *Store) LoadSubscriptionIndex(ctx context.Context, topicName, name string) (store.SubscriptionState, error) {
	return s.loadSubscription(ctx, topicName, name, false)
}

// pendingOf returns the updates of sb kept in memory while the store is failed, oldest first
// (nil when there are none).
func (s *Store) pendingOf(sb *sub) []store.Update {
	var pending []store.Update
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, w := range s.pending {
		if w.sb == sb {
			pending = append(pending, w.update())
		}
	}
	return pending
}

func (s *Store) loadSubscription(ctx context.Context, topicName, name string, bodies bool) (store.SubscriptionState, error) {
	if err := ctx.Err(); err != nil {
		return store.SubscriptionState{}, err
	}
	c, err := s.enter(topicName, name)
	if err != nil {
		return store.SubscriptionState{}, err
	}
	defer c.done()
	sb := c.sb
	pending := s.pendingOf(sb)
	st := store.SubscriptionState{Epoch: sb.id, Cursor: sb.getCursor()}
	parked := map[uint64]store.Parked{}
	decode := decodeParked
	if !bodies {
		decode = decodeParkedIndex
	}
	last := c.t.lastSeq() // no event is parked past the journal's end
	lo, hi := idRange(prefixParked, sb.id)
	err = scanPastDamage(c.g.db, lo, hi, func(k, v []byte) error {
		p, err := decode(seqOf(k), v)
		if err != nil {
			if s.opts.ReadOnly || !errors.Is(err, errCorrupt) { // store check reports it
				return fmt.Errorf("parked event %d: %w", seqOf(k), err)
			}
			// One event's record, not the subscription's: failing the load would stop
			// the subscription for good.
			s.parkedDamage(topicName, name, sb, seqOf(k), err)
			if bodies {
				return nil // a queue subscription goes on without it
			}
			// Due at once with no head: a push subscription reads it then, finds it lost
			// (ParkedEvents leaves it out) and forgets it, deleting the record.
			p = store.Parked{Seq: seqOf(k)}
		}
		if pending == nil {
			st.Parked = append(st.Parked, p)
		} else {
			parked[p.Seq] = p
		}
		return nil
	}, func(bad, next []byte, blockErr error) ([]byte, error) {
		// A damaged table block: the parked retries in it are lost, reported once; the
		// load goes on after it.
		from := seqAt(bad)
		if from > last {
			return hi, nil // the damage lies past every seq the subscription can have parked
		}
		good := last + 1
		if len(next) == len(lo)+8 {
			good = min(good, seqOf(next))
		}
		l := s.stateDamage(topicName, name, sb, stateLoss{part: partParked, lo: from, hi: good - 1}, blockErr)
		return seqKey(prefixParked, sb.id, max(good, l.hi+1)), nil
	})
	if err != nil {
		return store.SubscriptionState{}, fmt.Errorf("loading subscription %q of topic %q: %w", name, topicName, err)
	}
	if v, ok, err := get(c.g.db, idKey(prefixProbation, sb.id)); pebble.IsCorruptionError(err) {
		s.stateDamage(topicName, name, sb, stateLoss{part: partProbation}, err)
	} else if err != nil {
		return store.SubscriptionState{}, fmt.Errorf("loading subscription %q of topic %q: %w", name, topicName, err)
	} else if ok {
		if st.Probation, err = decodeOpaque(v); err != nil {
			return store.SubscriptionState{}, fmt.Errorf("loading subscription %q of topic %q: probation state: %w", name, topicName, err)
		}
	}
	if pending != nil {
		st.Parked = applyPending(&st, parked, pending)
		if !bodies {
			for i := range st.Parked {
				st.Parked[i].Event = nil
			}
		}
	}
	return st, nil
}

// ParkedEvents implements [store.Store]: one point read per seq. While the store is failed
// the updates kept in memory are applied.
func (s *Store) ParkedEvents(ctx context.Context, topicName, name string, seqs []uint64) ([]store.Parked, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.enter(topicName, name)
	if err != nil {
		return nil, err
	}
	defer c.done()
	sb := c.sb
	pending := s.pendingOf(sb)
	sorted := slices.Compact(slices.Sorted(slices.Values(seqs)))
	out := make([]store.Parked, 0, len(sorted))
	for _, seq := range sorted {
		v, ok, err := get(c.g.db, seqKey(prefixParked, sb.id, seq))
		if pebble.IsCorruptionError(err) {
			// Left out, lost: the subscription forgets the event, as one missing.
			s.stateDamage(topicName, name, sb, stateLoss{part: partParked, lo: seq, hi: seq}, err)
			ok, err = false, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading parked event %d of subscription %q of topic %q: %w", seq, name, topicName, err)
		}
		p, found := store.Parked{}, ok
		if ok {
			if p, err = decodeParked(seq, v); err != nil {
				if !errors.Is(err, errCorrupt) {
					return nil, fmt.Errorf("reading parked event %d of subscription %q of topic %q: %w", seq, name, topicName, err)
				}
				// Left out: the subscription forgets the event, as one missing.
				s.parkedDamage(topicName, name, sb, seq, err)
				p, found = store.Parked{}, false
			}
		}
		for _, u := range pending { // in order: the last word on seq wins
			if slices.Contains(u.Delete, seq) {
				found = false
			}
			for _, q := range u.Put {
				if q.Seq == seq {
					p, found = q, true
				}
			}
		}
		if found {
			out = append(out, p)
		}
	}
	return out, nil
}

// applyPending applies updates kept in memory to a loaded state (parked by seq) and returns
// the parked events in seq order.
func applyPending(st *store.SubscriptionState, parked map[uint64]store.Parked, pending []store.Update) []store.Parked {
	for _, u := range pending {
		for _, seq := range u.Delete {
			delete(parked, seq)
		}
		for _, p := range u.Put {
			parked[p.Seq] = p
		}
		switch {
		case u.Probation == nil:
		case len(u.Probation) == 0:
			st.Probation = nil
		default:
			st.Probation = u.Probation
		}
	}
	out := make([]store.Parked, 0, len(parked))
	for _, p := range parked {
		out = append(out, p)
	}
	sortParked(out)
	return out
}

// UpdateSubscription implements [store.Store]. A subscription's epoch is its id, which no
// other subscription ever gets (ids come from one counter that never goes back): an update of
// another epoch applies nothing. The update is one batch, committed without a sync: after a crash the newest updates may be missing, never reordered (pebble's log is
// written in commit order). Updates of one subscription come from its actor one at a time;
// no lock is held while the batch is committed. While the store is failed the update is
// kept in memory (LoadSubscription and Cursors see it) and written when the store has
// reopened itself: delivery goes on on a full disk.
// An update that carries dead letters is committed with a sync; while the store is failed it is
// kept in memory like the others, settlement and dead letters together, so a crash then
// loses both and the events are attempted again.
func (s *Store) UpdateSubscription(ctx context.Context, topicName, name string, u store.Update) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := s.enter(topicName, name)
	if err != nil {
		return err
	}
	defer c.done()
	sb := c.sb
	if u.Epoch != 0 && u.Epoch != sb.id {
		return fmt.Errorf("updating subscription %q of topic %q: %w", name, topicName, store.ErrStaleEpoch)
	}
	w := pendingWrite{t: c.t, sb: sb, u: u}
	if old := sb.getCursor(); u.Cursor > old {
		w.cursor = u.Cursor // the cursor key is written only when it moves
	}
	cursor := w.cursor
	if err := s.write(c.g, w); err != nil {
		return fmt.Errorf("updating subscription %q of topic %q: %w", name, topicName, err)
	}
	sb.raise(cursor)
	return nil
}

// buildUpdate adds u to b: Deletes before Puts, so that a Seq in both ends up parked, as the
// conformance suite fixes. The cursor is written as given (the caller has taken the max).
func buildUpdate(b *pebble.Batch, subID, cursor uint64, u store.Update) error {
	if cursor != 0 {
		if err := b.Set(idKey(prefixCursor, subID), encodeUint64(cursor), nil); err != nil {
			return err
		}
	}
	for _, seq := range u.Delete {
		if err := b.Delete(seqKey(prefixParked, subID, seq), nil); err != nil {
			return err
		}
	}
	var buf []byte
	for i := range u.Put {
		buf = appendParked(buf[:0], &u.Put[i])
		if err := b.Set(seqKey(prefixParked, subID, u.Put[i].Seq), buf, nil); err != nil {
			return err
		}
	}
	for _, r := range u.DeadLetters {
		if err := b.Set(nameKey(prefixDeadLetter, r.ID), appendOpaque(nil, r.Payload), nil); err != nil {
			return err
		}
	}
	switch {
	case u.Probation == nil:
	case len(u.Probation) == 0:
		return b.Delete(idKey(prefixProbation, subID), nil)
	default:
		return b.Set(idKey(prefixProbation, subID), appendOpaque(nil, u.Probation), nil)
	}
	return nil
}
