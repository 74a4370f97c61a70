package disk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// A topic's journal: Append hands out sequence numbers under the topic's lock and makes them
// visible in order once they are on disk, Read and LastSeq stop at the newest visible one, and
// Trim deletes the entries up to a bound.

// topic is a topic's in-memory state. id never changes; subs is guarded by Store.mu.
type topic struct {
	id   uint64
	subs map[string]*sub
	ops  sync.WaitGroup // calls under way on the topic; DeleteTopic waits for them

	mu       sync.Mutex
	next     uint64      // highest seq handed out to an Append
	visible  uint64      // every seq <= visible is on disk; Read and LastSeq stop here
	inflight []*appendOp // Appends handed seqs above visible, in seq order
	broken   bool        // an Append failed: nothing becomes visible until the store recovers
	floor    uint64      // highest trimmed seq
	trimming bool        // a Trim is writing; another one returns at once
	damaged  []damage    // journal ranges found unreadable (corruption.go)
	// endClosed: the journal's newest entries are in a damaged table block that reaches
	// past the journal's end, so no new entry could be read back: Append refuses
	// (readJournalEnd). endReported: that damage, or the newest entries' alone, is reported.
	endClosed, endReported bool
	// damagedSubs holds the subscriptions whose definitions Open found damaged, by stored
	// name; guarded by Store.mu, as subs (defdamage.go).
	damagedSubs map[string]*damagedDef
}

// appendOp is one Append between handing out its seqs and their becoming visible.
type appendOp struct {
	last uint64
	done bool
	ch   chan struct{} // closed when the op leaves topic.inflight
}

func lastJournalSeq(db *pebble.DB, topicID uint64) (uint64, error) {
	lo, hi := idRange(prefixJournal, topicID)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, err
	}
	var last uint64
	if it.Last() {
		last = seqOf(it.Key())
	}
	return last, errors.Join(it.Error(), it.Close())
}

// Append implements [store.Store]. It writes the events in one batch committed with a sync;
// pebble gives concurrent synced commits one log fsync. Once ctx is checked the write is not
// abandoned: a sync cannot be called back.
//
// It is refused with an error wrapping [store.ErrInsufficientStorage] while the disk is
// below Options.MinFreeBytes, and with one wrapping [ErrFailed] while the store is failed
// (and [store.ErrDiskFull] as well when it failed on a full disk).
//
// Sequence numbers are handed out under the topic's lock before the commit, so concurrent
// Appends to one topic commit in parallel. An Append returns only when every earlier number
// of the topic is on disk as well, and Read and LastSeq never go past such a gapless prefix:
// nobody sees number n+1 while n may still come. A failed commit fails the store (ErrFailed)
// and stops the topic's numbering until the store has reopened itself, so a number is never
// handed out twice; numbering then continues from the newest entry on disk. Numbers of an
// Append that failed may then be missing from the journal (a hole nobody was told about) or,
// when they were the newest, be handed out again (nobody saw them).
func (s *Store) Append(ctx context.Context, topicName string, publishTime time.Time, events []*schemas.Event) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c, err := s.enter(topicName, "")
	if err != nil {
		return 0, err
	}
	defer c.done()
	t := c.t
	if len(events) == 0 {
		return t.lastSeq(), nil
	}
	if err := s.writable(c.g); err != nil {
		return 0, fmt.Errorf("appending to topic %q: %w", topicName, err)
	}
	size := 0
	for _, ev := range events {
		size += entryOverhead + encodedEntrySize(ev)
	}
	b := c.g.appendBatch(size)

	op, err := t.reserve(len(events))
	if err != nil {
		_ = b.Close()
		return 0, fmt.Errorf("appending to topic %q: %w", topicName, errors.Join(err, c.g.err()))
	}
	// Once numbers are handed out, every way out of here finishes op; one that does not
	// commit breaks the topic, so that the numbers are not handed out again.
	committed := false
	defer func() { t.finish(op, committed) }()
	first := op.last - uint64(len(events)) + 1
	for i := 0; i < len(events); {
		// One block: up to maxBlockEntries entries and about maxBlockBytes, encoded straight
		// into the batch.
		j, bytes := i+1, encodedEntrySize(events[i])
		for j < len(events) && j-i < maxBlockEntries && bytes+encodedEntrySize(events[j]) <= maxBlockBytes {
			bytes += encodedEntrySize(events[j])
			j++
		}
		key := seqKey(prefixJournal, t.id, first+uint64(j-1))
		op := b.SetDeferred(len(key), blockSize(publishTime, events[i:j]))
		copy(op.Key, key)
		if v := appendBlock(op.Value[:0], publishTime, events[i:j]); len(v) != len(op.Value) {
			panic(fmt.Sprintf("disk store: journal block of %d bytes, sized %d", len(v), len(op.Value)))
		}
		if err := op.Finish(); err != nil {
			_ = b.Close()
			return 0, fmt.Errorf("appending to topic %q: %w", topicName, err)
		}
		i = j
	}
	if err := c.g.commitThen(b, pebble.Sync, s.onFail, c.g.putAppendBatch); err != nil {
		return 0, fmt.Errorf("appending to topic %q: %w", topicName, err)
	}
	committed = true
	t.finish(op, true)
	<-op.ch
	if !t.isVisible(op.last) {
		return 0, fmt.Errorf("appending to topic %q: an earlier append failed: %w", topicName, errors.Join(ErrFailed, c.g.err()))
	}
	return op.last, nil
}

