package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas/clip"
)

// recoverFloorMin is the least free space the store waits for before it reopens itself: a new
// write-ahead log and MANIFEST must fit.
const recoverFloorMin = 16 << 20

// reopenFloor is the free space the store waits for before it reopens itself after a failed
// write: the floor (Options.MinFreeBytes), and never less than recoverFloorMin.
func (s *Store) reopenFloor() uint64 {
	return max(s.opts.MinFreeBytes, recoverFloorMin)
}

// recoverLoop reopens the store after its generation failed, once the disk has room again.
// It runs from Open to Close.
func (s *Store) recoverLoop() {
	defer close(s.loopDone)
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		delay := s.opts.RecoverInterval
		for {
			done, attempted := s.tryRecover()
			if done {
				break
			}
			if !attempted {
				delay = s.opts.RecoverInterval // waiting for space costs one statfs a tick
			}
			timer := time.NewTimer(delay)
			select {
			case <-s.stop:
				timer.Stop()
				return
			case <-timer.C:
			}
			if attempted {
				delay = min(2*delay, 30*time.Second) // a failed reopen costs more: back off
			}
		}
	}
}

// tryRecover opens a new generation in place of the failed one and reports whether the store
// is healthy now. The new instance replays the write-ahead log (every acknowledged Append and
// definition is there: they were synced); what the failed instance held only in memory — the
// subscription state written without a sync — is copied over from it in one synced batch, then
// the state writes kept in memory while failed are written in order, and only then does the
// store switch to the new instance. attempted is false when it waited for free space without
// trying.
func (s *Store) tryRecover() (done, attempted bool) {
	s.mu.RLock()
	old, closed := s.gen, s.closed
	s.mu.RUnlock()
	if closed || !old.isFailed() {
		return true, false
	}
	if errors.Is(old.err(), ErrCorrupt) {
		// Writes stopped behind a damaged table file (compactionGate.checkStall): a new
		// instance would stop at its first write. The store stays failed until restored.
		return true, false
	}
	floor := s.reopenFloor()
	if free, err := s.opts.freeBytes(s.dir); err == nil {
		s.health.setFree(free)
		if free < floor {
			s.log.Debug("disk store: waiting for free space before reopening", "dir", s.dir, "free", free, "need", floor)
			return false, false
		}
	}
	start := time.Now()
	// The old instance writes nothing any more; its reads go on until the switch. The new
	// one shares the store's directory lock, held throughout.
	old.fs.fence()
	g, err := openGeneration(s.dir, s.pebbleFS, s.lock, s.popts, s.log, s.onFail, s.opts.onParkedCreate)
	if err != nil {
		s.log.Warn("disk store: reopening failed; trying again", "dir", s.dir, "err", err)
		return false, true
	}
	settled, err := s.settleDeletes(g)
	if err != nil {
		s.log.Warn("disk store: reopening failed; trying again", "dir", s.dir, "err", err)
		s.dropGeneration(g)
		return false, true
	}
	if err := s.copyState(old, g, settled.ids); err != nil {
		s.log.Warn("disk store: reopening failed; trying again", "dir", s.dir, "err", err)
		s.dropGeneration(g)
		return false, true
	}
	// Journal numbering continues from what is on disk; no Append runs meanwhile (the
	// topics are broken until the switch). The topics being deleted are numbered as well: a
	// delete that does not commit puts its topic back, before the switch or after it.
	s.mu.RLock()
	topics := make([]*topic, 0, len(s.topics)+len(s.unsettled))
	for _, t := range s.topics {
		topics = append(topics, t)
	}
	for _, u := range s.unsettled {
		if u.sb == nil {
			topics = append(topics, u.t)
		}
	}
	s.mu.RUnlock()
	lasts := make(map[*topic]journalEnd, len(topics))
	for _, t := range topics {
		end, err := readJournalEnd(g, s.dir, t.id)
		if err != nil {
			s.log.Warn("disk store: reopening failed; trying again", "dir", s.dir, "err", err)
			s.dropGeneration(g)
			return false, true
		}
		lasts[t] = end
	}
	if s.opts.onRecoverSwitch != nil {
		s.opts.onRecoverSwitch()
	}
	written := 0
	for {
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		if len(batch) == 0 {
			if s.closed {
				s.mu.Unlock()
				s.dropGeneration(g)
				return true, true
			}
			s.gen = g
			s.applySettled(settled)
			var found []*topic
			for t, end := range lasts {
				t.mu.Lock()
				t.next = max(end.last, t.floor, t.next)
				t.visible = t.next
				t.inflight = nil
				t.broken = false
				t.endClosed = t.endClosed || end.closed
				if end.damaged && !t.endReported {
					found = append(found, t)
				}
				t.mu.Unlock()
			}
			names := make(map[*topic]string, len(found))
			for name, t := range s.topics {
				names[t] = name
			}
			s.mu.Unlock()
			for _, t := range found {
				if name, ok := names[t]; ok {
					_ = s.journalEndDamage(name, t, lasts[t]) // found by this reopening
				}
			}
			break
		}
		s.mu.Unlock()
		for i, w := range batch {
			if settled.topics[w.t] || settled.subs[w.sb] {
				continue // deleted on disk: its state goes with it
			}
			b := g.db.NewBatch()
			err := w.build(b)
			if err == nil {
				err = g.commit(b, pebble.NoSync, s.onFail)
			} else {
				_ = b.Close()
			}
			if err != nil {
				s.mu.Lock()
				s.pending = append(slices.Clone(batch[i:]), s.pending...)
				s.mu.Unlock()
				s.log.Warn("disk store: reopening failed; trying again", "dir", s.dir, "err", err)
				s.dropGeneration(g)
				return false, true
			}
			written++
		}
	}
	s.abandon(old)
	took := time.Since(start)
	s.health.setRecovered()
	s.log.Warn("disk store: reopened after a failed write; publishes are accepted again",
		"dir", s.dir, "took", took, "stateWritesKeptInMemory", written)
	return true, true
}

