package disk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
)

// ErrClosed is returned by every method of a closed [Store]; it is [store.ErrClosed].
var ErrClosed = store.ErrClosed

// ErrLocked is the error of [Open] and [Check] when another process holds the directory's
// lock: a running egrid serve, or an egrid store check, has the store open. (Known on Unix;
// elsewhere the error is the system's own.)
var ErrLocked = errors.New("disk store: another process holds the directory's lock")

// ErrFailed is returned, wrapped with the cause, by writes the store refuses after a write to
// disk failed (a full disk, an I/O error): Appends (the router answers 503) and definition
// and dead-letter writes. It wraps [store.ErrUnavailable]; when the write failed because the
// disk is full (ENOSPC, EDQUOT) the refusal wraps [store.ErrDiskFull] too, which matches
// [store.ErrInsufficientStorage] (the router answers 507). Reads go on and subscription state writes are kept in memory; the
// store reopens itself from its write-ahead log once the disk has room again and takes
// writes again (see the package documentation). Writes stopped behind a damaged table file
// (the cause wraps [ErrCorrupt]) are refused until the store is restored and opened again.
var ErrFailed = fmt.Errorf("disk store: a write to disk failed; the store refuses writes until it is reopened: %w", store.ErrUnavailable)

// Options configures [Open]. The zero value is usable.
type Options struct {
	// Logger receives pebble's own messages (with the attribute component=pebble) and the
	// store's reports of failures and recoveries. Nil discards them. Pebble's background
	// errors and reports of damaged data that repeat are written once a minute, with a count.
	Logger *slog.Logger
	// MemTableSize is the size of pebble's memtable in bytes: how much is written before it is
	// flushed to a table file. Up to four memtables can be in memory while flushes catch up.
	// Default 64 MiB.
	MemTableSize uint64
	// CacheSize is the size of pebble's block cache in bytes, which serves journal reads of
	// flushed entries (a subscription catching up). Default 64 MiB.
	CacheSize int64
	// MinFreeBytes is the free-space floor: while the file system holding the store has less
	// free space, Append is refused with [store.ErrInsufficientStorage], before the disk is
	// full and pebble fails. 0 disables the check. Below it, once the journal has been
	// trimmed, the store flushes its memtable and compacts the trimmed journal to get the
	// space back (walspace.go). It is also the free space the store waits for before it
	// reopens itself after a failed write (at least 16 MiB, [ReopenFreeBytes]).
	MinFreeBytes uint64
	// SecretKey, when set (32 bytes), seals the topic and subscription definitions with
	// AES-256-GCM (secret.go): they hold topic keys and delivery secrets. [ReadSecretKey]
	// reads one from a file.
	SecretKey []byte
	// PrivateDir makes Open refuse a directory that group or others can read, write or
	// enter (egrid serve sets it): the store holds topic keys and delivery secrets. The
	// store creates its directory 0700 and its files 0600 in any case.
	PrivateDir bool
	// OnCorruption, when set, is called once for each piece of damage the store finds, with
	// its kind (DamageMarker, DamageWAL, DamageTable, DamageEntry, DamageDefinition): egrid
	// counts them in a metric. It must not block.
	OnCorruption func(kind string)
	// ReadOnly opens pebble read-only (egrid store check): nothing is written, not even the
	// replay of the write-ahead log.
	ReadOnly bool
	// RecoverInterval is how long the store waits between attempts to reopen itself after a
	// failed write; it doubles after each failed attempt, up to 30 s. Default 1 s.
	RecoverInterval time.Duration

	// fs replaces the file system, for tests (export_test.go).
	fs vfs.FS
	// freeBytes replaces the free-space probe, for tests.
	freeBytes func(dir string) (uint64, error)
	// onParkedCreate, for tests, is called as a failed instance's table file creation starts
	// waiting until the instance is given up (fenceFS.Create).
	onParkedCreate func(retired <-chan struct{})
	// onDrain, for tests, is called as a DeleteTopic or DeleteSubscription (sub not empty)
	// starts waiting, off the catalogue's turn, for the calls under way on what it
	// deletes.
	onDrain func(topic, sub string)
	// onDeletionWait, for tests, is called as a catalogue change starts waiting for a
	// deletion of the topic or subscription it names to end.
	onDeletionWait func(topic, sub string)
	// onRecoverSwitch, for tests, is called as a recovery has written the new instance what
	// it needs and is about to switch to it.
	onRecoverSwitch func()
	// tune changes pebble's options, for tests (keeping a table file apart from
	// compactions).
	tune func(*pebble.Options)
	// onReclaimed, for tests, is called as a reclaim below the floor has ended
	// (walspace.go).
	onReclaimed func()
	// FdatasyncLog syncs the write-ahead log with fdatasync(2) in pebble's own goroutine, as
	// pebble does by itself, instead of through an io_uring the store sets up on Linux (see
	// the README's Durability section: the goroutine waiting for the sync then holds no P,
	// so the goroutines readied meanwhile run). Where the kernel gives no io_uring the store
	// uses fdatasync anyway.
	FdatasyncLog bool
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
	if o.RecoverInterval <= 0 {
		o.RecoverInterval = time.Second
	}
	if o.fs == nil {
		o.fs = vfs.Default
	}
	if o.freeBytes == nil {
		o.freeBytes = freeBytes
	}
	return o
}

