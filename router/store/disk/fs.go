package disk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// errFenced is what a fenced file system returns to every write: the pebble instance using it
// was given up after a failed write and another one owns the directory now.
var errFenced = errors.New("disk store: this pebble instance was replaced after a write failure")

// fenceFS is the file system of one pebble instance (one generation of a [Store]). It does two
// things pebble's own file systems do not:
//
//   - fence: once a generation has failed and the store reopens the directory, the old
//     instance may still have goroutines inside pebble (a commit stuck behind the failed one,
//     a flush parked in the logger's Fatalf). Fencing makes every write, sync, create, rename
//     and remove of the old instance fail, so it can never touch the files the new instance
//     owns.
//   - share the directory lock: the lock belongs to the [Store], not to one instance (see
//     dirLock). Every instance of a store takes the one lock the store holds, and closing it
//     leaves it held, so the directory is never unlocked between Open and Close, also while
//     a failed instance is replaced or its replacement fails to open.
//
// It also makes every file it creates private (0600): store files hold topic keys and
// delivery secrets.
type fenceFS struct {
	vfs.FS
	fenced atomic.Bool
	lock   *dirLock // the store's directory lock

	// retired is closed once the instance is given up for good and is to be closed
	// (Store.abandon; an open that failed, once pebble's Open returns): until then a fenced
	// instance's flushes and compactions wait in Create (see Create).
	retired    chan struct{}
	retireOnce sync.Once
	onParked   func(retired <-chan struct{}) // tests: called as a creation starts waiting
}

func newFenceFS(inner vfs.FS, lock *dirLock) *fenceFS {
	return &fenceFS{FS: inner, lock: lock, retired: make(chan struct{})}
}

// fence makes every later write through fs fail with errFenced.
func (fs *fenceFS) fence() { fs.fenced.Store(true) }

// retire lets the table file creations waiting in a fenced fs fail, so the instance can be
// closed. Later calls do nothing.
func (fs *fenceFS) retire() { fs.retireOnce.Do(func() { close(fs.retired) }) }

func (fs *fenceFS) check() error {
	if fs.fenced.Load() {
		return errFenced
	}
	return nil
}

func (fs *fenceFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	private(f)
	return &fenceFile{File: f, fs: fs}, nil
}

// private sets a newly created file's mode to 0600 when it is an OS file (an in-memory file
// has no descriptor).
func private(f vfs.File) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		_ = fchmod(fd, 0o600)
	}
}

// Create implements vfs.FS. A fenced instance's table and blob files (what its flushes and
// compactions write) are refused only once it is retired: pebble tries a failed flush again
// at once, for as long as its memtable waits, so refusing each try at once would keep a core
// busy (thousands of tries a second) for as long as the instance serves reads. The try waits
// here instead, holding pebble's flush slot, without pebble's mutex (flushes and compactions
// write their files without it).
func (fs *fenceFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.check(); err != nil {
		if strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob") {
			if fs.onParked != nil {
				fs.onParked(fs.retired)
			}
			<-fs.retired
		}
		return nil, err
	}
	return fs.wrap(fs.FS.Create(name, category))
}

// OpenReadWrite implements vfs.FS.
func (fs *fenceFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	return fs.wrap(fs.FS.OpenReadWrite(name, category, opts...))
}

// ReuseForWrite implements vfs.FS.
func (fs *fenceFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, category))
}

// OpenDir implements vfs.FS: a directory is synced, so the handle is fenced too.
func (fs *fenceFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &fenceFile{File: f, fs: fs}, nil
}

// Link implements vfs.FS.
func (fs *fenceFS) Link(oldname, newname string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.Link(oldname, newname)
}

// Remove implements vfs.FS.
func (fs *fenceFS) Remove(name string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.Remove(name)
}

// RemoveAll implements vfs.FS.
func (fs *fenceFS) RemoveAll(name string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.RemoveAll(name)
}

// Rename implements vfs.FS.
func (fs *fenceFS) Rename(oldname, newname string) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.Rename(oldname, newname)
}

