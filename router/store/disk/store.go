package disk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// ErrClosed is returned by every method of a closed [Store]; it is [store.ErrClosed].
var ErrClosed = store.ErrClosed

// ErrFailed is returned, wrapped with the cause, once a write to disk has failed. The store
// then refuses every call: pebble cannot go on after a failed log write, and what it holds in
// memory may be ahead of what is on disk. Restart the process; opening the directory again
// recovers every acknowledged Append from the write-ahead log.
var ErrFailed = errors.New("disk store: a write to disk failed; restart to recover from the write-ahead log")

// Options configures [Open]. The zero value is usable.
type Options struct {
	// Logger receives pebble's own messages (with the attribute component=pebble) and the
	// store's report of a failed write. Nil discards them.
	Logger *slog.Logger
	// MemTableSize is the size of pebble's memtable in bytes: how much is written before it is
	// flushed to a table file. Up to four memtables can be in memory while flushes catch up.
	// Default 64 MiB.
	MemTableSize uint64
	// CacheSize is the size of pebble's block cache in bytes, which serves journal reads of
	// flushed entries (a subscription catching up). Default 64 MiB.
	CacheSize int64

	// fs replaces the file system, for tests (export_test.go).
	fs vfs.FS
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = 64 << 20
	}
	if o.CacheSize == 0 {
		o.CacheSize = 64 << 20
	}
	return o
}

// Store is the embedded durable [store.Store] on pebble. Open one with [Open]; a directory
// holds one Store at a time (pebble locks it).
type Store struct {
	db  *pebble.DB
	log *slog.Logger

	// mu is held shared by every operation for its whole length and exclusively by the
	// operations that change the catalogue (topics and subscriptions) and by Close. So Close
	// and DeleteTopic wait for operations under way, and no operation sees a half-changed
	// catalogue.
	mu     sync.RWMutex
	closed bool
	topics map[string]*topic
	nextID uint64 // highest id handed out to a topic or subscription

	failure atomic.Pointer[error] // set once, when a write fails
}

// topic is a topic's in-memory state. id never changes; subs is guarded by Store.mu.
type topic struct {
	id   uint64
	subs map[string]*sub

	mu       sync.Mutex
	next     uint64      // highest seq handed out to an Append
	visible  uint64      // every seq <= visible is on disk; Read and LastSeq stop here
	inflight []*appendOp // Appends handed seqs above visible, in seq order
	broken   bool        // an Append failed: nothing becomes visible any more

	trimMu sync.Mutex // orders Trims, so the floor on disk only grows
	floor  uint64     // highest trimmed seq; guarded by trimMu
}

// appendOp is one Append between handing out its seqs and their becoming visible.
type appendOp struct {
	last uint64
	done bool
	ch   chan struct{} // closed when the op leaves topic.inflight
}

type sub struct {
	id     uint64
	mu     sync.Mutex // orders UpdateSubscription and LoadSubscription
	cursor uint64
}

// Open opens or creates the store in dir.
func Open(dir string, opts Options) (_ *Store, err error) {
	defer catchFatal(&err)
	opts = opts.withDefaults()
	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref()
	popts := &pebble.Options{
		Cache:              cache,
		MemTableSize:       opts.MemTableSize,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{opts.Logger},
		FS:                 opts.fs,
	}
	db, err := pebble.Open(dir, popts)
	if err != nil {
		return nil, fmt.Errorf("opening disk store in %s: %w", dir, err)
	}
	s := &Store{db: db, log: opts.Logger, topics: make(map[string]*topic)}
	if err := s.load(); err != nil {
		return nil, errors.Join(fmt.Errorf("loading disk store in %s: %w", dir, err), db.Close())
	}
	return s, nil
}