// Level 0's thresholds, in sublevels (tables flushed from memtables whose keys overlap).
// Pebble compacts level 0 once it holds half its compaction threshold in sublevels, and
// stops writes at its stop threshold. Its defaults (4 and 12) suit a store whose data lives
// on: most of this store's bytes are journal entries trimmed soon after they are flushed, or
// before. A compaction out of level 0 rewrites every table of the base level its tables
// overlap, and the subscriptions' state and delivery histories (keyed by event ID) spread
// each flush across the key space, so at 2 sublevels each compaction rewrote much of the
// base level again for every second flush, with the journal entries still untrimmed.
// Compacting at 8 lets the trims delete more of the journal first and rewrites the rest
// once for four times as many flushes (README, Benchmarks, note 4). Reads
// pay little for it: a journal read covers a range of sequence numbers that only the tables
// flushed since hold, and a first attempt's delivery history is written without a read.
// Writes stop at three times the compaction threshold, as with pebble's defaults
// (compactions.go says when that happens).
const (
	l0CompactionThreshold = 16
	l0StopWritesThreshold = 3 * l0CompactionThreshold
)

// Store is the embedded durable [store.Store] on pebble. Open one with [Open]; a directory
// holds one Store at a time: the Store holds its lock from Open to Close (fs.go, dirLock),
// across the pebble instances it opens on it.
type Store struct {
	dir    string
	opts   Options
	sealer *sealer        // nil without Options.SecretKey
	popts  pebble.Options // template for each generation (FS and Logger set per generation)
	log    *slog.Logger
	lock   *dirLock // the directory's lock, shared by every generation
	// repeats writes pebble's reports that repeat (a compaction retried over a damaged
	// table file) once a minute (logger.go).
	repeats *repeats

	// mu guards the fields below. It is held only to read or change them, never across
	// I/O: a call takes what it needs (the generation, the topic) and registers itself
	// (ops, users) under mu, then does its I/O with no lock held.
	mu      sync.RWMutex
	closed  bool
	topics  map[string]*topic
	nextID  uint64         // highest id handed out to a topic or subscription
	gen     *generation    // the pebble instance in use
	pending []pendingWrite // state writes taken while gen has failed, oldest first
	ops     sync.WaitGroup // calls under way; Close waits for them
	// damagedTopics holds the topics whose definitions Open found damaged, by stored
	// name: they are not served, and their names stay taken until deleted (defdamage.go).
	damagedTopics map[string]*damagedDef
	// outboxLost holds the parts of the dead-letter outbox found in damaged table blocks,
	// reported once each (outboxDamage).
	outboxLost map[outboxLoss]bool
	// tails holds the torn log tails Open found (CheckDir), for egrid store check.
	tails []error
	// loadProblems holds the damage Open found as it loaded the catalogue (definitions, the
	// next id) and the topics' trim floors, for egrid store check.
	loadProblems []error
	// spans holds the damage found by scans that go past it, each reported once
	// (scanPastDamage's callers).
	spans damageSpans
	// keyChecked is set by checkKey when the key is proven right (the key check, or, that
	// being damaged, a definition opened with it) or the store has no key check (no
	// definition was ever sealed): a sealed definition that does not open is then damaged,
	// not sealed with another key.
	keyChecked bool

	// catalogJobs hands the catalogue changes (definitions, on the admin plane) to the
	// catalogue's owner goroutine (catalogLoop), which runs them one at a time in the order
	// it takes them, each with its reads of the catalogue and its synced commit; nothing
	// else waits for it. No lock is held across a commit: a caller waiting for its turn
	// gives up when its ctx ends (catalogTurn). A delete's wait for the calls under way on
	// what it deletes is not a turn: that delete marks the name in deleting instead (see
	// catalogDo). catalogQuit is closed by Close once no call is under way; catalogDone when
	// the owner has returned.
	catalogJobs              chan *catalogJob
	catalogQuit, catalogDone chan struct{}
	// deleting holds the topics and subscriptions whose delete is waiting for the calls under
	// way on them, or committing; each channel is closed when its delete has ended. Owned by
	// the catalogue's owner goroutine: read and changed only in a catalogue change.
	deleting map[deletion]chan struct{}
	// unsettled holds the deletes whose outcome on disk is not known yet, guarded by mu:
	// those under way, and those whose commit failed and that put back what they had taken
	// out of memory, until a recovery has read whether their batch reached the disk
	// (settleDeletes).
	unsettled map[deletion]*unsettled

	health  healthState
	reclaim reclaimer // flushes and compacts below the floor (walspace.go)
	// walPolicy is how pebble keeps its write-ahead logs on the store's volume, and
	// pebbleFS the file system each generation's fenceFS wraps (walspace.go).
	walPolicy walPolicy
	pebbleFS  vfs.FS
	// ring syncs the write-ahead log where the kernel gives one (syncring_linux.go); nil
	// otherwise.
	ring     *syncRing
	kick     chan struct{} // wakes the recovery loop after a failure
	stop     chan struct{} // closed by Close
	loopDone chan struct{} // closed when the recovery loop has returned
}

