package disk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
)

// ringOrSkip returns a sync ring, or skips where the kernel refuses io_uring (a seccomp
// profile, kernel.io_uring_disabled): the store then syncs with fdatasync, which the rest of
// the package's tests cover. CI's machines give one, so there it fails instead.
func ringOrSkip(t *testing.T) *syncRing {
	t.Helper()
	r, err := newSyncRing()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no io_uring on this CI machine: %v", err)
		}
		t.Skipf("the kernel gives no io_uring here (%v); the store syncs with fdatasync", err)
	}
	t.Cleanup(r.close)
	return r
}

func TestSyncRingSyncsAFileAndReportsTheKernelsErrors(t *testing.T) {
	r := ringOrSkip(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := f.Write([]byte("entry\n")); err != nil {
			t.Fatal(err)
		}
		if err := r.datasync(f.Fd()); err != nil {
			t.Fatalf("sync %d: %v", i, err)
		}
	}
	if got := r.syncs.Load(); got != 3 {
		t.Fatalf("the ring completed %d syncs, want 3", got)
	}
	// fdatasync of a pipe is EINVAL: the kernel's answer must come back, not nil.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	if err := r.datasync(pw.Fd()); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("sync of a pipe: %v, want EINVAL", err)
	}
	// A closed descriptor: EBADF, and the ring still serves the next sync.
	closed := f.Fd()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.datasync(closed); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("sync of a closed file: %v, want EBADF", err)
	}
	g, err := os.Create(filepath.Join(t.TempDir(), "log2"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := r.datasync(g.Fd()); err != nil {
		t.Fatalf("sync after an error: %v", err)
	}
	// Closed, the ring syncs with fdatasync.
	r.close()
	before := r.syncs.Load()
	if err := r.datasync(g.Fd()); err != nil {
		t.Fatalf("sync after close: %v", err)
	}
	if r.syncs.Load() != before {
		t.Fatal("a closed ring took a sync")
	}
}

func TestStoreSyncsItsLogThroughTheRing(t *testing.T) {
	ringOrSkip(t) // the kernel gives one
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ring == nil {
		t.Fatal("the store on the real file system has no sync ring")
	}
	ctx := context.Background()
	if err := s.PutTopic(ctx, "t", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	before := s.ring.syncs.Load()
	if _, err := s.Append(ctx, "t", time.Unix(0, 0).UTC(), []*schemas.Event{{ID: "e1", Raw: []byte(`{"id":"e1"}`)}}); err != nil {
		t.Fatal(err)
	}
	if s.ring.syncs.Load() == before {
		t.Fatal("a synced append did not sync through the ring")
	}
}

func TestFdatasyncLogSetsUpNoRing(t *testing.T) {
	s, err := Open(t.TempDir(), Options{FdatasyncLog: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ring != nil {
		t.Fatal("a store opened with FdatasyncLog set up a sync ring")
	}
}

// An Open that fails gives its ring back: an embedder retrying Open on a directory another
// store holds lost two descriptors and a ring with every try.
func TestFailedOpenClosesItsRing(t *testing.T) {
	ringOrSkip(t)
	dir := t.TempDir()
	held, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	before := openRings(t)
	for range 5 {
		if s, err := Open(dir, Options{}); err == nil {
			s.Close()
			t.Fatal("a second Open of a held directory succeeded")
		}
	}
	if after := openRings(t); after != before {
		t.Fatalf("io_uring descriptors open: %d before five failed Opens, %d after", before, after)
	}
}

// openRings counts the process's open io_uring descriptors.
func openRings(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == "anon_inode:[io_uring]" {
			n++
		}
	}
	return n
}