// load reads the catalogue, cursors and sequence numbers into memory.
func (s *Store) load() error {
	if v, ok, err := s.get(nextIDKey); err != nil {
		return err
	} else if ok {
		if s.nextID, ok = decodeUint64(v); !ok {
			return fmt.Errorf("next id: %w", errCorrupt)
		}
	}
	byID := make(map[uint64]*topic)
	err := s.scan([]byte{prefixTopic}, []byte{prefixTopic + 1}, func(k, v []byte) error {
		id, _, err := decodeDef(v)
		if err != nil {
			return fmt.Errorf("topic %q: %w", k[1:], err)
		}
		t := &topic{id: id, subs: make(map[string]*sub)}
		s.topics[string(k[1:])] = t
		byID[id] = t
		s.nextID = max(s.nextID, id)
		return nil
	})
	if err != nil {
		return err
	}
	err = s.scan([]byte{prefixSub}, []byte{prefixSub + 1}, func(k, v []byte) error {
		if len(k) < 9 {
			return fmt.Errorf("subscription key %q: %w", k, errCorrupt)
		}
		t, ok := byID[idOf(k)]
		if !ok {
			return fmt.Errorf("subscription %q of a topic with no definition: %w", k[9:], errCorrupt)
		}
		id, _, err := decodeDef(v)
		if err != nil {
			return fmt.Errorf("subscription %q: %w", k[9:], err)
		}
		sb := &sub{id: id}
		if c, ok, err := s.get(idKey(prefixCursor, id)); err != nil {
			return err
		} else if ok {
			if sb.cursor, ok = decodeUint64(c); !ok {
				return fmt.Errorf("cursor of subscription %q: %w", k[9:], errCorrupt)
			}
		}
		t.subs[string(k[9:])] = sb
		s.nextID = max(s.nextID, id)
		return nil
	})
	if err != nil {
		return err
	}
	for name, t := range s.topics {
		if v, ok, err := s.get(idKey(prefixFloor, t.id)); err != nil {
			return err
		} else if ok {
			if t.floor, ok = decodeUint64(v); !ok {
				return fmt.Errorf("trim floor of topic %q: %w", name, errCorrupt)
			}
		}
		last, err := s.lastJournalSeq(t.id)
		if err != nil {
			return fmt.Errorf("journal of topic %q: %w", name, err)
		}
		// A journal trimmed to nothing has no key left to say where numbering was: the
		// floor does, so numbers are never handed out twice.
		t.next = max(last, t.floor)
		t.visible = t.next
	}
	return nil
}

func (s *Store) lastJournalSeq(topicID uint64) (uint64, error) {
	lo, hi := idRange(prefixJournal, topicID)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, err
	}
	var last uint64
	if it.Last() {
		last = seqOf(it.Key())
	}
	return last, errors.Join(it.Error(), it.Close())
}

// get reads one key; ok is false when it is absent. The value is a copy.
func (s *Store) get(key []byte) (v []byte, ok bool, err error) {
	val, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v = append([]byte(nil), val...)
	return v, true, closer.Close()
}

// scan calls fn for every key in [lo, hi) in order until fn returns an error. k and v are
// valid only during the call.
func (s *Store) scan(lo, hi []byte, fn func(k, v []byte) error) (err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, it.Error(), it.Close()) }()
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := fn(it.Key(), v); err != nil {
			if err == errStop {
				return nil
			}
			return err
		}
	}
	return nil
}

// errStop ends a scan early; scan returns nil for it.
var errStop = errors.New("stop")

// usable reports why the store cannot serve a call: closed or failed. Callers hold s.mu.
func (s *Store) usable() error {
	if s.closed {
		return ErrClosed
	}
	if f := s.failure.Load(); f != nil {
		return *f
	}
	return nil
}

// fail records the first write failure and returns the error every later call gets.
func (s *Store) fail(cause error) error {
	err := fmt.Errorf("%w: %w", ErrFailed, cause)
	if s.failure.CompareAndSwap(nil, &err) {
		s.log.Error("disk store: write failed; refusing further calls until restarted", "err", cause)
	}
	return *s.failure.Load()
}

// catchFatal, deferred, turns a *fatalError panic (pebble's Fatalf) into an error joined to
// *err; other panics go on.
func catchFatal(err *error) {
	if r := recover(); r != nil {
		f, ok := r.(*fatalError)
		if !ok {
			panic(r)
		}
		*err = errors.Join(*err, f)
	}
}

// commit commits b. A failed commit fails the store: pebble reports a failed log write by
// calling Logger.Fatalf in the committing goroutine, which panics with *fatalError here.
func (s *Store) commit(b *pebble.Batch, opts *pebble.WriteOptions) (err error) {
	if f := s.failure.Load(); f != nil {
		return *f
	}
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(*fatalError)
			if !ok {
				panic(r)
			}
			err = s.fail(f)
		}
	}()
	if err := b.Commit(opts); err != nil {
		return s.fail(err)
	}
	return nil
}