// get reads one key; ok is false when it is absent. The value is a copy.
func get(db *pebble.DB, key []byte) (v []byte, ok bool, err error) {
	val, closer, err := db.Get(key)
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
func scan(db *pebble.DB, lo, hi []byte, fn func(k, v []byte) error) (err error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
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

// call is one store call under way: the generation it uses and the topic and subscription
// it works on, registered so that Close, DeleteTopic, DeleteSubscription and a recovery know
// when it is done.
type call struct {
	g    *generation
	t    *topic
	sb   *sub
	done func()
}

// enter registers a call on topicName (when not empty) and its subscription subName (when
// not empty). The caller must call c.done.
func (s *Store) enter(topicName, subName string) (call, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return call{}, ErrClosed
	}
	c := call{g: s.gen}
	if topicName != "" {
		t, ok := s.topics[topicName]
		if !ok {
			return call{}, fmt.Errorf("topic %q: %w", topicName, store.ErrNotFound)
		}
		c.t = t
		if subName != "" {
			sb, ok := t.subs[subName]
			if !ok {
				return call{}, fmt.Errorf("subscription %q of topic %q: %w", subName, topicName, store.ErrNotFound)
			}
			c.sb = sb
			sb.ops.Add(1)
		}
		t.ops.Add(1)
	}
	c.g.users.Add(1)
	s.ops.Add(1)
	c.done = func() {
		if c.sb != nil {
			c.sb.ops.Done()
		}
		if c.t != nil {
			c.t.ops.Done()
		}
		c.g.users.Done()
		s.ops.Done()
	}
	return c, nil
}

// onFail fails g with cause. When g is the store's current generation, the failure is logged
// once and the recovery loop woken.
func (s *Store) onFail(g *generation, cause error) {
	g.fail(cause, func(err error) {
		// A failed instance writes nothing more: its flushes and compactions would only
		// churn on a full disk, and the next instance will own the files.
		g.fs.fence()
		s.mu.RLock()
		current := s.gen == g
		s.mu.RUnlock()
		if !current {
			return
		}
		s.health.setFailed(err)
		refused := "publishes are refused (503)"
		if diskFull(cause) {
			refused = "the disk is full: publishes are refused (507)"
		}
		s.log.Error("disk store: a write to disk failed; "+refused+" and stored events are still delivered; "+remedy(s.dir, cause, room{need: s.reopenFloor(), floor: s.opts.MinFreeBytes}),
			"dir", s.dir, "err", cause)
		select {
		case s.kick <- struct{}{}:
		default:
		}
	})
}

// writable returns why g takes no Append: its failure, or the disk below the floor.
func (s *Store) writable(g *generation) error {
	if err := g.err(); err != nil {
		return err
	}
	return s.spaceErr()
}

// Close implements [store.Store]. It waits for the calls under way (none waits on a failed
// write: those return with the failure), writes the subscription state kept in memory if it
// can, flushes the memtable to disk (so writes committed without a sync are kept and the
// next Open has no log to replay) and closes pebble. A failed instance is not flushed (what
// it holds in memory is not on disk) but fenced, so Close returns. Close releases the
// directory's lock last: the directory can then be opened again. Close is idempotent; later
// calls return nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	g := s.gen
	s.mu.Unlock()
	close(s.stop)
	<-s.loopDone
	s.ops.Wait()
	close(s.catalogQuit) // no change is under way or counted: a later one finds the store closed
	<-s.catalogDone
	defer s.repeats.close() // after pebble's last report
	if g.isFailed() {
		if s.ring != nil {
			go s.ring.close() // once a sync the failed instance may still wait for returns
		}
		s.mu.RLock()
		lost := len(s.pending)
		s.mu.RUnlock()
		if lost > 0 {
			s.log.Warn("disk store: closing while failed; subscription state writes kept in memory are not written (their events may be delivered again after the restart)", "writes", lost)
		}
		s.abandon(g)
		return s.lock.release()
	}
	err := s.closeGeneration(g)
	if s.ring != nil {
		s.ring.close()
	}
	return errors.Join(err, s.lock.release())
}