// dropGeneration gives up a generation opened during a recovery attempt that did not finish.
func (s *Store) dropGeneration(g *generation) {
	if g.isFailed() {
		s.abandon(g)
		return
	}
	if err := g.db.Close(); err != nil {
		s.log.Warn("disk store: closing an unused instance", "err", err)
	}
}

// copyState writes the subscription state old holds (cursors, parked events, probation,
// trim floors: everything written without a sync, which its memtable has and its log may
// not) to g, replacing g's, in one synced batch; but none under skip's ids (of topics and
// subscriptions whose delete is on disk, settleDeletes). A damaged table block met on the way
// is gone past (scanPastDamage), as a start goes past it, and reported once (copyDamage);
// failing the copy instead kept the store failed for good, trying again every 30 s. What the
// block holds cannot be read in old any more than in g: g's copy is replaced, as the rest,
// by what memory holds of it (the cursors and trim floors of the topics and subscriptions
// whose keys it may hold), or by nothing (parked retries and probation states: lost).
func (s *Store) copyState(old, g *generation, skip map[uint64]bool) error {
	b := g.db.NewBatch()
	var errs []error
	for _, p := range []byte{prefixCursor, prefixParked, prefixProbation, prefixFloor} {
		errs = append(errs, b.DeleteRange([]byte{p}, []byte{p + 1}, nil))
		set := func(k, v []byte) error {
			if p == prefixFloor {
				// The journal up to the floor was trimmed in old; the log may have lost that.
				if floor, ok := decodeUint64(v); ok && len(k) == 9 {
					errs = append(errs, b.DeleteRange(seqKey(prefixJournal, idOf(k), 0), seqKey(prefixJournal, idOf(k), floor+1), nil))
				}
			}
			return b.Set(k, v, nil)
		}
		err := scanPastDamage(old.db, []byte{p}, []byte{p + 1}, func(k, v []byte) error {
			if len(k) >= 9 && skip[idOf(k)] {
				return nil
			}
			return set(k, v)
		}, func(bad, next []byte, err error) ([]byte, error) {
			lo, hi := spanIDs(bad, next)
			for id, v := range s.heldState(p, lo, hi) {
				if !skip[id] {
					errs = append(errs, set(idKey(p, id), v))
				}
			}
			s.copyDamage(p, lo, hi, err)
			return next, nil
		})
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		_ = b.Close()
		return fmt.Errorf("copying subscription state: %w", err)
	}
	return g.commit(b, pebble.Sync, s.onFail)
}

