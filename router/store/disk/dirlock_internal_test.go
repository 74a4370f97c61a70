package disk

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
)

// reopenFailFS fails a reopening of the store: while refuseCreates is set it refuses to
// create any file (a directory whose permissions were taken away: pebble cannot open), and
// while refuseSyncs is set it refuses to sync a write-ahead log (pebble opens, but the copy of
// the subscription state into the new instance cannot be written).
type reopenFailFS struct {
	vfs.FS
	refuseCreates, refuseSyncs atomic.Bool
}

func (fs *reopenFailFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.refuseCreates.Load() {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EACCES}
	}
	f, err := fs.FS.Create(name, category)
	return fs.wrap(name, f, err)
}

func (fs *reopenFailFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.refuseCreates.Load() {
		return nil, &os.PathError{Op: "open", Path: newname, Err: syscall.EACCES}
	}
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(newname, f, err)
}

func (fs *reopenFailFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &syncFailFile{File: f, fs: fs}, nil
}

type syncFailFile struct {
	vfs.File
	fs *reopenFailFS
}

func (f *syncFailFile) refused() error {
	if f.fs.refuseSyncs.Load() {
		return &os.PathError{Op: "sync", Path: "log", Err: syscall.EIO}
	}
	return nil
}

func (f *syncFailFile) Sync() error {
	if err := f.refused(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *syncFailFile) SyncData() error {
	if err := f.refused(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *syncFailFile) SyncTo(length int64) (bool, error) {
	if err := f.refused(); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}

// The store's directory stays locked from Open to Close, also while the store is failed and
// its reopening fails (pebble cannot open the directory, or the new instance fails before the
// switch): the old instance still serves reads and keeps state in memory, so another store on
// the directory (a second egrid, egrid store check) must be refused as it is while the store
// is healthy. The store released its lock before each reopening and left the directory
// unlocked through the back-off when the reopening failed: a second store opened it, and two
// processes wrote one store. Once the reopening succeeds the directory is still locked, and
// Close releases it.
func TestDirectoryStaysLockedWhileReopeningFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse func(fs *reopenFailFS) *atomic.Bool
	}{
		{"pebble cannot open", func(fs *reopenFailFS) *atomic.Bool { return &fs.refuseCreates }},
		{"the new instance fails before the switch", func(fs *reopenFailFS) *atomic.Bool { return &fs.refuseSyncs }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			fs := &reopenFailFS{FS: vfs.Default}
			s, err := Open(dir, Options{fs: fs, freeBytes: func(string) (uint64, error) { return 1 << 40, nil }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if err := s.PutTopic(ctx, "orders", nil); err != nil {
				t.Fatal(err)
			}

			// A second store on the directory is refused while the first is healthy; this
			// is the refusal it must get at every later point.
			_, healthyErr := Open(dir, Options{})
			if healthyErr == nil {
				t.Fatal("a second Open of a healthy store's directory succeeded")
			}
			secondOpen := func(when string) {
				t.Helper()
				second, err := Open(dir, Options{})
				if err == nil {
					_ = second.Close()
					t.Fatalf("a second Open %s succeeded: two stores on one directory", when)
				}
				if err.Error() != healthyErr.Error() {
					t.Errorf("a second Open %s: err = %v; want the refusal a healthy store's directory gives: %v", when, err, healthyErr)
				}
			}

			// The store fails; the recovery loop is not woken (no onFail), the test runs
			// its attempts.
			old := s.gen
			old.fail(errors.New("injected write failure"), func(err error) { s.health.setFailed(err) })
			secondOpen("of a failed store")

			refuse := tc.refuse(fs)
			refuse.Store(true)
			if done, attempted := s.tryRecover(); done || !attempted {
				t.Fatalf("a reopening while the file system refuses: done %v, attempted %v; want a failed attempt", done, attempted)
			}
			s.mu.RLock()
			still := s.gen == old
			s.mu.RUnlock()
			if !still {
				t.Fatal("the store switched to an instance that failed to open")
			}
			secondOpen("while the store is failed and its reopening failed")

			refuse.Store(false)
			if done, _ := s.tryRecover(); !done {
				t.Fatalf("the reopening once the file system takes writes again did not finish; health %+v", s.Health())
			}
			if h := s.Health(); h.State != store.Healthy {
				t.Fatalf("health after the reopening = %+v, want healthy", h)
			}
			secondOpen("after the store reopened itself")
			if err := s.PutTopic(ctx, "payments", nil); err != nil {
				t.Fatalf("PutTopic after the reopening: %v", err)
			}

			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			r, err := Open(dir, Options{})
			if err != nil {
				t.Fatalf("Open once the store is closed: %v", err)
			}
			defer r.Close()
			if defs, err := r.Topics(ctx); err != nil || len(defs) != 2 {
				t.Fatalf("topics after reopening = %+v, %v; want orders and payments", defs, err)
			}
		})
	}
}

// A reopening that fails while pebble is still opening (a flush of the replayed log fails in
// the background, and pebble's Open waits for the flush, which it tries again at once) parks
// that flush in its table file's creation instead of refusing it: refused, it was tried again
// for good, thousands of times a second, a core busy and an ERROR logged each time, one more
// instance with each failed reopening. The instance is not retired (a retired one's creations
// fail at once) while its Open has not returned.
func TestOpenThatFailedUnderWayWaitsInsteadOfSpinning(t *testing.T) {
	dir := t.TempDir()
	fs := &reopenFailFS{FS: vfs.Default}
	parked := make(chan (<-chan struct{}), 1)
	s, err := Open(dir, Options{fs: fs, freeBytes: func(string) (uint64, error) { return 1 << 40, nil },
		onParkedCreate: func(retired <-chan struct{}) {
			select {
			case parked <- retired:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.PutTopic(t.Context(), "orders", nil); err != nil {
		t.Fatal(err)
	}
	s.gen.fail(errors.New("injected write failure"), func(err error) { s.health.setFailed(err) })
	fs.refuseCreates.Store(true)
	if done, attempted := s.tryRecover(); done || !attempted {
		t.Fatalf("a reopening while the file system refuses: done %v, attempted %v; want a failed attempt", done, attempted)
	}
	// Bounded, so that a flush that never parks fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	select {
	case retired := <-parked:
		select {
		case <-retired:
			t.Fatal("the failed open's instance was retired while its Open had not returned: its flushes fail at once and are tried again for good")
		default:
		}
	case <-ctx.Done():
		t.Fatal("no flush of the failed open waited in its table file's creation")
	}
}