// Flush writes what pebble's memtable holds to table files and starts an empty memtable,
// whose arena is untouched until written: the memory the store's write buffer holds (up to
// Options.MemTableSize) then no longer counts what was written before. It returns when the
// flush is done, the store fails, or ctx ends. `egrid bench`'s idle scenario uses it so that
// the resident memory it gives per subscription is the subscriptions', not the write
// buffer's.
func (s *Store) Flush(ctx context.Context) error {
	c, err := s.enter("", "")
	if err != nil {
		return err
	}
	defer c.done()
	if err := c.g.err(); err != nil {
		return err
	}
	flushed := make(chan error, 1)
	go func() { flushed <- c.g.db.Flush() }() // ends with the flush, or with the instance once given up
	select {
	case err := <-flushed:
		if err != nil {
			return fmt.Errorf("flushing disk store: %w", err)
		}
		return nil
	case <-c.g.failed:
		return fmt.Errorf("flushing disk store: %w", c.g.err())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeGeneration flushes and closes a healthy generation. A flush that fails fails g
// (flushFailed), and pebble's Flush would wait for its retries for good: g is then given up
// as a failed one is (what it holds only in memory is in its log or lost as in a crash).
func (s *Store) closeGeneration(g *generation) error {
	var errs []error
	if !s.opts.ReadOnly {
		flushed := make(chan error, 1)
		go func() { flushed <- g.db.Flush() }()
		select {
		case err := <-flushed:
			if err != nil {
				errs = append(errs, fmt.Errorf("flushing disk store: %w", err))
			}
		case <-g.failed:
			s.abandon(g)
			return fmt.Errorf("flushing disk store: %w", g.err())
		}
	}
	if err := g.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing disk store: %w", err))
	}
	return errors.Join(errs...)
}

// abandon gives a failed generation up: fenced at once (it can write nothing any more; the
// directory's lock stays with the store); pebble's Close runs in the background once the calls
// using it are done, and never returns when the instance is stuck behind its failed log write
// (its memory is then kept until the process exits). Its flushes wait in their table file
// creations (fenceFS.Create) until just before the Close, which waits for them.
func (s *Store) abandon(g *generation) {
	g.fs.fence()
	go func() {
		g.users.Wait()
		g.fs.retire()
		defer func() { _ = recover() }() // a fenced instance may panic on its way out
		_ = g.db.Close()
	}()
}

var _ store.Store = (*Store)(nil)
