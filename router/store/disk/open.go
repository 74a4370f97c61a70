package disk

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/schemas/clip"
)

// Opening a store: Open opens the first generation on the directory (generation.go, which
// takes the directory's lock), loads from it what the store keeps in memory (load: the
// catalogue, the subscriptions' cursors, each topic's trim floor and newest seq) and starts
// the recovery loop and the catalogue's owner goroutine.

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
					report := corruptionReport(info)
					rep.report(slog.LevelWarn, report, "pebble: damaged data", "component", "pebble", "info", report)
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
	s.walPolicy = newWALPolicy(dir, opts.MemTableSize)
	s.walPolicy.apply(&s.popts)
	if opts.fs == vfs.Default && !opts.ReadOnly && !opts.FdatasyncLog {
		if r, err := newSyncRing(); err == nil {
			s.ring = r
		} else {
			s.log.Debug("disk store: syncing the write-ahead log with fdatasync", "reason", err)
		}
	}
	defer func() {
		if err != nil && s.ring != nil {
			s.ring.close() // a store that did not open gives its ring back
		}
	}()
	s.pebbleFS = s.newWALSpaceFS(opts.fs)
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
	// The lock first: a store another process holds is refused as such, not for the
	// half-made files of a store it is creating as this one looks (a missing marker).
	if !opts.ReadOnly {
		if err := opts.fs.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("opening disk store in %s: %w", dir, err)
		}
	}
	s.lock.readOnly = opts.ReadOnly
	if err := s.lock.acquire(opts.fs, opts.fs.PathJoin(dir, lockFile)); err != nil {
		return nil, fmt.Errorf("opening disk store in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			_ = s.lock.release() // the generation, failed to open or closed, leaves it held
		}
	}()
	problems, kinds, tails, err := CheckDir(opts.fs, dir)
	if err != nil {
		return nil, fmt.Errorf("opening disk store in %s: %w", dir, err)
	}
	for _, tail := range tails {
		s.log.Error("disk store: a write-ahead log ends damaged; starting without what follows the damage", "dir", dir, "err", tail)
		s.damaged(DamageWAL)
	}
	if len(problems) > 0 {
		for i, p := range problems {
			s.log.Error("disk store: damage found; refusing to start", "dir", dir, "err", p)
			s.damaged(kinds[i])
		}
		return nil, fmt.Errorf("opening disk store in %s: %w", dir, &damageError{problems: problems, tails: tails})
	}
	s.tails = tails
	s.popts.ReadOnly = opts.ReadOnly
	prior, err := peekPebbleFormat(opts.fs, dir)
	if err != nil {
		return nil, fmt.Errorf("opening disk store in %s: %w", dir, err)
	}
	g, err := openGeneration(dir, s.pebbleFS, s.lock, s.popts, opts.Logger, s.onFail, opts.onParkedCreate)
	if err != nil {
		if problems := tableProblems(opts.fs, dir, err); len(problems) > 0 {
			for _, p := range problems {
				s.log.Error("disk store: damage found; refusing to start", "dir", dir, "err", p)
				s.damaged(DamageTable)
			}
			return nil, fmt.Errorf("opening disk store in %s: %w", dir, &damageError{problems: problems, tails: tails})
		}
		if pebble.IsCorruptionError(err) {
			s.log.Error("disk store: pebble found damage; refusing to start: restore the directory from a backup", "dir", dir, "err", err)
			s.damaged(DamageWAL)
			err = errors.Join(ErrCorrupt, err)
		}
		if diskFull(err) {
			return nil, fmt.Errorf("opening disk store in %s: %w; %s", dir, err, fullDiskOpenNote(opts.fs, dir, opts.MinFreeBytes))
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
		lost, end, err := loadSeqs(g, s.dir, t)
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
func loadSeqs(g *generation, dir string, t *topic) (lost error, end journalEnd, err error) {
	db := g.db
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
	end, err = readJournalEnd(g, dir, t.id)
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
