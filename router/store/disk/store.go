package disk

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
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
	// full and pebble fails. 0 disables the check. It is also the free space the store waits
	// for before it reopens itself after a failed write (at least 16 MiB).
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

	health   healthState
	kick     chan struct{} // wakes the recovery loop after a failure
	stop     chan struct{} // closed by Close
	loopDone chan struct{} // closed when the recovery loop has returned
}

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

// Open opens or creates the store in dir. It fails while another Store holds dir, in this
// process or another.
func Open(dir string, opts Options) (_ *Store, err error) {
	opts = opts.withDefaults()
	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref()
	rep := newRepeats(opts.Logger, repeatInterval)
	defer func() {
		if err != nil {
			rep.close()
		}
	}()
	s := &Store{
		dir:  dir,
		opts: opts,
		popts: pebble.Options{
			Cache:                 cache,
			MemTableSize:          opts.MemTableSize,
			L0CompactionThreshold: l0CompactionThreshold,
			L0StopWritesThreshold: l0StopWritesThreshold,
			FormatMajorVersion:    pebbleFormat, // raised only with FormatVersion (format.go)
			// Pebble's default answer to a damaged block is Logger.Fatalf: the store
			// reports the damage itself, saying what it means (corruption.go). Pebble
			// reports a damaged block, and the compaction that failed on it, again at
			// each retry, several times a second: rep writes each once a minute.
			EventListener: &pebble.EventListener{
				DataCorruption: func(info pebble.DataCorruptionInfo) {
					rep.report(slog.LevelWarn, info.String(), "pebble: damaged data", "component", "pebble", "info", info.String())
				},
				BackgroundError: func(err error) {
					rep.report(slog.LevelError, err.Error(), "pebble: background error", "component", "pebble", "err", err.Error())
				},
			},
		},
		log:           opts.Logger,
		repeats:       rep,
		lock:          new(dirLock),
		topics:        make(map[string]*topic),
		damagedTopics: make(map[string]*damagedDef),
		deleting:      make(map[deletion]chan struct{}),
		catalogJobs:   make(chan *catalogJob),
		catalogQuit:   make(chan struct{}),
		catalogDone:   make(chan struct{}),
		unsettled:     make(map[deletion]*unsettled),
		kick:          make(chan struct{}, 1),
		stop:          make(chan struct{}),
		loopDone:      make(chan struct{}),
	}
	if opts.tune != nil {
		opts.tune(&s.popts)
	}
	if opts.SecretKey != nil {
		var err error
		if s.sealer, err = newSealer(opts.SecretKey); err != nil {
			return nil, fmt.Errorf("opening disk store in %s: %w", dir, err)
		}
	}
	if opts.PrivateDir && opts.fs == vfs.Default {
		if err := checkPrivate(dir); err != nil {
			return nil, err
		}
	}
	problems, kinds, tails := CheckDir(opts.fs, dir)
	for _, tail := range tails {
		s.log.Error("disk store: a write-ahead log ends damaged; starting without what follows the damage", "dir", dir, "err", tail)
		s.damaged(DamageWAL)
	}
	if len(problems) > 0 {
		for i, p := range problems {
			s.log.Error("disk store: damage found; refusing to start", "dir", dir, "err", p)
			s.damaged(kinds[i])
		}
		return nil, fmt.Errorf("opening disk store in %s: %w", dir, &damageError{problems})
	}
	s.popts.ReadOnly = opts.ReadOnly
	prior, err := peekPebbleFormat(opts.fs, dir)
	if err != nil {
		return nil, fmt.Errorf("opening disk store in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			_ = s.lock.release() // the generation, failed to open or closed, leaves it held
		}
	}()
	g, err := openGeneration(dir, opts.fs, s.lock, s.popts, opts.Logger, s.onFail, opts.onParkedCreate)
	if err != nil {
		if problems := tableProblems(opts.fs, dir, err); len(problems) > 0 {
			for _, p := range problems {
				s.log.Error("disk store: damage found; refusing to start", "dir", dir, "err", p)
				s.damaged(DamageTable)
			}
			return nil, fmt.Errorf("opening disk store in %s: %w", dir, &damageError{problems})
		}
		if pebble.IsCorruptionError(err) {
			s.log.Error("disk store: pebble found damage; refusing to start: restore the directory from a backup", "dir", dir, "err", err)
			s.damaged(DamageWAL)
			err = errors.Join(ErrCorrupt, err)
		}
		return nil, fmt.Errorf("opening disk store in %s: %w", dir, err)
	}
	s.gen = g
	if prior != 0 && prior < s.popts.FormatMajorVersion && !opts.ReadOnly {
		s.log.Info("disk store: raised the format of pebble's files; egrid releases whose pebble does not know it cannot open the store", "dir", dir, "from", uint64(prior), "to", uint64(s.popts.FormatMajorVersion))
	}
	if err := s.checkFormat(g); err != nil {
		s.closeGeneration(g)
		return nil, fmt.Errorf("opening disk store in %s: %w", dir, err)
	}
	if err := s.checkKey(g); err != nil {
		s.closeGeneration(g)
		return nil, fmt.Errorf("opening disk store in %s: %w", dir, err)
	}
	if err := s.load(g); err != nil {
		s.closeGeneration(g)
		return nil, fmt.Errorf("loading disk store in %s: %w", dir, err)
	}
	s.health.minFree = opts.MinFreeBytes
	go s.recoverLoop()
	go s.catalogLoop()
	return s, nil
}

