package disk

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
)

// generation is one pebble instance on the store's directory. The store opens a new one when
// the current one has failed a write and the disk has room again (recover.go).
//
// Once failed, a generation takes no more writes; its reads go on (pebble keeps serving them
// from its memtables and table files), so stored events are still delivered. Goroutines stuck
// inside the failed instance (commits queued behind the failed log write, a flush parked in
// the logger's Fatalf) are released from the store's point of view: every caller waiting on
// them returns with the failure.
type generation struct {
	db *pebble.DB
	fs *fenceFS

	failed  chan struct{} // closed at the first failure
	once    sync.Once
	failure atomic.Pointer[error] // set before failed is closed

	// users counts the calls using db; added to under Store.mu (shared), so that once the
	// store has switched to a new generation under Store.mu (exclusive) nobody adds any more
	// and the old instance can be closed when users is done.
	users sync.WaitGroup

	// aroundBlocks counts the journal blocks read from table files around a damaged one
	// (journalAround), for tests: a read takes the few it needs, not the journal's rest.
	aroundBlocks atomic.Uint64

	// appends keeps the journal appends' batches between commits (see appendBatch).
	appends sync.Pool
}

// appendBatch returns a batch for a journal append of size bytes: one an earlier append
// committed and handed back (putAppendBatch) when it is large enough, else a new one whose
// buffer is size rounded up to a power of two (at least minAppendBatch).
//
// Appends kept their batches in pebble's own pool, which every batch shares: the buffer was
// dropped and allocated again whenever an append needed a few bytes more than the one before
// (a committer's batch is every publish waiting for it, a size that changes with each), or
// went to a small write (a delivery history, a cursor) that drops buffers over 1 MB when it is
// done. A new buffer of megabytes is memory the Go runtime had handed back to the system,
// touched a page at a time: 49 000 of the 128 000 page faults of an `egrid bench --scenario
// publish100` run (`perf record -e page-faults`, 2026-11-27), in every round, each on the
// committer that the publishes wait for.
func (g *generation) appendBatch(size int) *pebble.Batch {
	if b, ok := g.appends.Get().(*pebble.Batch); ok {
		if cap(b.Repr()) >= size {
			return b
		}
		_ = b.Close()
	}
	n := minAppendBatch
	for n < size {
		n *= 2
	}
	return g.db.NewBatchWithSize(n, pebble.WithMaxRetainedSizeBytes(maxRetainedAppend))
}

// putAppendBatch hands b, committed, back for the next append. Reset keeps its buffer up to
// maxRetainedAppend and drops any the commit pipeline still holds.
func (g *generation) putAppendBatch(b *pebble.Batch) {
	b.Reset()
	g.appends.Put(b)
}

// minAppendBatch is the smallest buffer an append's batch is given: 64 KiB.
const minAppendBatch = 64 << 10

// isFailed reports whether g has failed.
//
// It reads the recorded failure, not g.failed: fail's callback wakes the recovery loop before
// g.failed is closed, and a loop that then found g healthy went back to sleep, leaving the
// store failed for good.
func (g *generation) isFailed() bool { return g.failure.Load() != nil }

// err returns g's failure, nil while it has not failed.
func (g *generation) err() error {
	if f := g.failure.Load(); f != nil {
		return *f
	}
	return nil
}

// fail records g's first failure, calls first with it (only at the first call), then closes
// g.failed: whoever waits on g.failed sees what first did. A failure on a full disk
// (diskFull) wraps [store.ErrDiskFull] as well, so every write refused with it is answered
// 507 rather than 503.
func (g *generation) fail(cause error, first func(error)) {
	g.once.Do(func() {
		err := fmt.Errorf("%w: %w", ErrFailed, cause)
		if diskFull(cause) {
			err = fmt.Errorf("%w: %w: %w", ErrFailed, store.ErrDiskFull, cause)
		}
		g.failure.Store(&err)
		if first != nil {
			first(err)
		}
		close(g.failed)
	})
}