// maxRetainedAppend is the largest batch buffer an append keeps for the next append to reuse
// (generation.appendBatch; pebble keeps 1 MB by default).
const maxRetainedAppend = 32 << 20

// entryOverhead bounds what a journal entry adds to a batch besides its value: the key and
// pebble's kind byte and two length varints.
const entryOverhead = 17 + 1 + 2*binary.MaxVarintLen32

func (t *topic) lastSeq() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.visible
}

// readBounds returns the newest seq a Read may return and the trim floor.
func (t *topic) readBounds() (visible, floor uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.visible, t.floor
}

func (t *topic) isVisible(seq uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.visible >= seq
}

// reserve hands out n sequence numbers.
func (t *topic) reserve(n int) (*appendOp, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.broken {
		return nil, ErrFailed
	}
	if t.endClosed {
		return nil, errJournalEndClosed
	}
	t.next += uint64(n)
	op := &appendOp{last: t.next, ch: make(chan struct{})}
	t.inflight = append(t.inflight, op)
	return op, nil
}

// finish records that op's commit ended; only its first call counts. Committed ops at the
// head of inflight become visible and are released. A failed op breaks the topic: every op
// waiting is released without becoming visible.
func (t *topic) finish(op *appendOp, committed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if op.done {
		return
	}
	op.done = true
	if !committed {
		t.broken = true
	}
	if t.broken {
		for _, o := range t.inflight {
			close(o.ch)
		}
		t.inflight = nil
		return
	}
	for len(t.inflight) > 0 && t.inflight[0].done {
		head := t.inflight[0]
		t.visible = head.last
		close(head.ch)
		t.inflight[0] = nil
		t.inflight = t.inflight[1:]
	}
}