// load reads the catalogue, cursors and sequence numbers of g into memory. A definition that
// does not decode, a subscription under a topic with no definition and a malformed key are
// left out and reported (defdamage.go); a sealed definition whose key does not fit, or a
// damaged table block met by the scan, fails it. A next id, a cursor or a trim floor that
// cannot be read is recomputed, reported and written back (valdamage.go).
func (s *Store) load(g *generation) error {
	var repairs []repair
	nextIDLost := ""
	if v, ok, err := get(g.db, nextIDKey); pebble.IsCorruptionError(err) {
		nextIDLost = DamageTable
	} else if err != nil {
		return err
	} else if ok {
		if s.nextID, ok = decodeUint64(v); !ok {
			nextIDLost = DamageDefinition
		}
	}
	byID := make(map[uint64]*topic)
	cl := &catalogLoad{topicIDs: make(map[uint64]string), subIDs: make(map[uint64]bool), orphanSubs: make(map[uint64]int)}
	err := scan(g.db, []byte{prefixTopic}, []byte{prefixTopic + 1}, func(k, v []byte) error {
		id, _, err := s.decodeDef(k, v)
		if s.keyMisfit(err) {
			return fmt.Errorf("topic %q: %w", clip.String(string(k[1:])), err)
		}
		if err != nil {
			cl.topics = append(cl.topics, badDef{topic: string(k[1:]), v: slices.Clone(v), err: err})
			return nil
		}
		t := &topic{id: id, subs: make(map[string]*sub)}
		s.topics[string(k[1:])] = t
		byID[id] = t
		cl.topicIDs[id] = string(k[1:])
		s.nextID = max(s.nextID, id)
		return nil
	})
	if pebble.IsCorruptionError(err) {
		return s.catalogCorrupt(err)
	}
	if err != nil {
		return err
	}
	err = scan(g.db, []byte{prefixSub}, []byte{prefixSub + 1}, func(k, v []byte) error {
		if len(k) < 9 {
			cl.malformed = append(cl.malformed, slices.Clone(k))
			return nil
		}
		t, ok := byID[idOf(k)]
		if !ok {
			cl.orphans = append(cl.orphans, badDef{topicID: idOf(k), name: string(k[9:]), v: slices.Clone(v)})
			cl.orphanSubs[idOf(k)]++
			return nil
		}
		id, _, err := s.decodeDef(k, v)
		if s.keyMisfit(err) {
			return fmt.Errorf("subscription %q: %w", clip.String(string(k[9:])), err)
		}
		if err != nil {
			cl.subs = append(cl.subs, badDef{topic: cl.topicIDs[t.id], name: string(k[9:]), v: slices.Clone(v), err: err})
			return nil
		}
		sb := &sub{id: id}
		if c, ok, err := get(g.db, idKey(prefixCursor, id)); pebble.IsCorruptionError(err) {
			sb.cursorUnread, sb.cursorErr = true, err // one subscription's loss: the store opens
		} else if err != nil {
			return err
		} else if ok {
			if sb.cursor, ok = decodeUint64(c); !ok {
				sb.cursorUnread, sb.cursorUndecodable = true, true // as in a damaged block
			}
		}
		t.subs[string(k[9:])] = sb
		cl.subIDs[id] = true
		s.nextID = max(s.nextID, id)
		return nil
	})
	if pebble.IsCorruptionError(err) {
		return s.catalogCorrupt(err)
	}
	if err != nil {
		return err
	}
	if nextIDLost != "" {
		r, err := s.recomputeNextID(g, nextIDLost)
		if err != nil {
			return err
		}
		repairs = append(repairs, r)
	}
	repairs = append(repairs, s.reportDefDamage(cl)...)
	for name, t := range s.topics {
		lost, end, err := loadSeqs(g.db, t)
		if err != nil {
			return fmt.Errorf("topic %q: %w", name, err)
		}
		if lost != nil {
			r, err := s.recomputeFloor(g, name, t, lost)
			if err != nil {
				return fmt.Errorf("topic %q: %w", name, err)
			}
			repairs = append(repairs, r)
		}
		if end.damaged {
			s.loadProblems = append(s.loadProblems, s.journalEndDamage(name, t, end))
		}
	}
	return s.repairCursors(g, repairs)
}