// heldState returns, by id, the values that memory holds of the keys under prefix of the
// topics and subscriptions whose ids lie from lo through hi: their trim floors (prefixFloor)
// or cursors (prefixCursor); nothing for other prefixes.
func (s *Store) heldState(prefix byte, lo, hi uint64) map[uint64][]byte {
	out := map[uint64][]byte{}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, t := range s.topics {
		if prefix == prefixFloor && t.id >= lo && t.id <= hi {
			t.mu.Lock()
			out[t.id] = encodeUint64(t.floor)
			t.mu.Unlock()
		}
		for _, sb := range t.subs {
			if prefix == prefixCursor && sb.id >= lo && sb.id <= hi {
				out[sb.id] = encodeUint64(sb.getCursor())
			}
		}
	}
	return out
}

// copyDamage reports, once per Store, a damaged table block that copyState went past in the
// keys under prefix of the ids from lo through hi (pebble failing with err): an ERROR
// naming the topics and subscriptions whose state it may hold and what is lost, and a count.
// A block counted already (by Open, a subscription's load, an earlier reopening) is not
// counted again, and its loss of this kind of state not reported again.
func (s *Store) copyDamage(prefix byte, lo, hi uint64, err error) {
	if !s.lostBlock(err, lostState(prefix)) {
		return
	}
	var what string
	switch prefix {
	case prefixCursor:
		what = "their cursors are written again from memory, and nothing is lost"
	case prefixFloor:
		what = "their trim floors are written again from memory, and nothing is lost"
	case prefixParked:
		what = "parked retries among them are lost to their subscriptions (neither retried nor dead-lettered), which go on with their other events; restore the data directory from a backup to recover them"
	default:
		what = "probation states among them are lost: their endpoints are taken as healthy, and no event is lost"
	}
	s.log.Error("disk store: reopening after a failed write met a damaged table block holding the state of topics or subscriptions, and goes on past it: "+what+"; egrid store check --data-dir DIR lists other damage",
		"dir", s.dir, "of", s.idNames(lo, hi))
}

// settled is what a recovery found of the deletes whose outcome was not known
// (settleDeletes): those whose batch is on disk (gone), with their topics, subscriptions and
// the ids their state is kept under, and those whose definition is still there (kept).
type settled struct {
	gone, kept map[deletion]*unsettled
	topics     map[*topic]bool
	subs       map[*sub]bool
	ids        map[uint64]bool
}

// settleDeletes reads in g, the instance a recovery opened, whether the batch of each delete
// in s.unsettled is on disk: a delete's synced commit that failed after its batch reached the
// write-ahead log (the write went through, the sync did not) is replayed by g, though the
// delete put back in memory what it had taken out. The old instance is fenced, so no batch
// reaches the disk any more: what g holds is the outcome.
//
// A definition in a damaged table block cannot be read: its delete is taken as not on disk (a
// batch replayed by g would hold the delete in g's memtable, which the read meets before any
// table block), so the topic or subscription is kept, as the failed delete answered, and the
// block is reported once (unsettledDamage); the recovery goes on. Failing it instead would
// keep the store refusing writes for as long as the process ran, each try meeting the block.
func (s *Store) settleDeletes(g *generation) (settled, error) {
	out := settled{gone: map[deletion]*unsettled{}, kept: map[deletion]*unsettled{}, topics: map[*topic]bool{}, subs: map[*sub]bool{}, ids: map[uint64]bool{}}
	s.mu.RLock()
	pending := maps.Clone(s.unsettled)
	s.mu.RUnlock()
	for d, u := range pending {
		key := nameKey(prefixTopic, d.topic)
		if u.sb != nil {
			key = subDefKey(u.t.id, d.sub)
		}
		_, ok, err := get(g.db, key)
		if pebble.IsCorruptionError(err) {
			s.unsettledDamage(d, err)
			ok, err = true, nil
		}
		if err != nil {
			return settled{}, fmt.Errorf("reading whether a failed delete reached the disk: %w", err)
		}
		if ok {
			out.kept[d] = u
			continue
		}
		out.gone[d] = u
		if u.sb != nil {
			out.subs[u.sb], out.ids[u.sb.id] = true, true
			continue
		}
		out.topics[u.t], out.ids[u.t.id] = true, true
		s.mu.RLock()
		for _, sb := range u.t.subs {
			out.subs[sb], out.ids[sb.id] = true, true
		}
		for _, dd := range u.t.damagedSubs {
			if dd.id != 0 {
				out.ids[dd.id] = true
			}
		}
		s.mu.RUnlock()
	}
	return out, nil
}