func (s *Store) topic(name string) (*topic, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	t, ok := s.topics[name]
	if !ok {
		return nil, fmt.Errorf("topic %q: %w", name, store.ErrNotFound)
	}
	return t, nil
}

func (s *Store) sub(topicName, name string) (*sub, error) {
	t, err := s.topic(topicName)
	if err != nil {
		return nil, err
	}
	sb, ok := t.subs[name]
	if !ok {
		return nil, fmt.Errorf("subscription %q of topic %q: %w", name, topicName, store.ErrNotFound)
	}
	return sb, nil
}

// Append implements [store.Store]. It writes the events in one batch committed with a sync;
// pebble gives concurrent synced commits one log fsync. Once ctx is checked the write is not
// abandoned: a sync cannot be called back.
//
// Sequence numbers are handed out under the topic's lock before the commit, so concurrent
// Appends to one topic commit in parallel. An Append returns only when every earlier number
// of the topic is on disk as well, and Read and LastSeq never go past such a gapless prefix:
// nobody sees number n+1 while n may still come. A failed commit fails the store (ErrFailed),
// so a number is never handed out twice in one run; after a restart numbering continues from
// the newest entry on disk. Numbers of an Append that failed may then be missing from the
// journal (a hole nobody was told about) or, when they were the newest, be handed out again
// (nobody saw them).
func (s *Store) Append(ctx context.Context, topicName string, publishTime time.Time, events []*schemas.Event) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.topic(topicName)
	if err != nil {
		return 0, err
	}
	if len(events) == 0 {
		return t.lastSeq(), nil
	}
	size := 0
	for _, ev := range events {
		size += entryOverhead + encodedEntrySize(ev)
	}
	b := s.db.NewBatchWithSize(size)
	defer b.Close()

	op, err := t.reserve(len(events))
	if err != nil {
		return 0, fmt.Errorf("appending to topic %q: %w", topicName, err)
	}
	// Once numbers are handed out, every way out of here finishes op; one that does not
	// commit fails the store, so that the numbers are not handed out again.
	committed := false
	defer func() { t.finish(op, committed) }()
	first := op.last - uint64(len(events)) + 1
	var buf []byte
	for i, ev := range events {
		buf = appendEntry(buf[:0], publishTime, ev)
		if err := b.Set(seqKey(prefixJournal, t.id, first+uint64(i)), buf, nil); err != nil {
			return 0, fmt.Errorf("appending to topic %q: %w", topicName, s.fail(err))
		}
	}
	if err := s.commit(b, pebble.Sync); err != nil {
		return 0, fmt.Errorf("appending to topic %q: %w", topicName, err)
	}
	committed = true
	t.finish(op, true)
	<-op.ch
	if !t.isVisible(op.last) {
		return 0, fmt.Errorf("appending to topic %q: an earlier append failed: %w", topicName, s.usable())
	}
	return op.last, nil
}

// entryOverhead bounds what a journal entry adds to a batch besides its value: the key and
// pebble's kind byte and two length varints.
const entryOverhead = 17 + 1 + 2*binary.MaxVarintLen32

func (t *topic) lastSeq() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.visible
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