// repairCursors lowers to its journal's trim floor, in one synced batch with repairs (a
// recomputed next id and trim floors, valdamage.go), every cursor of 2⁶⁴−1 and every cursor
// that a damaged table block kept load from reading or that does not decode (reported once,
// as stateDamage reports). From the floor every event still in the journal is delivered to the
// subscription again (at least once); the ones trimmed meanwhile are gone, and a lost cursor
// skips nothing. The next start reads the cursor written here, not the damaged one; a
// read-only store (egrid store check) writes nothing.
//
// Builds before 2026-11-23 could write next-1 with next 0, that number, for a subscription
// actor restarted while loading its state; the store only ever raises a cursor, so it stayed
// there, and the subscription took every new event for delivered and got nothing more. No
// journal reaches that number, so it is never a real position.
func (s *Store) repairCursors(g *generation, repairs []repair) error {
	b := g.db.NewBatch()
	defer b.Close()
	if !s.opts.ReadOnly {
		for _, r := range repairs {
			var err error
			switch {
			case r.drop && r.hi != nil:
				err = b.DeleteRange(r.key, r.hi, nil)
			case r.drop:
				err = b.Delete(r.key, nil)
			default:
				err = b.Set(r.key, r.value, nil)
			}
			if err != nil {
				return err
			}
		}
	}
	for tname, t := range s.topics {
		for name, sb := range t.subs {
			if sb.cursorUnread {
				sb.cursorUnread = false
				sb.cursor = t.floor
				s.stateDamage(tname, name, sb, stateLoss{part: partCursor, lo: t.floor + 1, undecodable: sb.cursorUndecodable}, sb.cursorErr)
				sb.cursorErr = nil
				if !s.opts.ReadOnly {
					if err := b.Set(idKey(prefixCursor, sb.id), encodeUint64(t.floor), nil); err != nil {
						return err
					}
				}
				continue
			}
			if sb.cursor != math.MaxUint64 {
				continue
			}
			s.log.Warn("disk store: a subscription's cursor was 2^64-1, past its journal's end (written by an egrid before 2026-11-23); delivering again every event still in the journal",
				"topic", tname, "subscription", name, "cursor", sb.cursor, "journalEnd", t.next, "newCursor", t.floor)
			sb.cursor = t.floor
			if s.opts.ReadOnly {
				continue // egrid store check: the next start writes it
			}
			if err := b.Set(idKey(prefixCursor, sb.id), encodeUint64(t.floor), nil); err != nil {
				return err
			}
		}
	}
	if b.Empty() {
		return nil
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("repairing cursors past their journal's end, and what damage kept load from reading: %w", err)
	}
	return nil
}