// Read implements [store.Store]. It works while the store is failed: stored events are still
// delivered.
func (s *Store) Read(ctx context.Context, topicName string, from uint64, limit int) ([]store.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.enter(topicName, "")
	if err != nil {
		return nil, err
	}
	defer c.done()
	visible, floor := c.t.readBounds()
	from = max(from, floor+1) // a block a Trim cut through still holds trimmed entries
	if limit <= 0 || from > visible {
		return nil, nil
	}
	var out []store.Entry
	bound := visible + 1 // the read stops before it: lower below a damaged table block
	var damage error     // pebble's error for the damaged table block bound is below
	for from <= visible && len(out) < limit {
		next := from
		var undecodable *undecodableBlock
		// A block's key is its last seq: the first key at or after from is the block
		// holding from (or the next one, after a hole).
		err = scan(c.g.db, seqKey(prefixJournal, c.t.id, from), seqKey(prefixJournal, c.t.id, bound), func(k, v []byte) error {
			err := decodeJournal(seqOf(k), v, next, func(e store.Entry) error {
				out = append(out, e)
				next = e.Seq + 1
				if len(out) == limit {
					return errStop
				}
				return nil
			})
			if errors.Is(err, errCorrupt) {
				undecodable = &undecodableBlock{last: seqOf(k), err: err}
				return undecodable
			}
			return err
		})
		switch {
		case err == nil && bound <= visible && next == from:
			// Nothing below the damaged block was left to read (the range held no entry):
			// on to the block, as below. (Taken for lost at once, the entries after the
			// block that other table files hold were reported lost with it.)
			if more, resume, ok := s.readAround(c.g, topicName, c.t, next, visible, limit-len(out), damage); ok {
				out = append(out, more...)
				from, bound = resume, visible+1
				continue
			}
			from, bound = s.skipDamage(c.g.db, topicName, c.t, next, visible), visible+1
		case err == nil && bound <= visible:
			from, bound = next, visible+1 // read below a damaged block: on to it
		case err == nil:
			return out, nil
		case undecodable != nil && errors.Is(err, undecodable):
			// A block pebble read back intact but that does not decode: the same loss as
			// a damaged table block, for its entries from next on.
			from = s.skipUndecodable(topicName, c.t, next, undecodable)
		case pebble.IsCorruptionError(err):
			if end := readableBefore(c.g.db, c.t, next, bound); end > next {
				// The entries below the damaged block, in other table files, are read.
				from, bound, damage = next, end, err
				continue
			}
			if more, resume, ok := s.readAround(c.g, topicName, c.t, next, visible, limit-len(out), err); ok {
				// What pebble cannot read for the damaged block, other table files may hold.
				out = append(out, more...)
				from, bound = resume, visible+1
				continue
			}
			// A damaged table block: say what is lost, once, and go on after it.
			from, bound = s.skipDamage(c.g.db, topicName, c.t, next, visible), visible+1
		default:
			return nil, fmt.Errorf("reading topic %q: %w", topicName, err)
		}
	}
	return out, nil
}

// LastSeq implements [store.Store].
func (s *Store) LastSeq(ctx context.Context, topicName string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c, err := s.enter(topicName, "")
	if err != nil {
		return 0, err
	}
	defer c.done()
	return c.t.lastSeq(), nil
}

// Trim implements [store.Store]. It deletes the entries after the previous Trim with one
// range tombstone, without a sync, and never past LastSeq (an Append under way keeps its
// entries). Starting at the previous Trim keeps tombstones disjoint: nested ones from 0 would
// pile up in every read of the topic. It records the highest trimmed seq in the same batch,
// so that numbering continues after a reopen even when nothing is left in the journal. A
// Trim of a topic that another Trim is writing returns at once (trims are coarse and asked
// again). While the store is failed the Trim is kept in memory and written, in order with
// the subscription updates, when the store has reopened itself.
func (s *Store) Trim(ctx context.Context, topicName string, through uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := s.enter(topicName, "")
	if err != nil {
		return err
	}
	defer c.done()
	t := c.t
	t.mu.Lock()
	through = min(through, t.visible)
	if through <= t.floor || t.trimming {
		t.mu.Unlock()
		return nil
	}
	from := t.floor + 1
	t.trimming = true
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.trimming = false
		t.mu.Unlock()
	}()
	w := pendingWrite{t: t, from: from, through: through}
	if err := s.write(c.g, w); err != nil {
		return fmt.Errorf("trimming topic %q: %w", topicName, err)
	}
	t.mu.Lock()
	t.floor = max(t.floor, through)
	t.mu.Unlock()
	s.reclaim.trims.Add(1)
	return nil
}