// MkdirAll implements vfs.FS. A directory the store creates is private (0700).
func (fs *fenceFS) MkdirAll(dir string, _ os.FileMode) error {
	if err := fs.check(); err != nil {
		return err
	}
	return fs.FS.MkdirAll(dir, 0o700)
}

// Lock implements vfs.FS: the instance shares the store's directory lock, taking it if the
// store does not hold it yet. The handle pebble gets leaves the lock held when closed.
func (fs *fenceFS) Lock(name string) (io.Closer, error) {
	if err := fs.check(); err != nil {
		return nil, err
	}
	if err := fs.lock.acquire(fs.FS, name); err != nil {
		return nil, err
	}
	return sharedLock{}, nil
}

// Unwrap implements vfs.FS.
func (fs *fenceFS) Unwrap() vfs.FS { return fs.FS }

// sharedLock is the directory lock as a pebble instance sees it: closing it (DB.Close)
// leaves the lock to the store.
type sharedLock struct{}

func (sharedLock) Close() error { return nil }

// dirLock is a [Store]'s lock on its directory, held from Open to Close: pebble's own lock
// file (LOCK, locked as pebble locks it), taken by the store's first pebble instance and kept
// by the store for every later one. Pebble would release it when an instance closes, and a
// failed instance is replaced by opening a new one: the directory was left unlocked between
// the two — through the back-off after a reopening that failed, while the failed instance
// still served reads and kept subscription state in memory — and a second egrid (or egrid
// store check) could open it, two processes writing one store. Fencing (fenceFS) keeps the
// instances of one store apart; the lock keeps other stores out.
type dirLock struct {
	mu     sync.Mutex
	name   string
	closer io.Closer // nil while not held
	// readOnly: the store writes nothing (egrid store check). On a read-only file system,
	// where the lock file cannot be created or opened for writing, it goes without the
	// lock: no process can write the store there either.
	readOnly bool
}

// lockFile is the name of pebble's lock file in the store's directory.
const lockFile = "LOCK"

// acquire takes the lock file name in fs unless l holds it already.
func (l *dirLock) acquire(fs vfs.FS, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closer != nil {
		if name != l.name {
			return fmt.Errorf("disk store: locking %s: the store holds %s", name, l.name)
		}
		return nil
	}
	c, err := fs.Lock(name)
	if err != nil && l.readOnly && readOnlyFS(err) {
		c, err = sharedLock{}, nil
	}
	// Pebble answers "lock held by current process" itself when another Store of this
	// process holds the directory.
	if lockHeld(err) || (err != nil && strings.Contains(err.Error(), "lock held by current process")) {
		return fmt.Errorf("%w (%s): %w", ErrLocked, name, err)
	}
	if err != nil {
		return err
	}
	if w, ok := fs.(walSpaceFS); ok && w.FS == vfs.Default || fs == vfs.Default {
		_ = os.Chmod(name, 0o600) // pebble's lock file is created 0644
	}
	l.name, l.closer = name, c
	return nil
}

// readOnlyFS reports whether err says the file system is mounted read-only.
func readOnlyFS(err error) bool { return errors.Is(err, syscall.EROFS) }

// release gives the lock up if l holds it. Later calls do nothing.
func (l *dirLock) release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closer == nil {
		return nil
	}
	err := l.closer.Close()
	l.closer = nil
	return err
}

// fenceFile fails every write and sync once its file system is fenced.
type fenceFile struct {
	vfs.File
	fs *fenceFS
}

func (f *fenceFile) Write(p []byte) (int, error) {
	if err := f.fs.check(); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *fenceFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check(); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *fenceFile) Preallocate(off, n int64) error {
	if err := f.fs.check(); err != nil {
		return err
	}
	return f.File.Preallocate(off, n)
}

func (f *fenceFile) Sync() error {
	if err := f.fs.check(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *fenceFile) SyncData() error {
	if err := f.fs.check(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *fenceFile) SyncTo(length int64) (bool, error) {
	if err := f.fs.check(); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}