// loadSeqs sets t's trim floor and newest seq from db. A floor that does not decode, or that
// pebble reports damaged, is taken as 0 and returned as lost (pebble's error, or errCorrupt
// when it does not decode): the caller recomputes it (recomputeFloor). The journal's end is read by readJournalEnd, which goes
// past a damaged table block holding its newest entries; end says whether it did, for the
// caller to report (journalEndDamage).
func loadSeqs(db *pebble.DB, t *topic) (lost error, end journalEnd, err error) {
	t.floor = 0
	if v, ok, err := get(db, idKey(prefixFloor, t.id)); pebble.IsCorruptionError(err) {
		lost = err
	} else if err != nil {
		return nil, end, err
	} else if ok {
		if t.floor, ok = decodeUint64(v); !ok {
			t.floor, lost = 0, errCorrupt
		}
	}
	end, err = readJournalEnd(db, t.id)
	if err != nil {
		return nil, end, fmt.Errorf("journal: %w", err)
	}
	// A journal trimmed to nothing has no key left to say where numbering was: the floor
	// does, so numbers are never handed out twice.
	t.next = max(end.last, t.floor)
	t.visible = t.next
	t.inflight = nil
	t.broken = false
	t.endClosed = end.closed
	return lost, end, nil
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
		s.log.Error("disk store: a write to disk failed; "+refused+" and stored events are still delivered; "+remedy(s.dir, cause),
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
			// Nothing below the damaged block was left to read (the range held no entry).
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
				from, bound = next, end
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
	return nil
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

// deletion names a topic (sub empty) or a subscription whose delete is under way.
type deletion struct{ topic, sub string }

// catalogJob is a catalogue change handed to the catalogue's owner goroutine: run, then done
// closed with its result in err.
type catalogJob struct {
	run  func() error
	err  error
	done chan struct{}
}

// catalogLoop is the catalogue's owner goroutine: it runs the catalogue changes one at a
// time, in the order it takes them, until Close has seen every call end (catalogQuit). It
// runs from Open to Close.
func (s *Store) catalogLoop() {
	defer close(s.catalogDone)
	for {
		select {
		case j := <-s.catalogJobs:
			j.err = j.run()
			close(j.done)
		case <-s.catalogQuit:
			return
		}
	}
}

// catalogTurn runs run on the catalogue's owner goroutine, after the changes handed to it
// before, and returns its result. A caller still waiting for its turn (behind a change whose
// synced commit a slow or full disk holds up) gives up when ctx ends, with ctx's error, and
// run is not run; once run has been taken, the caller waits for its result, so it knows
// whether the change was made. A store whose owner has returned (closed) returns ErrClosed.
func (s *Store) catalogTurn(ctx context.Context, run func() error) error {
	j := &catalogJob{run: run, done: make(chan struct{})}
	select {
	case s.catalogJobs <- j:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the catalogue changes before it: %w", ctx.Err())
	case <-s.catalogDone:
		return ErrClosed
	}
	<-j.done
	return j.err
}

// catalogDo runs change, a catalogue change on topic, on its subscription sub when sub is
// not empty, and on every one of its subscriptions when allSubs is set (DeleteTopic), in its
// turn on the catalogue's owner goroutine (catalogTurn), once no delete of any of them is
// under way and with the store checked to take writes (catalogEnter). An error of the turn
// or of that check is returned wrapped in what; change's own error as it is.
//
// A delete does not keep the turn while it waits for the calls under way on what it deletes
// (deleteDrained), so that other topics' changes go on; the names it marks in s.deleting
// keep the changes that would race with its batch away until it has ended: a PutTopic of
// the name would have its new definition deleted by the batch, a PutSubscription's would
// be left behind by a delete of its topic, a DeleteTopic would leave the state of a
// subscription whose delete then fails. Such a change waits for the delete to end (off the
// owner goroutine, on the delete's channel, or until ctx ends) and then starts again: after
// a delete that committed it finds no topic or subscription (PutTopic creates a new one),
// after one that failed it finds the old one.
func (s *Store) catalogDo(ctx context.Context, what, topic, sub string, allSubs bool, change func(g *generation) error) error {
	for {
		var ended chan struct{}
		entered := false
		err := s.catalogTurn(ctx, func() error {
			if ended = s.deletionOf(topic, sub, allSubs); ended != nil {
				return nil
			}
			g, release, err := s.catalogEnter()
			if err != nil {
				return err
			}
			defer release()
			entered = true
			return change(g)
		})
		if err != nil && !entered {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ended == nil {
			return err
		}
		if s.opts.onDeletionWait != nil {
			s.opts.onDeletionWait(topic, sub)
		}
		select {
		case <-ended:
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for a delete of the same name to end: %w", what, ctx.Err())
		}
	}
}

// deletionOf returns the channel of a delete under way that a catalogue change on topic
// (and sub, or allSubs) must wait for, or nil. It runs on the catalogue's owner goroutine.
func (s *Store) deletionOf(topic, sub string, allSubs bool) chan struct{} {
	if ended, ok := s.deleting[deletion{topic: topic}]; ok {
		return ended
	}
	if sub != "" {
		if ended, ok := s.deleting[deletion{topic, sub}]; ok {
			return ended
		}
	}
	if allSubs {
		for d, ended := range s.deleting {
			if d.topic == topic {
				return ended
			}
		}
	}
	return nil
}

// catalogEnter registers a catalogue change, on the catalogue's owner goroutine: it checks
// the store is open and takes writes. The caller must call release.
func (s *Store) catalogEnter() (g *generation, release func(), err error) {
	s.mu.RLock()
	closed, g := s.closed, s.gen
	if !closed {
		g.users.Add(1)
		s.ops.Add(1)
	}
	s.mu.RUnlock()
	if closed {
		return nil, nil, ErrClosed
	}
	release = func() {
		g.users.Done()
		s.ops.Done()
	}
	if err := g.err(); err != nil {
		release()
		return nil, nil, err
	}
	return g, release, nil
}

// markDeleting marks d as being deleted, in a catalogue change (catalogDo) of a DeleteTopic
// or DeleteSubscription that has taken what it deletes out of the in-memory catalogue (new
// calls find nothing). It counts the delete in s.ops (above zero: the change is registered),
// so Close waits for it; the delete's deleteDrained must follow.
func (s *Store) markDeleting(d deletion) {
	s.deleting[d] = make(chan struct{})
	s.ops.Add(1)
}

// deleteDrained ends a delete of d that markDeleting marked, once its catalogue change has
// ended: it waits for the calls under way on what it deletes (ops), off the catalogue's turn,
// then in a turn of its own runs commit on the store's generation of that moment. Both run on
// a goroutine of the store's (counted in s.ops by markDeleting, so Close waits for it), which
// finishes the delete whatever becomes of the caller: the mark must be removed, and the name
// end deleted or not, never left marked. The caller waits for its result until ctx ends, and
// then returns ctx's error, the delete still under way: it may yet take effect (reading the
// name back tells). When the store has closed or failed meanwhile, restore puts back what
// was taken out (with s.mu held): it is still on disk. When commit fails, its batch may have
// reached the disk all the same (the log written, its sync failed): restore puts it back,
// and the recovery that reopens the store reads whether the batch is on disk and takes it
// out of memory again if it is (settleDeletes); a delete that finds that recovery has done
// so returns nil. The mark is removed, and the changes waiting for it woken, at the end.
func (s *Store) deleteDrained(ctx context.Context, d deletion, ops *sync.WaitGroup, commit func(*generation) error, restore func()) error {
	result := make(chan error, 1) // the goroutine never waits for a caller that gave up
	go func() {
		defer s.ops.Done()
		result <- s.finishDelete(d, ops, commit, restore)
	}()
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		select {
		case err := <-result: // it ended as ctx did: its result is known
			return err
		default:
		}
		return fmt.Errorf("waiting for its commit (it may still take effect: read the name back to know): %w", ctx.Err())
	}
}

// finishDelete is the goroutine of deleteDrained: it waits for the calls under way on what
// the delete takes out (ops) and then commits it, or restores it, in a turn of its own that
// does not end with any caller's ctx, and removes the mark of d.
func (s *Store) finishDelete(d deletion, ops *sync.WaitGroup, commit func(*generation) error, restore func()) error {
	if s.opts.onDrain != nil {
		s.opts.onDrain(d.topic, d.sub)
	}
	ops.Wait()
	return s.catalogTurn(context.Background(), func() error {
		defer func() {
			close(s.deleting[d])
			delete(s.deleting, d)
		}()
		g, release, err := s.catalogEnter()
		attempted := false
		if err == nil {
			err = commit(g)
			attempted = err != nil
			release()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		u := s.unsettled[d]
		switch {
		case err == nil:
			delete(s.unsettled, d)
		case u.gone:
			delete(s.unsettled, d) // a recovery found the batch on disk: the delete took effect
			return nil
		default:
			restore()
			if attempted {
				u.restored = true // until a recovery has read whether the batch is on disk
			} else {
				delete(s.unsettled, d)
			}
		}
		return err
	})
}

// unsettled is a delete whose outcome on disk is not known yet (Store.unsettled): of topic t,
// or of its subscription sb when sb is not nil.
type unsettled struct {
	t  *topic
	sb *sub
	// restored is set when its commit failed and it put back what it had taken out of
	// memory; gone when a recovery found its batch on disk before it did.
	restored, gone bool
}

// PutTopic implements [store.Store]. Definitions are committed with a sync.
func (s *Store) PutTopic(ctx context.Context, name string, spec []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.catalogDo(ctx, fmt.Sprintf("putting topic %q", name), name, "", false, func(g *generation) error {
		if err := s.refuseDamagedTopic(name); err != nil {
			return fmt.Errorf("putting topic: %w", err)
		}
		s.mu.RLock()
		t, exists := s.topics[name]
		id := s.nextID + 1
		s.mu.RUnlock()
		b := g.db.NewBatch()
		if exists {
			id = t.id
		} else if err := b.Set(nextIDKey, encodeUint64(id), nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("putting topic %q: %w", name, err)
		}
		if err := b.Set(nameKey(prefixTopic, name), s.encodeDef(nameKey(prefixTopic, name), id, spec), nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("putting topic %q: %w", name, err)
		}
		if err := g.commit(b, pebble.Sync, s.onFail); err != nil {
			return fmt.Errorf("putting topic %q: %w", name, err)
		}
		if !exists {
			s.mu.Lock()
			s.nextID = id
			s.topics[name] = &topic{id: id, subs: make(map[string]*sub)}
			s.mu.Unlock()
		}
		return nil
	})
}

// DeleteTopic implements [store.Store]. The definition, journal, subscriptions and their
// state go in one synced batch of range deletions, written once the calls under way on the
// topic are done (new ones find no topic). It does not keep the catalogue's turn while it
// waits for them: other topics' definitions change meanwhile, and a change naming this topic
// or one of its subscriptions waits for the delete to end (catalogDo). A delete that does
// not commit (the store closed or failed meanwhile, the write failed) leaves the topic as it
// was. When ctx ends while the delete waits for those calls or for its commit (behind
// another change's, or its own on a slow disk), it returns ctx's error but the store
// finishes the delete: it may still take effect, and reading the name back tells.
func (s *Store) DeleteTopic(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var t *topic
	err := s.catalogDo(ctx, fmt.Sprintf("deleting topic %q", name), name, "", true, func(g *generation) error {
		if handled, err := s.deleteDamagedTopic(g, name); handled {
			return err
		}
		s.mu.Lock()
		found, ok := s.topics[name]
		if ok {
			delete(s.topics, name)
			s.unsettled[deletion{topic: name}] = &unsettled{t: found}
		}
		s.mu.Unlock()
		if !ok {
			return fmt.Errorf("topic %q: %w", name, store.ErrNotFound)
		}
		t = found
		s.markDeleting(deletion{topic: name})
		return nil
	})
	if err != nil || t == nil {
		return err
	}
	commit := func(g *generation) error {
		b := g.db.NewBatch()
		errs := []error{
			b.Delete(nameKey(prefixTopic, name), nil),
			b.DeleteRange(idKey(prefixSub, t.id), idKey(prefixSub, t.id+1), nil),
			b.DeleteRange(idKey(prefixJournal, t.id), idKey(prefixJournal, t.id+1), nil),
			b.Delete(idKey(prefixFloor, t.id), nil),
		}
		s.mu.RLock()
		for _, sb := range t.subs {
			errs = append(errs, deleteSubState(b, sb)...)
		}
		s.mu.RUnlock()
		errs = append(errs, s.damagedSubsState(b, t)...)
		if err := errors.Join(errs...); err != nil {
			_ = b.Close()
			return err
		}
		return g.commit(b, pebble.Sync, s.onFail)
	}
	restore := func() { s.topics[name] = t }
	if err := s.deleteDrained(ctx, deletion{topic: name}, &t.ops, commit, restore); err != nil {
		return fmt.Errorf("deleting topic %q: %w", name, err)
	}
	return nil
}

func deleteSubState(b *pebble.Batch, sb *sub) []error {
	lo, hi := idRange(prefixParked, sb.id)
	hlo, hhi := idRange(prefixHistory, sb.id)
	return []error{
		b.Delete(idKey(prefixCursor, sb.id), nil),
		b.DeleteRange(lo, hi, nil),
		b.Delete(idKey(prefixProbation, sb.id), nil),
		b.DeleteRange(hlo, hhi, nil),
	}
}

// Topics implements [store.Store].
func (s *Store) Topics(ctx context.Context) ([]store.Definition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.enter("", "")
	if err != nil {
		return nil, err
	}
	defer c.done()
	defs, err := s.definitions(c.g.db, []byte{prefixTopic}, []byte{prefixTopic + 1})
	if err != nil {
		return nil, fmt.Errorf("listing topics: %w", err)
	}
	return defs, nil
}

// definitions lists the definitions in [lo, hi); a name is what follows len(lo) in the key.
// A damaged table block among them fails the listing (definitionDamage).
func (s *Store) definitions(db *pebble.DB, lo, hi []byte) ([]store.Definition, error) {
	defs := []store.Definition{}
	err := scan(db, lo, hi, func(k, v []byte) error {
		_, spec, err := s.decodeDef(k, v)
		if err != nil && s.damagedDefKey(k) {
			return nil // reported at Open: not served
		}
		if err != nil {
			return fmt.Errorf("definition %q: %w", k[len(lo):], err)
		}
		defs = append(defs, store.Definition{Name: string(k[len(lo):]), Spec: spec})
		return nil
	})
	if pebble.IsCorruptionError(err) {
		return nil, s.definitionDamage(err)
	}
	return defs, err
}

// PutSubscription implements [store.Store]. A new subscription's cursor is written in the
// same synced batch as its definition: the topic's LastSeq when the call starts.
func (s *Store) PutSubscription(ctx context.Context, topicName, name string, spec []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.catalogDo(ctx, fmt.Sprintf("putting subscription %q of topic %q", name, topicName), topicName, name, false, func(g *generation) error {
		s.mu.RLock()
		t, ok := s.topics[topicName]
		var sb *sub
		exists := false
		if ok {
			sb, exists = t.subs[name]
		}
		id := s.nextID + 1
		s.mu.RUnlock()
		if !ok {
			return fmt.Errorf("topic %q: %w", topicName, store.ErrNotFound)
		}
		if !exists {
			if err := s.refuseDamagedSub(t, topicName, name); err != nil {
				return fmt.Errorf("putting subscription: %w", err)
			}
		}
		b := g.db.NewBatch()
		var errs []error
		if !exists {
			sb = &sub{id: id, cursor: t.lastSeq()}
			errs = append(errs,
				b.Set(nextIDKey, encodeUint64(sb.id), nil),
				b.Set(idKey(prefixCursor, sb.id), encodeUint64(sb.cursor), nil))
		}
		errs = append(errs, b.Set(subDefKey(t.id, name), s.encodeDef(subDefKey(t.id, name), sb.id, spec), nil))
		if err := errors.Join(errs...); err != nil {
			_ = b.Close()
			return fmt.Errorf("putting subscription %q of topic %q: %w", name, topicName, err)
		}
		if err := g.commit(b, pebble.Sync, s.onFail); err != nil {
			return fmt.Errorf("putting subscription %q of topic %q: %w", name, topicName, err)
		}
		if !exists {
			s.mu.Lock()
			s.nextID = sb.id
			t.subs[name] = sb
			s.mu.Unlock()
		}
		return nil
	})
}

// SwapSubscription implements [store.Store]. The read, the comparison and the synced write
// happen in one catalogue change, in its turn after the definition changes before it.
func (s *Store) SwapSubscription(ctx context.Context, topicName, name string, old, spec []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.catalogDo(ctx, fmt.Sprintf("swapping subscription %q of topic %q", name, topicName), topicName, name, false, func(g *generation) error {
		s.mu.RLock()
		t, ok := s.topics[topicName]
		var sb *sub
		if ok {
			sb, ok = t.subs[name]
		}
		s.mu.RUnlock()
		if !ok {
			return fmt.Errorf("subscription %q of topic %q: %w", name, topicName, store.ErrNotFound)
		}
		key := subDefKey(t.id, name)
		v, found, err := get(g.db, key)
		if pebble.IsCorruptionError(err) {
			return fmt.Errorf("swapping subscription %q of topic %q: %w", name, topicName, s.definitionDamage(err))
		}
		if err != nil {
			return fmt.Errorf("swapping subscription %q of topic %q: reading its definition: %w", name, topicName, err)
		}
		if !found {
			return fmt.Errorf("subscription %q of topic %q: %w", name, topicName, store.ErrNotFound)
		}
		_, cur, err := s.decodeDef(key, v)
		if err != nil {
			return fmt.Errorf("swapping subscription %q of topic %q: %w", name, topicName, err)
		}
		if !bytes.Equal(cur, old) {
			return fmt.Errorf("subscription %q of topic %q: %w", name, topicName, store.ErrChanged)
		}
		b := g.db.NewBatch()
		if err := b.Set(key, s.encodeDef(key, sb.id, spec), nil); err != nil {
			_ = b.Close()
			return fmt.Errorf("swapping subscription %q of topic %q: %w", name, topicName, err)
		}
		if err := g.commit(b, pebble.Sync, s.onFail); err != nil {
			return fmt.Errorf("swapping subscription %q of topic %q: %w", name, topicName, err)
		}
		return nil
	})
}

// DeleteSubscription implements [store.Store]. It is written once the calls under way on the
// subscription are done (new ones find no subscription), without keeping the catalogue's
// turn while it waits for them, as DeleteTopic: a change naming the subscription or its topic
// waits for the delete to end. A delete that does not commit leaves the subscription as it
// was. As with DeleteTopic, one whose ctx ends while it waits for its commit returns ctx's
// error and may still take effect.
func (s *Store) DeleteSubscription(ctx context.Context, topicName, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var t *topic
	var sb *sub
	err := s.catalogDo(ctx, fmt.Sprintf("deleting subscription %q of topic %q", name, topicName), topicName, name, false, func(g *generation) error {
		if handled, err := s.deleteDamagedSub(g, topicName, name); handled {
			return err
		}
		s.mu.Lock()
		ft, ok := s.topics[topicName]
		var fsb *sub
		if ok {
			if fsb, ok = ft.subs[name]; ok {
				delete(ft.subs, name)
				s.unsettled[deletion{topicName, name}] = &unsettled{t: ft, sb: fsb}
			}
		}
		s.mu.Unlock()
		if !ok {
			return fmt.Errorf("subscription %q of topic %q: %w", name, topicName, store.ErrNotFound)
		}
		t, sb = ft, fsb
		s.markDeleting(deletion{topicName, name})
		return nil
	})
	if err != nil || sb == nil {
		return err
	}
	commit := func(g *generation) error {
		b := g.db.NewBatch()
		errs := append(deleteSubState(b, sb), b.Delete(subDefKey(t.id, name), nil))
		if err := errors.Join(errs...); err != nil {
			_ = b.Close()
			return err
		}
		return g.commit(b, pebble.Sync, s.onFail)
	}
	restore := func() { t.subs[name] = sb }
	if err := s.deleteDrained(ctx, deletion{topicName, name}, &sb.ops, commit, restore); err != nil {
		return fmt.Errorf("deleting subscription %q of topic %q: %w", name, topicName, err)
	}
	return nil
}

// Subscriptions implements [store.Store].
func (s *Store) Subscriptions(ctx context.Context, topicName string) ([]store.Definition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.enter(topicName, "")
	if err != nil {
		return nil, err
	}
	defer c.done()
	defs, err := s.definitions(c.g.db, idKey(prefixSub, c.t.id), idKey(prefixSub, c.t.id+1))
	if err != nil {
		return nil, fmt.Errorf("listing subscriptions of topic %q: %w", topicName, err)
	}
	return defs, nil
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
		s.mu.RLock()
		lost := len(s.pending)
		s.mu.RUnlock()
		if lost > 0 {
			s.log.Warn("disk store: closing while failed; subscription state writes kept in memory are not written (their events may be delivered again after the restart)", "writes", lost)
		}
		s.abandon(g)
		return s.lock.release()
	}
	return errors.Join(s.closeGeneration(g), s.lock.release())
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
	c, err := s.enter("", "")
	if err != nil {
		return err
	}
	defer c.done()
	if err := c.g.err(); err != nil {
		return fmt.Errorf("%s dead letters: %w", what, err)
	}
	b := c.g.db.NewBatch()
	if err := build(b); err != nil {
		_ = b.Close()
		return fmt.Errorf("%s dead letters: %w", what, err)
	}
	if b.Empty() {
		_ = b.Close()
		return nil
	}
	if err := c.g.commit(b, pebble.Sync, s.onFail); err != nil {
		return fmt.Errorf("%s dead letters: %w", what, err)
	}
	return nil
}

// heldDeadLetters returns the dead letters handed over by updates kept in memory while the
// store is failed, by ID: they are part of the outbox too (as LoadSubscription applies those
// updates), newer than what the database holds under their IDs, and a dead-letter actor that
// reloads meanwhile must find them. The payloads are the updates' own: copy before handing
// them out.
func (s *Store) heldDeadLetters() map[string][]byte {
	held := map[string][]byte{}
	s.mu.RLock()
	for _, w := range s.pending {
		for _, d := range w.update().DeadLetters {
			held[d.ID] = d.Payload
		}
	}
	s.mu.RUnlock()
	return held
}

// ScanDeadLetters implements [store.Store]: one iterator over the outbox's keys, a record
// decoded (copied) at a time, then the records held in memory while the store is failed.
//
// Records in a damaged table block are lost: the scan goes on after the block, which is
// reported once (an ERROR saying what is lost and what to do, and a count of kind
// DamageTable), and gives every record it can read; a router whose outbox holds such a block
// starts. A read-only store (egrid store check) gives what it can read as well, then returns
// the damage, wrapping [ErrCorrupt].
func (s *Store) ScanDeadLetters(ctx context.Context, fn func(store.DeadLetterRecord) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c, err := s.enter("", "")
	if err != nil {
		return err
	}
	defer c.done()
	held := s.heldDeadLetters()
	var fnErr error
	problems, err := s.scanOutbox(c.g.db, func(k, v []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, ok := held[string(k[1:])]; ok {
			return nil // the held one is newer
		}
		payload, err := decodeOpaque(v)
		if err != nil {
			return fmt.Errorf("dead letter %q: %w", k[1:], err)
		}
		if err := fn(store.DeadLetterRecord{ID: string(k[1:]), Payload: payload}); err != nil {
			fnErr = err
			return err
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("listing dead letters: %w", err)
	}
	for id, payload := range held {
		if err := fn(store.DeadLetterRecord{ID: id, Payload: slices.Clone(payload)}); err != nil {
			return err
		}
	}
	return s.outboxProblems(problems)
}

// outboxProblems is what a scan of the outbox that met problems (scanOutbox) returns: nothing
// for a running store, which has reported them and goes on without what they hold; the
// problems for egrid store check (a read-only store), which lists them.
func (s *Store) outboxProblems(problems []error) error {
	if !s.opts.ReadOnly || len(problems) == 0 {
		return nil
	}
	return &outboxDamageError{problems}
}

// DeadLettersByID implements [store.Store]: a point read of each id. A dead letter in a
// damaged table block fails the call with an error wrapping [ErrCorrupt] (deadLetterDamage).
func (s *Store) DeadLettersByID(ctx context.Context, ids []string) ([]store.DeadLetterRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.enter("", "")
	if err != nil {
		return nil, err
	}
	defer c.done()
	held := s.heldDeadLetters()
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	recs := make([]store.DeadLetterRecord, 0, len(ids))
	for _, id := range ids {
		if payload, ok := held[id]; ok {
			recs = append(recs, store.DeadLetterRecord{ID: id, Payload: slices.Clone(payload)})
			continue
		}
		v, ok, err := get(c.g.db, nameKey(prefixDeadLetter, id))
		if pebble.IsCorruptionError(err) {
			return nil, s.deadLetterDamage(id, err)
		}
		if err != nil {
			return nil, fmt.Errorf("reading dead letter %q: %w", id, err)
		}
		if !ok {
			continue
		}
		payload, err := decodeOpaque(v)
		if err != nil {
			return nil, fmt.Errorf("dead letter %q: %w", id, err)
		}
		recs = append(recs, store.DeadLetterRecord{ID: id, Payload: payload})
	}
	return recs, nil
}

// DeadLetters implements [store.Store]. Records in a damaged table block are lost, as
// ScanDeadLetters says.
func (s *Store) DeadLetters(ctx context.Context) ([]store.DeadLetterRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.enter("", "")
	if err != nil {
		return nil, err
	}
	defer c.done()
	held := s.heldDeadLetters()
	recs := []store.DeadLetterRecord{}
	problems, err := s.scanOutbox(c.g.db, func(k, v []byte) error {
		if _, ok := held[string(k[1:])]; ok {
			return nil // the held one is newer
		}
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
	if err := s.outboxProblems(problems); err != nil {
		return nil, err
	}
	if len(held) == 0 {
		return recs, nil
	}
	for id, payload := range held {
		recs = append(recs, store.DeadLetterRecord{ID: id, Payload: slices.Clone(payload)})
	}
	slices.SortFunc(recs, func(a, b store.DeadLetterRecord) int { return strings.Compare(a.ID, b.ID) })
	return recs, nil
}