// unsettledDamage reports that the definition of failed delete d is in a damaged table block
// (err), which settleDeletes takes as still there: the block is counted once per Store, and
// its loss of definitions told once (an ERROR saying what to do).
func (s *Store) unsettledDamage(d deletion, err error) {
	if !s.lostBlock(err, lostDefinitions) {
		return
	}
	what := fmt.Sprintf("topic %q", clip.String(d.topic))
	if d.sub != "" {
		what = fmt.Sprintf("subscription %q of topic %q", clip.String(d.sub), clip.String(d.topic))
	}
	s.log.Error("disk store: reopening after a failed write could not read whether a failed delete reached the disk: the definition is in a damaged table block. It is taken as still there, as the delete answered (it failed): delete it again. Listings and changes of the definitions in the block fail, and the next start is refused: restore the data directory from a backup; egrid store check --data-dir DIR lists the damage",
		"dir", s.dir, "of", what, "err", err)
}

// applySettled makes the in-memory catalogue follow what settleDeletes found on disk, as a
// recovery switches to its new instance (s.mu held). A delete whose batch is on disk and
// that has put back what it deleted is taken out again; one that has not yet is told not to
// (it returns nil). A delete found not on disk that has put back what it deleted is done with.
func (s *Store) applySettled(st settled) {
	for d, u := range st.kept {
		if s.unsettled[d] == u && u.restored {
			delete(s.unsettled, d)
		}
	}
	for d, u := range st.gone {
		if s.unsettled[d] != u {
			continue // ended since (it committed)
		}
		if !u.restored {
			u.gone = true
			continue
		}
		delete(s.unsettled, d)
		what := "topic"
		if u.sb == nil {
			if s.topics[d.topic] == u.t {
				delete(s.topics, d.topic)
			}
		} else {
			what = "subscription"
			if u.t.subs[d.sub] == u.sb {
				delete(u.t.subs, d.sub)
			}
		}
		s.log.Warn("disk store: a delete answered with an error (the disk failed as it was written) had reached the disk after all: the "+what+" is deleted, as asked",
			"dir", s.dir, "topic", clip.String(d.topic), "subscription", clip.String(d.sub))
	}
}

// sortParked orders parked events by Seq.
func sortParked(ps []store.Parked) {
	slices.SortFunc(ps, func(a, b store.Parked) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
}

// healthState is what [Store.Health] reports.
type healthState struct {
	minFree uint64

	mu          sync.Mutex
	failed      error
	since       time.Time
	recoveries  int
	corruptions int
	changed     chan struct{} // closed and replaced at every change of failed

	free      atomic.Uint64
	checkedAt atomic.Int64 // unix nanoseconds of the latest free-space check
}

func (h *healthState) setFailed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failed, h.since = err, time.Now()
	h.notifyLocked()
}

func (h *healthState) setRecovered() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failed, h.since = nil, time.Now()
	h.recoveries++
	h.notifyLocked()
}

func (h *healthState) notifyLocked() {
	if h.changed != nil {
		close(h.changed)
	}
	h.changed = make(chan struct{})
}

// watch returns whether the store is failed now and a channel closed at the next change.
func (h *healthState) watch() (failed bool, changed <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changed == nil {
		h.changed = make(chan struct{})
	}
	return h.failed != nil, h.changed
}

func (h *healthState) setFree(free uint64) {
	h.free.Store(free)
	h.checkedAt.Store(time.Now().UnixNano())
}

// spaceCheckEvery is how often Append asks the file system for its free space.
const spaceCheckEvery = 100 * time.Millisecond

