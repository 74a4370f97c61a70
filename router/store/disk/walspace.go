package disk

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The disk space of pebble's write-ahead logs.
//
// Pebble starts a new log with every memtable; its memtables start at 256 KiB and double up to
// Options.MemTableSize, so a store's first megabytes of writes already go through several
// logs. Two things make each log hold far more disk than it has data:
//
//   - Preallocation: as a log is written pebble reserves its space (fallocate, keeping the
//     file's size) in blocks of 110 % of MemTableSize (DB.walPreallocateSize; 70.4 MB for the
//     default 64 MiB), so a log with a few hundred bytes holds 70 MB, and an fallocate that
//     does not fit takes what is left of the disk on ext4.
//   - Recycling: a log whose memtable is flushed is obsolete; pebble keeps up to
//     MemTableStopWritesThreshold+1 (3) of them, with their space, to write the next logs
//     into (a recycled file syncs faster than a new one).
//
// With the live logs that makes about five reservations, 350 MB: nothing on a large volume,
// the whole disk on a small one (a 200 MB volume was full after half a megabyte of events). On
// a volume smaller than smallVolumeFactor times that, the store turns both off (walPolicy):
// a log then holds the data written to it and is deleted once its memtable is flushed. On a
// larger one it keeps pebble's defaults, except that a preallocation never takes the free
// space below the free-space floor (or recoverFloorMin).
//
// A log is obsolete only once its memtable is flushed, which pebble does when the memtable
// is full: a store whose publishes stopped at the floor writes little more, so its log, with
// every event the subscriptions have delivered and the journal trimmed since, stayed on the
// disk, and the store stayed below the floor for good. Below the floor the store therefore
// flushes the memtable itself once the journal has been trimmed (reclaim), and compacts the
// trimmed journal, so that the space comes back and publishes are taken again.

// ReopenFreeBytes is the least free space the store waits for before it reopens itself after a
// failed write, whatever Options.MinFreeBytes: a new write-ahead log and MANIFEST, and the
// flush of the log it replays, must fit. egrid's default floor is at least this.
const ReopenFreeBytes = recoverFloorMin

// smallVolumeFactor: the write-ahead logs' reservations may take at most 1/16 of the volume.
const smallVolumeFactor = 16

// walReservations is how many preallocated logs pebble may hold at once: the recycled ones
// (MemTableStopWritesThreshold+1, the threshold being pebble's default of 2) and the live
// ones (the memtables queued for a flush, up to the threshold).
const walReservations = 5

// walPolicy is how the store has pebble keep its write-ahead logs on a volume.
type walPolicy struct {
	// small: the volume is too small for pebble's reservations; no preallocation, no
	// recycling.
	small bool
}

// newWALPolicy returns the policy for the store in dir with a memtable of memTable bytes.
func newWALPolicy(dir string, memTable uint64) walPolicy {
	total, err := volumeBytes(existingParent(dir))
	if err != nil || total == 0 {
		return walPolicy{} // unknown: pebble's defaults
	}
	reserved := walReservations * (memTable + memTable/10)
	return walPolicy{small: reserved*smallVolumeFactor > total}
}

