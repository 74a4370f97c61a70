package disk

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/schemas"
)

// tableFailFS refuses to create table files while failing is set, as a full disk refuses a
// flush while the write-ahead log, a recycled file, still takes writes. Each refusal is sent
// on refused (dropped when nobody has taken the previous one).
type tableFailFS struct {
	vfs.FS
	failing atomic.Bool
	refused chan struct{}
}

func (fs *tableFailFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.failing.Load() && strings.HasSuffix(name, ".sst") {
		select {
		case fs.refused <- struct{}{}:
		default:
		}
		return nil, syscall.ENOSPC
	}
	return fs.FS.Create(name, category)
}

// A flush that fails fails the store as a failed log write does: pebble would try it again
// and again while the log takes commits, until its memtables stall every commit for good
// (publishes and state writes waiting without an answer). Appends are refused instead, and
// once table files can be written again the store reopens itself with every acknowledged
// event.
func TestFailedFlushFailsTheStore(t *testing.T) {
	ctx := t.Context()
	fs := &tableFailFS{FS: vfs.NewMem(), refused: make(chan struct{}, 1)}
	s, err := Open("db", Options{fs: fs, RecoverInterval: time.Millisecond, freeBytes: func(string) (uint64, error) { return 1 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "acked", Raw: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	_, failed := s.health.watch()
	fs.failing.Store(true)
	if _, err := s.gen.db.AsyncFlush(); err != nil {
		t.Fatal(err)
	}
	<-fs.refused // the flush failed once
	select {
	case <-fs.refused:
		// The store fails before it kicks its recovery, whose reopening flushes the
		// replayed log and is refused in turn: a second refusal is the old instance's retry
		// only if the store is not failed by then (a failed instance's retries wait, fenced,
		// without reaching fs).
		select {
		case <-failed:
		default:
			fs.failing.Store(false) // lets the deferred Close flush
			t.Fatal("the flush failed and was tried again while the store stayed healthy")
		}
	case <-failed:
	}
	if _, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "refused", Raw: []byte(`{}`)}}); !errors.Is(err, ErrFailed) {
		t.Fatalf("Append after the failed flush = %v; want ErrFailed", err)
	}

	fs.failing.Store(false)
	if err := s.WaitFailed(ctx, false); err != nil {
		t.Fatal(err)
	}
	got, err := s.Read(ctx, "orders", 1, 10)
	if err != nil || len(got) != 1 || got[0].Event.ID != "acked" {
		t.Fatalf("Read after reopening = %v, %v; want the acknowledged event", got, err)
	}
	if _, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "after", Raw: []byte(`{}`)}}); err != nil {
		t.Fatalf("Append after reopening: %v", err)
	}
}

// Close flushes the memtable; when that flush fails, Close gives the instance up and returns
// the failure instead of waiting for pebble's retries for good.
func TestCloseReturnsWhenItsFlushFails(t *testing.T) {
	ctx := t.Context()
	fs := &tableFailFS{FS: vfs.NewMem(), refused: make(chan struct{}, 1)}
	s, err := Open("db", Options{fs: fs, freeBytes: func(string) (uint64, error) { return 1 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "acked", Raw: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	fs.failing.Store(true)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	<-fs.refused // Close's flush failed once
	select {
	case <-fs.refused:
		fs.failing.Store(false) // lets Close's flush end
		t.Fatal("Close's flush failed and was tried again while Close waited")
	case err := <-closed:
		if !errors.Is(err, ErrFailed) {
			t.Fatalf("Close = %v; want the flush's failure (ErrFailed)", err)
		}
	}

	// Nothing acknowledged is lost: the log has it.
	fs.failing.Store(false)
	r, err := Open("db", Options{fs: fs, freeBytes: func(string) (uint64, error) { return 1 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := r.Read(ctx, "orders", 1, 10); err != nil || len(got) != 1 {
		t.Fatalf("Read after reopening = %v, %v; want the acknowledged event", got, err)
	}
}

// A fenced instance's flushes and compactions wait when they create their table files, until
// the instance is retired: pebble tries a failed flush again at once, and each try refused at
// once kept a core busy for as long as the failed instance served reads. Other files are
// refused at once.
func TestFencedTableCreatesWaitForRetirement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := newFenceFS(vfs.NewMem(), new(dirLock))
		fs.fence()
		done := make(chan error, 1)
		go func() {
			_, err := fs.Create("000007.sst", vfs.WriteCategoryUnspecified)
			done <- err
		}()
		if _, err := fs.Create("MANIFEST-000008", vfs.WriteCategoryUnspecified); !errors.Is(err, errFenced) {
			t.Fatalf("fenced Create of a MANIFEST = %v; want errFenced at once", err)
		}
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("fenced Create of a table file returned %v before the instance was retired", err)
		default:
		}
		fs.retire()
		synctest.Wait()
		select {
		case err := <-done:
			if !errors.Is(err, errFenced) {
				t.Fatalf("fenced Create of a table file after retire = %v; want errFenced", err)
			}
		default:
			t.Fatal("fenced Create of a table file still waits after retire")
		}
	})
}

// Flush writes the memtable out and leaves an empty one: what was appended is read back from
// table files, and a store whose flush fails answers with the failure instead of waiting for
// pebble's retries.
func TestFlushEmptiesTheMemtable(t *testing.T) {
	ctx := t.Context()
	fs := &tableFailFS{FS: vfs.NewMem(), refused: make(chan struct{}, 1)}
	s, err := Open("db", Options{fs: fs, freeBytes: func(string) (uint64, error) { return 1 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: string(rune('a' + i%26)), Raw: []byte(strings.Repeat("x", 1000))}}); err != nil {
			t.Fatal(err)
		}
	}
	before := s.gen.db.Metrics()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	after := s.gen.db.Metrics()
	if after.Flush.Count != before.Flush.Count+1 || after.Levels[0].TablesCount == 0 {
		t.Errorf("flushes %d -> %d, level-0 tables %d; want one flush writing a table", before.Flush.Count, after.Flush.Count, after.Levels[0].TablesCount)
	}
	if got, err := s.Read(ctx, "orders", 1, 1000); err != nil || len(got) != 100 {
		t.Fatalf("Read after Flush: %d entries, %v; want 100", len(got), err)
	}

	if _, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "z", Raw: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	fs.failing.Store(true)
	if err := s.Flush(ctx); !errors.Is(err, ErrFailed) {
		t.Errorf("Flush on a disk refusing table files = %v, want ErrFailed", err)
	}
	fs.failing.Store(false) // lets the deferred Close reopen and flush
}