// spaceErr returns an error wrapping [store.ErrInsufficientStorage] when the disk is below
// Options.MinFreeBytes. The free space is asked at most every spaceCheckEvery while above the
// floor.
func (s *Store) spaceErr() error {
	floor := s.opts.MinFreeBytes
	if floor == 0 {
		return nil
	}
	h := &s.health
	// Below the floor every call asks, so publishes are accepted as soon as there is room.
	if h.free.Load() < floor || time.Since(time.Unix(0, h.checkedAt.Load())) >= spaceCheckEvery {
		free, err := s.opts.freeBytes(s.dir)
		if err != nil {
			return nil // no way to tell: let the write decide
		}
		h.setFree(free)
	}
	if free := h.free.Load(); free < floor {
		s.maybeReclaim()
		return fmt.Errorf("%w: %s free on the file system of %s, below the floor of %s (--min-free-disk): free disk space (delete files, grow the volume), or let subscriptions catch up so the journal is trimmed; publishes are accepted again as soon as there is room",
			store.ErrInsufficientStorage, formatBytes(free), s.dir, formatBytes(floor))
	}
	return nil
}

// Health implements [store.HealthReporter].
func (s *Store) Health() store.Health {
	h := &s.health
	spaceErr := s.spaceErr()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := store.Health{State: store.Healthy, Since: h.since, FreeBytes: h.free.Load(), MinFreeBytes: s.opts.MinFreeBytes, Recoveries: h.recoveries, Corruptions: h.corruptions}
	switch {
	case h.failed != nil:
		out.State = store.Failed
		r := room{need: s.reopenFloor(), floor: s.opts.MinFreeBytes}
		if h.checkedAt.Load() != 0 {
			r.free, r.known = h.free.Load(), true
		}
		out.Reason = h.failed.Error() + "; " + remedy(s.dir, h.failed, r)
	case spaceErr != nil:
		out.State = store.LowSpace
		out.Reason = spaceErr.Error()
	}
	return out
}

// formatBytes writes n in MiB or GiB, for messages.
func formatBytes(n uint64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

var _ store.HealthReporter = (*Store)(nil)

// diskFull reports whether a write failed because the disk is full: no space left on the
// device, or the quota of egrid's user used up. Pebble keeps the file system's error in the
// chain of the ones it fails with (a log write or sync, a table file's creation or write in a
// flush), and so does the store's fatalError. Windows has errors of its own for it
// (diskFullErrnos).
func diskFull(cause error) bool {
	if errors.Is(cause, syscall.ENOSPC) || errors.Is(cause, syscall.EDQUOT) {
		return true
	}
	for _, e := range diskFullErrnos {
		if errors.Is(cause, e) {
			return true
		}
	}
	return false
}

// room is what a failed store says of the free space it waits for: need, the free space a
// reopening waits for (Store.reopenFloor); floor, Options.MinFreeBytes; and free, the free
// space found at the latest check, when known.
type room struct {
	need, floor, free uint64
	known             bool
}

// remedy says what the operator does about a failed write: free space on the disk, unless
// the cause says that the store's files cannot be written at all (a permission, a file system
// mounted read-only), which no free space cures, or that writes stopped behind damage
// (compactionGate.checkStall), which only a restore cures. For the disk it names the free
// space the reopening waits for (r.need) and why, and what is free now: a floor below what a
// reopening needs left a store failed with free space above the floor and a reason that said
// only that it reopens "once it has room".
func remedy(dir string, cause error, r room) string {
	if errors.Is(cause, ErrCorrupt) {
		return "the store does not reopen itself past damage: start egrid again once the directory is restored"
	}
	if errors.Is(cause, fs.ErrPermission) || errors.Is(cause, syscall.EROFS) {
		return fmt.Sprintf("make %s and every file in it writable by egrid's user (an owner or mode changed, or the file system is mounted read-only); the store reopens itself once it can write there", dir)
	}
	why := "the free-space floor, --min-free-disk"
	if r.need > r.floor {
		why = fmt.Sprintf("a reopening needs %s for a new write-ahead log and MANIFEST", formatBytes(r.need))
		if r.floor > 0 {
			why += fmt.Sprintf(", more than the free-space floor of %s (--min-free-disk)", formatBytes(r.floor))
		}
	}
	msg := fmt.Sprintf("free disk space on the store's file system: the store reopens itself once at least %s is free (%s)", formatBytes(r.need), why)
	if r.known {
		msg += fmt.Sprintf("; %s free now", formatBytes(r.free))
	}
	return msg
}