// openGeneration opens pebble on dir through a fenced file system sharing lock, the store's
// directory lock (taken if the store does not hold it yet; an instance that fails to open
// leaves it held). Pebble runs in its own goroutine: a failure while opening (the disk still
// full) may park it in the logger's Fatalf for good, and the caller must not wait for that.
func openGeneration(dir string, inner vfs.FS, lock *dirLock, popts pebble.Options, log *slog.Logger, onFail func(*generation, error), onParked func(retired <-chan struct{})) (*generation, error) {
	g := &generation{fs: newFenceFS(inner, lock), failed: make(chan struct{})}
	g.fs.onParked = onParked
	popts.FS = g.fs
	popts.Logger = pebbleLogger{log: log, fatal: func(err error) { onFail(g, err) }}
	var el pebble.EventListener
	if popts.EventListener != nil {
		el = *popts.EventListener
	}
	el.FlushEnd = func(info pebble.FlushInfo) {
		if flushFailed(info) {
			onFail(g, fmt.Errorf("flushing the memtable to a table file: %w", info.Err))
		}
	}
	gate := newCompactionGate(log, dir, popts.L0StopWritesThreshold, func(err error) { onFail(g, err) })
	popts.Experimental.CompactionScheduler = gate
	compactionEnd, stallBegin, stallEnd, corruption := el.CompactionEnd, el.WriteStallBegin, el.WriteStallEnd, el.DataCorruption
	el.DataCorruption = func(info pebble.DataCorruptionInfo) {
		if corruption != nil {
			corruption(info)
		}
		gate.dataCorruption(info)
	}
	el.CompactionEnd = func(info pebble.CompactionInfo) {
		if compactionEnd != nil {
			compactionEnd(info)
		}
		gate.compactionEnd(info)
	}
	el.WriteStallBegin = func(info pebble.WriteStallBeginInfo) {
		if stallBegin != nil {
			stallBegin(info)
		}
		gate.writeStallBegin(info)
	}
	el.WriteStallEnd = func() {
		if stallEnd != nil {
			stallEnd()
		}
		gate.writeStallEnd()
	}
	popts.EventListener = &el
	type result struct {
		db  *pebble.DB
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				err := panicError(r)
				onFail(g, err)
				done <- result{err: err}
			}
		}()
		db, err := pebble.Open(dir, &popts)
		done <- result{db, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			g.fs.fence()
			g.fs.retire()
			return nil, r.err
		}
		g.db = r.db
		gate.opened(r.db)
		return g, nil
	case <-g.failed:
		// Pebble's Open may still be under way: a flush of the replayed log failed and
		// failed g, and Open waits for the flush, which pebble tries again at once for as
		// long as it fails. The instance's file system is fenced but not retired, so the
		// next try waits in its table file's creation (fenceFS.Create) and the open with
		// it, for good: a retired one refused each try at once, a core busy and an ERROR
		// logged thousands of times a second, one more instance with each failed reopening.
		// What such an open holds (the replayed log's memtables) is kept until the process
		// exits, as with an instance stuck in a failed commit. An open that returns after
		// all is closed.
		g.fs.fence()
		go func() {
			if r := <-done; r.db != nil {
				g.fs.retire()
				defer func() { _ = recover() }() // a fenced instance may panic on its way out
				_ = r.db.Close()
			}
		}()
		return nil, g.err()
	}
}

// flushFailed reports whether a flush ended in an error. Pebble only reports a failed flush
// (a table file that cannot be created or written: a full disk, an I/O error) and tries it
// again, while the write-ahead log, often a recycled file whose blocks are allocated already,
// goes on taking commits; the memtables fill until pebble stalls every commit, for good, and
// each publish and state write waits without an answer. A failed flush therefore fails the
// generation like a failed log write: writes are refused (503) or kept in memory, and the
// store reopens itself once the disk has room. A flush that had nothing to write is reported
// with pebble's unexported "empty table" error, which is no failure.
func flushFailed(info pebble.FlushInfo) bool {
	return info.Err != nil && info.Err.Error() != "pebble: empty table"
}

// commit commits b in g and takes ownership of b (it closes it). Pebble panics in the
// committing goroutine when a log write fails: through Logger.Fatalf (a failed sync) or
// directly with the writer's error (a commit that finds the log writer already failed, under
// concurrent commits), and it leaves its commit pipeline locked for good in the second case,
// so commits queued behind it never return. So the commit runs in a goroutine of its own,
// every panic there fails the generation, and the caller waits for either the commit or the
// generation's failure: no caller ever hangs on a failed instance, and no write failure
// crashes the process.
func (g *generation) commit(b *pebble.Batch, opts *pebble.WriteOptions, onFail func(*generation, error)) error {
	return g.commitThen(b, opts, onFail, nil)
}

// commitThen is commit that hands b to reuse, when it is not nil and the commit succeeded,
// instead of closing it.
func (g *generation) commitThen(b *pebble.Batch, opts *pebble.WriteOptions, onFail func(*generation, error), reuse func(*pebble.Batch)) error {
	if g.isFailed() {
		_ = b.Close()
		return g.err()
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				onFail(g, panicError(r))
				done <- g.err()
			}
		}()
		err := b.Commit(opts)
		if err != nil {
			onFail(g, err)
			err = g.err()
		}
		if err == nil && reuse != nil {
			reuse(b)
		} else {
			_ = b.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-g.failed:
		select {
		case err := <-done: // finished as well: its own result counts
			return err
		default:
			return g.err()
		}
	}
}

// panicError turns a recovered panic value into an error, keeping a *fatalError or an error
// as it is.
func panicError(r any) error {
	switch v := r.(type) {
	case *fatalError:
		return v
	case error:
		return fmt.Errorf("pebble panicked: %w\n%s", v, debug.Stack())
	default:
		return fmt.Errorf("pebble panicked: %v\n%s", v, debug.Stack())
	}
}

// isFailure reports whether err is a generation's failure (as opposed to a bad argument or a
// closed store).
func isFailure(err error) bool { return errors.Is(err, ErrFailed) }