// Read implements [store.Store].
func (s *Store) Read(ctx context.Context, topicName string, from uint64, limit int) ([]store.Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.topic(topicName)
	if err != nil {
		return nil, err
	}
	visible := t.lastSeq()
	if limit <= 0 || from > visible {
		return nil, nil
	}
	var out []store.Entry
	err = s.scan(seqKey(prefixJournal, t.id, from), seqKey(prefixJournal, t.id, visible+1), func(k, v []byte) error {
		e, err := decodeEntry(seqOf(k), v)
		if err != nil {
			return fmt.Errorf("entry %d: %w", seqOf(k), err)
		}
		out = append(out, e)
		if len(out) == limit {
			return errStop
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading topic %q: %w", topicName, err)
	}
	return out, nil
}

// LastSeq implements [store.Store].
func (s *Store) LastSeq(ctx context.Context, topicName string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.topic(topicName)
	if err != nil {
		return 0, err
	}
	return t.lastSeq(), nil
}

// Trim implements [store.Store]. It deletes the entries after the previous Trim with one
// range tombstone, without a sync, and never past LastSeq (an Append under way keeps its
// entries). Starting at the previous Trim keeps tombstones disjoint: nested ones from 0 would
// pile up in every read of the topic. It records the highest trimmed seq in the same batch,
// so that numbering continues after a reopen even when nothing is left in the journal.
func (s *Store) Trim(ctx context.Context, topicName string, through uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.topic(topicName)
	if err != nil {
		return err
	}
	t.trimMu.Lock()
	defer t.trimMu.Unlock()
	through = min(through, t.lastSeq())
	if through <= t.floor {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(seqKey(prefixJournal, t.id, t.floor+1), seqKey(prefixJournal, t.id, through+1), nil); err != nil {
		return fmt.Errorf("trimming topic %q: %w", topicName, err)
	}
	if err := b.Set(idKey(prefixFloor, t.id), encodeUint64(through), nil); err != nil {
		return fmt.Errorf("trimming topic %q: %w", topicName, err)
	}
	if err := s.commit(b, pebble.NoSync); err != nil {
		return fmt.Errorf("trimming topic %q: %w", topicName, err)
	}
	t.floor = through
	return nil
}

// Cursors implements [store.Store]. It reads the cursors kept in memory: no disk read. A
// cursor is taken there only after its update is committed, so a Trim based on it is written
// to the log after that update, and a crash that keeps the Trim keeps the update too.
func (s *Store) Cursors(ctx context.Context, topicName string) (map[string]uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.topic(topicName)
	if err != nil {
		return nil, err
	}
	cursors := make(map[string]uint64, len(t.subs))
	for name, sb := range t.subs {
		sb.mu.Lock()
		cursors[name] = sb.cursor
		sb.mu.Unlock()
	}
	return cursors, nil
}

// LoadSubscription implements [store.Store].
func (s *Store) LoadSubscription(ctx context.Context, topicName, name string) (store.SubscriptionState, error) {
	if err := ctx.Err(); err != nil {
		return store.SubscriptionState{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	sb, err := s.sub(topicName, name)
	if err != nil {
		return store.SubscriptionState{}, err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	st := store.SubscriptionState{Cursor: sb.cursor}
	lo, hi := idRange(prefixParked, sb.id)
	err = s.scan(lo, hi, func(k, v []byte) error {
		p, err := decodeParked(seqOf(k), v)
		if err != nil {
			return fmt.Errorf("parked event %d: %w", seqOf(k), err)
		}
		st.Parked = append(st.Parked, p)
		return nil
	})
	if err != nil {
		return store.SubscriptionState{}, fmt.Errorf("loading subscription %q of topic %q: %w", name, topicName, err)
	}
	if v, ok, err := s.get(idKey(prefixProbation, sb.id)); err != nil {
		return store.SubscriptionState{}, fmt.Errorf("loading subscription %q of topic %q: %w", name, topicName, err)
	} else if ok {
		if st.Probation, err = decodeOpaque(v); err != nil {
			return store.SubscriptionState{}, fmt.Errorf("loading subscription %q of topic %q: probation state: %w", name, topicName, err)
		}
	}
	return st, nil
}

// UpdateSubscription implements [store.Store]. The update is one batch, committed without a
// sync: after a crash the newest updates may be missing, never reordered (pebble's log is
// written in commit order).
func (s *Store) UpdateSubscription(ctx context.Context, topicName, name string, u store.Update) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	sb, err := s.sub(topicName, name)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	cursor := max(sb.cursor, u.Cursor)
	if err := s.buildUpdate(b, sb, cursor, u); err != nil {
		return fmt.Errorf("updating subscription %q of topic %q: %w", name, topicName, err)
	}
	if b.Empty() {
		return nil
	}
	if err := s.commit(b, pebble.NoSync); err != nil {
		return fmt.Errorf("updating subscription %q of topic %q: %w", name, topicName, err)
	}
	sb.cursor = cursor
	return nil
}

// buildUpdate adds u to b: Deletes before Puts, so that a Seq in both ends up parked, as the
// conformance suite fixes.
func (s *Store) buildUpdate(b *pebble.Batch, sb *sub, cursor uint64, u store.Update) error {
	if cursor != sb.cursor {
		if err := b.Set(idKey(prefixCursor, sb.id), encodeUint64(cursor), nil); err != nil {
			return err
		}
	}
	for _, seq := range u.Delete {
		if err := b.Delete(seqKey(prefixParked, sb.id, seq), nil); err != nil {
			return err
		}
	}
	var buf []byte
	for i := range u.Put {
		buf = appendParked(buf[:0], &u.Put[i])
		if err := b.Set(seqKey(prefixParked, sb.id, u.Put[i].Seq), buf, nil); err != nil {
			return err
		}
	}
	switch {
	case u.Probation == nil:
	case len(u.Probation) == 0:
		return b.Delete(idKey(prefixProbation, sb.id), nil)
	default:
		return b.Set(idKey(prefixProbation, sb.id), appendOpaque(nil, u.Probation), nil)
	}
	return nil
}

// PutTopic implements [store.Store]. Definitions are committed with a sync.
func (s *Store) PutTopic(ctx context.Context, name string, spec []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	t, exists := s.topics[name]
	id := s.nextID + 1
	if exists {
		id = t.id
	} else if err := b.Set(nextIDKey, encodeUint64(id), nil); err != nil {
		return fmt.Errorf("putting topic %q: %w", name, err)
	}
	if err := b.Set(nameKey(prefixTopic, name), appendDef(nil, id, spec), nil); err != nil {
		return fmt.Errorf("putting topic %q: %w", name, err)
	}
	if err := s.commit(b, pebble.Sync); err != nil {
		return fmt.Errorf("putting topic %q: %w", name, err)
	}
	if !exists {
		s.nextID = id
		s.topics[name] = &topic{id: id, subs: make(map[string]*sub)}
	}
	return nil
}

// DeleteTopic implements [store.Store]. The definition, journal, subscriptions and their
// state go in one synced batch of range deletions.
func (s *Store) DeleteTopic(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topic(name)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	errs := []error{
		b.Delete(nameKey(prefixTopic, name), nil),
		b.DeleteRange(idKey(prefixSub, t.id), idKey(prefixSub, t.id+1), nil),
		b.DeleteRange(idKey(prefixJournal, t.id), idKey(prefixJournal, t.id+1), nil),
		b.Delete(idKey(prefixFloor, t.id), nil),
	}
	for _, sb := range t.subs {
		errs = append(errs, deleteSubState(b, sb)...)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deleting topic %q: %w", name, err)
	}
	if err := s.commit(b, pebble.Sync); err != nil {
		return fmt.Errorf("deleting topic %q: %w", name, err)
	}
	delete(s.topics, name)
	return nil
}

func deleteSubState(b *pebble.Batch, sb *sub) []error {
	lo, hi := idRange(prefixParked, sb.id)
	return []error{
		b.Delete(idKey(prefixCursor, sb.id), nil),
		b.DeleteRange(lo, hi, nil),
		b.Delete(idKey(prefixProbation, sb.id), nil),
	}
}

// Topics implements [store.Store].
func (s *Store) Topics(ctx context.Context) ([]store.Definition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	defs, err := s.definitions([]byte{prefixTopic}, []byte{prefixTopic + 1})
	if err != nil {
		return nil, fmt.Errorf("listing topics: %w", err)
	}
	return defs, nil
}

// definitions lists the definitions in [lo, hi); a name is what follows len(lo) in the key.
func (s *Store) definitions(lo, hi []byte) ([]store.Definition, error) {
	defs := []store.Definition{}
	err := s.scan(lo, hi, func(k, v []byte) error {
		_, spec, err := decodeDef(v)
		if err != nil {
			return fmt.Errorf("definition %q: %w", k[len(lo):], err)
		}
		defs = append(defs, store.Definition{Name: string(k[len(lo):]), Spec: spec})
		return nil
	})
	return defs, err
}

// PutSubscription implements [store.Store]. A new subscription's cursor is written in the
// same synced batch as its definition.
func (s *Store) PutSubscription(ctx context.Context, topicName, name string, spec []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.topic(topicName)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	sb, exists := t.subs[name]
	var errs []error
	if !exists {
		// No Append is under way (s.mu is held exclusively), so visible is the newest entry.
		sb = &sub{id: s.nextID + 1, cursor: t.lastSeq()}
		errs = append(errs,
			b.Set(nextIDKey, encodeUint64(sb.id), nil),
			b.Set(idKey(prefixCursor, sb.id), encodeUint64(sb.cursor), nil))
	}
	errs = append(errs, b.Set(subDefKey(t.id, name), appendDef(nil, sb.id, spec), nil))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("putting subscription %q of topic %q: %w", name, topicName, err)
	}
	if err := s.commit(b, pebble.Sync); err != nil {
		return fmt.Errorf("putting subscription %q of topic %q: %w", name, topicName, err)
	}
	if !exists {
		s.nextID = sb.id
		t.subs[name] = sb
	}
	return nil
}

// DeleteSubscription implements [store.Store].
func (s *Store) DeleteSubscription(ctx context.Context, topicName, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, err := s.sub(topicName, name)
	if err != nil {
		return err
	}
	t := s.topics[topicName]
	b := s.db.NewBatch()
	defer b.Close()
	errs := append(deleteSubState(b, sb), b.Delete(subDefKey(t.id, name), nil))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deleting subscription %q of topic %q: %w", name, topicName, err)
	}
	if err := s.commit(b, pebble.Sync); err != nil {
		return fmt.Errorf("deleting subscription %q of topic %q: %w", name, topicName, err)
	}
	delete(t.subs, name)
	return nil
}

// Subscriptions implements [store.Store].
func (s *Store) Subscriptions(ctx context.Context, topicName string) ([]store.Definition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, err := s.topic(topicName)
	if err != nil {
		return nil, err
	}
	defs, err := s.definitions(idKey(prefixSub, t.id), idKey(prefixSub, t.id+1))
	if err != nil {
		return nil, fmt.Errorf("listing subscriptions of topic %q: %w", topicName, err)
	}
	return defs, nil
}

// Close implements [store.Store]. It waits for the calls under way, flushes the memtable to
// disk (so writes committed without a sync are kept and the next Open has no log to replay)
// and closes pebble. After a write failure it skips the flush: what is in memory is not to be
// trusted. Close is idempotent; later calls return nil.
func (s *Store) Close() (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	defer catchFatal(&err)
	var errs []error
	if s.failure.Load() == nil {
		if err := s.db.Flush(); err != nil {
			errs = append(errs, fmt.Errorf("flushing disk store: %w", err))
		}
	}
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing disk store: %w", err))
	}
	return errors.Join(errs...)
}

var _ store.Store = (*Store)(nil)

// PutDeadLetters implements [store.Store]. The records are one batch committed with a sync.
func (s *Store) PutDeadLetters(ctx context.Context, recs []store.DeadLetterRecord) error {
	return s.writeDeadLetters(ctx, "saving", func(b *pebble.Batch) error {
		var errs []error
		for _, r := range recs {
			errs = append(errs, b.Set(nameKey(prefixDeadLetter, r.ID), appendOpaque(nil, r.Payload), nil))
		}
		return errors.Join(errs...)
	})
}

// DeleteDeadLetters implements [store.Store]. The deletions are one batch committed with a
// sync.
func (s *Store) DeleteDeadLetters(ctx context.Context, ids []string) error {
	return s.writeDeadLetters(ctx, "deleting", func(b *pebble.Batch) error {
		var errs []error
		for _, id := range ids {
			errs = append(errs, b.Delete(nameKey(prefixDeadLetter, id), nil))
		}
		return errors.Join(errs...)
	})
}

func (s *Store) writeDeadLetters(ctx context.Context, what string, build func(b *pebble.Batch) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := build(b); err != nil {
		return fmt.Errorf("%s dead letters: %w", what, err)
	}
	if b.Empty() {
		return nil
	}
	if err := s.commit(b, pebble.Sync); err != nil {
		return fmt.Errorf("%s dead letters: %w", what, err)
	}
	return nil
}

// DeadLetters implements [store.Store].
func (s *Store) DeadLetters(ctx context.Context) ([]store.DeadLetterRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	recs := []store.DeadLetterRecord{}
	err := s.scan([]byte{prefixDeadLetter}, []byte{prefixDeadLetter + 1}, func(k, v []byte) error {
		payload, err := decodeOpaque(v)
		if err != nil {
			return fmt.Errorf("dead letter %q: %w", k[1:], err)
		}
		recs = append(recs, store.DeadLetterRecord{ID: string(k[1:]), Payload: payload})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	return recs, nil
}