// existingParent returns dir, or its nearest parent that exists (the store's directory before
// its first Open).
func existingParent(dir string) string {
	d := filepath.Clean(dir)
	for range 64 { // bounded: a path has fewer levels
		if _, err := vfs.Default.Stat(d); err == nil {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	return dir
}

// apply sets pebble's options for p: a cleaner that deletes obsolete logs instead of keeping
// them for recycling on a small volume.
func (p walPolicy) apply(popts *pebble.Options) {
	if p.small {
		popts.Cleaner = noRecycleCleaner{}
	}
}

// noRecycleCleaner deletes obsolete files, with the Clean of the embedded DeleteCleaner,
// and turns log recycling off: pebble recycles no log when its cleaner needs the files'
// contents (base.NeedsFileContents, pebble's only switch for it, not exported), which
// ArchiveCleaner says; embedded one level deeper, its Clean (a move to an archive directory)
// is hidden by DeleteCleaner's.
type noRecycleCleaner struct {
	pebble.DeleteCleaner
	needsContents
}

type needsContents struct{ pebble.ArchiveCleaner }

// walSpaceFS is the file system under each generation's fenceFS: it gives the store's
// write-ahead logs (*.log) a Preallocate that follows the policy.
type walSpaceFS struct {
	vfs.FS
	prealloc func(n int64) bool
	ring     *syncRing // nil: the logs sync with fdatasync
}

func (s *Store) newWALSpaceFS(inner vfs.FS) vfs.FS {
	return walSpaceFS{FS: inner, ring: s.ring, prealloc: func(n int64) bool {
		if s.walPolicy.small {
			return false
		}
		free, err := s.opts.freeBytes(s.dir)
		if err != nil {
			return true
		}
		return free >= uint64(n)+s.reopenFloor()
	}}
}

func (fs walSpaceFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return walSpaceFile{File: f, prealloc: fs.prealloc, ring: fs.ring}, nil
}

// Create implements vfs.FS.
func (fs walSpaceFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return fs.wrap(name, f, err)
}

// ReuseForWrite implements vfs.FS.
func (fs walSpaceFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(newname, f, err)
}

type walSpaceFile struct {
	vfs.File
	prealloc func(n int64) bool
	ring     *syncRing
}

// SyncData is the log's sync (pebble's syncing file calls it for Sync as well): through the
// store's ring where it has one (see syncRing).
func (f walSpaceFile) SyncData() error {
	if f.ring == nil {
		return f.File.SyncData()
	}
	return f.ring.datasync(f.File.Fd())
}

// Preallocate reserves the space only when the policy allows it; a log written without a
// reservation takes its space as it is written.
func (f walSpaceFile) Preallocate(off, n int64) error {
	if !f.prealloc(n) {
		return nil
	}
	return f.File.Preallocate(off, n)
}

// reclaimer runs the store's reclaims below the floor, one at a time.
type reclaimer struct {
	running atomic.Bool
	trims   atomic.Uint64 // Trims written
	seen    atomic.Uint64 // trims when the latest reclaim started
}

// maybeReclaim starts a reclaim, in the background, when the journal has been trimmed since
// the latest one and none is under way. spaceErr calls it below the floor.
func (s *Store) maybeReclaim() {
	r := &s.reclaim
	if r.trims.Load() == r.seen.Load() || !r.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.running.Store(false)
		r.seen.Store(r.trims.Load())
		s.reclaimSpace()
		if s.opts.onReclaimed != nil {
			s.opts.onReclaimed()
		}
	}()
}

// reclaimSpace flushes pebble's memtable, so the logs holding what the journal no longer has
// become obsolete and are deleted (or recycled, on a large volume), and compacts each topic's
// trimmed journal, so the table files holding it are rewritten without it.
func (s *Store) reclaimSpace() {
	c, err := s.enter("", "")
	if err != nil {
		return
	}
	defer c.done()
	g := c.g
	if g.isFailed() || s.opts.ReadOnly {
		return
	}
	before, _ := s.opts.freeBytes(s.dir)
	flushed := make(chan error, 1)
	go func() { flushed <- g.db.Flush() }() // ends with the flush, or with the instance once given up
	select {
	case err := <-flushed:
		if err != nil {
			s.log.Warn("disk store: below the free-space floor; flushing the memtable to free its write-ahead log failed", "dir", s.dir, "err", err)
			return
		}
	case <-g.failed:
		return
	case <-s.stop:
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-g.failed:
			cancel()
		case <-ctx.Done():
		}
	}()
	s.mu.RLock()
	topics := slices.Collect(maps.Values(s.topics))
	s.mu.RUnlock()
	for _, t := range topics {
		_, floor := t.readBounds()
		if floor == 0 {
			continue
		}
		lo, _ := idRange(prefixJournal, t.id)
		// A block's key is its last seq: every block wholly trimmed is below floor+1.
		if err := g.db.Compact(ctx, lo, seqKey(prefixJournal, t.id, floor+1), false); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("disk store: below the free-space floor; compacting the trimmed journal failed", "dir", s.dir, "err", err)
			}
			return
		}
	}
	after, _ := s.opts.freeBytes(s.dir)
	s.log.Info("disk store: below the free-space floor; flushed the memtable and compacted the trimmed journal",
		"dir", s.dir, "freeBefore", formatBytes(before), "freeAfter", formatBytes(after), "floor", formatBytes(s.opts.MinFreeBytes))
}

// walHeld returns how many bytes of disk the write-ahead logs (*.log) in dir hold, and how
// many there are.
func walHeld(fs vfs.FS, dir string) (held uint64, logs int) {
	names, err := fs.List(dir)
	if err != nil {
		return 0, 0
	}
	for _, name := range names {
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		path := fs.PathJoin(dir, name)
		n, ok := allocatedBytes(path)
		if !ok {
			st, err := fs.Stat(path)
			if err != nil {
				continue
			}
			n = uint64(st.Size())
		}
		held += n
		logs++
	}
	return held, logs
}

// fullDiskOpenNote says, for an Open that failed on a full disk, how much of it the store's
// own write-ahead logs hold and what to free.
func fullDiskOpenNote(fs vfs.FS, dir string, minFree uint64) string {
	held, logs := walHeld(fs, dir)
	return fmt.Sprintf("%d write-ahead log files (*.log) in %s hold %s of the volume (space pebble reserved ahead of writes, and old logs kept for reuse, freed once the store has opened); free at least %s on the volume (delete other files, grow it) and start egrid again",
		logs, dir, formatBytes(held), formatBytes(max(minFree, recoverFloorMin)))
}
