package disk_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

const rotatedEvents = 400

// flushHoldFS holds every table file's creation until release is closed: pebble's flushes
// wait, and the write-ahead logs they would make obsolete stay the ones replayed.
type flushHoldFS struct {
	vfs.FS
	release chan struct{}
}

func (f flushHoldFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") {
		<-f.release
	}
	return f.FS.Create(name, category)
}

// writeRotatedStore writes topic orders with subscription billing and rotatedEvents
// acknowledged events, one Append each, in dir, with a memtable small enough that pebble
// moves to a second write-ahead log on the way. With crash, it holds pebble's flushes and
// returns a copy of the directory taken while the store is open (both logs unflushed, as
// after kill -9 while the flush was under way); otherwise it closes the store and returns dir
// (the logs' contents in table files, the logs kept for reuse).
func writeRotatedStore(t *testing.T, dir string, crash bool) string {
	t.Helper()
	ctx := t.Context()
	hold := flushHoldFS{vfs.Default, make(chan struct{})}
	if !crash {
		close(hold.release)
	}
	s, err := disk.OpenFS(dir, disk.Options{MemTableSize: 1 << 20}, hold)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	for i := range rotatedEvents {
		if _, err := s.Append(ctx, "orders", publishTime, []*schemas.Event{testEvent(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	out := dir
	if crash {
		out = filepath.Join(t.TempDir(), "image")
		if err := os.CopyFS(out, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		close(hold.release)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// logsOf returns dir's write-ahead logs, oldest first.
func logsOf(t *testing.T, dir string) []string {
	t.Helper()
	logs := files(t, dir, "*.log")
	if len(logs) < 2 {
		t.Fatalf("logs %v; want at least two", logs)
	}
	return logs // zero-padded numbers: name order is number order
}

// checkProblems runs egrid store check's Check on dir.
func checkProblems(t *testing.T, dir string) []error {
	t.Helper()
	r, err := disk.Check(t.Context(), dir, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Check: %v; want the damage among its problems", err)
	}
	return r.Problems
}

// lastSeq opens dir and returns the topic's newest seq.
func lastSeq(t *testing.T, dir string) uint64 {
	t.Helper()
	s, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	last, err := s.LastSeq(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// The oldest unflushed write-ahead log deleted (it held the topic's definition and the first
// events): pebble starts without it, serving an empty store, and before this egrid did too,
// with "no damage found". The commits' numbers show the gap: Open refuses, counts it, and
// store check reports it.
func TestDeletedOldestLogRefusesToStart(t *testing.T) {
	dir := writeRotatedStore(t, filepath.Join(t.TempDir(), "db"), true)
	logs := logsOf(t, dir)
	if err := os.Remove(logs[0]); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	_, _, counts, err := openCounting(dir, &out)
	if !errors.Is(err, disk.ErrCorrupt) || !strings.Contains(err.Error(), "are in no log") || !strings.Contains(err.Error(), "restore the directory from a backup") {
		t.Fatalf("Open without %s: err = %v; want disk.ErrCorrupt saying commits are missing and how to recover", filepath.Base(logs[0]), err)
	}
	t.Logf("Open: %v", err)
	if counts()[disk.DamageWAL] != 1 || !strings.Contains(out.String(), "level=ERROR") {
		t.Errorf("counts %v, logs:\n%s; want one ERROR and one wal count", counts(), out.String())
	}
	if p := checkProblems(t, dir); len(p) != 1 || !errors.Is(p[0], disk.ErrCorrupt) {
		t.Errorf("Check's problems = %v; want the missing commits", p)
	}
}

// The only write-ahead log of a store that never flushed deleted: pebble would open it as a
// new, empty store. The OPTIONS file pebble writes after creating the log at each open shows
// that a log was there.
func TestDeletedOnlyLogRefusesToStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	s, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(t.Context(), "orders", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(t.Context(), "orders", publishTime, []*schemas.Event{testEvent("1")}); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(t.TempDir(), "image")
	if err := os.CopyFS(image, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	dir = image
	logs := files(t, dir, "*.log")
	if len(logs) != 1 {
		t.Fatalf("logs %v; want one", logs)
	}
	if err := os.Remove(logs[0]); err != nil {
		t.Fatal(err)
	}
	_, err = disk.Open(dir, disk.Options{})
	if !errors.Is(err, disk.ErrCorrupt) || !strings.Contains(err.Error(), "no write-ahead log numbered") {
		t.Fatalf("Open without its log: err = %v; want disk.ErrCorrupt saying the log was deleted", err)
	}
	t.Logf("Open: %v", err)
	if p := checkProblems(t, dir); len(p) != 1 {
		t.Errorf("Check's problems = %v; want the deleted log", p)
	}
}

// The newest write-ahead log cut a few bytes short, in the middle of its last record: a crash
// cuts a log only at a 512-byte boundary, so Open refuses, giving the truncate that starts
// without the record; after it the store starts with every event before it. A log cut at a
// 512-byte boundary in the middle of a record (a crash's tear) starts as before.
func TestNewestLogCutMidRecordRefusesToStart(t *testing.T) {
	base := writeRotatedStore(t, filepath.Join(t.TempDir(), "db"), true)
	copyOf := func(t *testing.T) (string, string) {
		dir := filepath.Join(t.TempDir(), "db")
		if err := os.CopyFS(dir, os.DirFS(base)); err != nil {
			t.Fatal(err)
		}
		logs := logsOf(t, dir)
		return dir, logs[len(logs)-1]
	}
	fi, err := os.Stat(logsOf(t, base)[len(logsOf(t, base))-1])
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()

	t.Run("cut", func(t *testing.T) {
		dir, newest := copyOf(t)
		cutTo := size - 5
		if cutTo%512 == 0 {
			cutTo--
		}
		if err := os.Truncate(newest, cutTo); err != nil {
			t.Fatal(err)
		}
		var out syncBuffer
		_, _, counts, err := openCounting(dir, &out)
		if !errors.Is(err, disk.ErrCorrupt) || !strings.Contains(err.Error(), "truncate -s ") {
			t.Fatalf("Open with the newest log cut: err = %v; want disk.ErrCorrupt with the truncate that starts without the record", err)
		}
		t.Logf("Open: %v", err)
		if counts()[disk.DamageWAL] != 1 {
			t.Errorf("counts %v; want one wal", counts())
		}
		if p := checkProblems(t, dir); len(p) != 1 {
			t.Errorf("Check's problems = %v; want the cut log", p)
		}
		fix := err.Error()[strings.Index(err.Error(), "truncate -s ")+len("truncate -s "):]
		at, err := strconv.ParseInt(fix[:strings.IndexByte(fix, ' ')], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(newest, at); err != nil {
			t.Fatal(err)
		}
		if last := lastSeq(t, dir); last == 0 || last >= rotatedEvents {
			t.Errorf("after the truncate LastSeq = %d; want the events before the cut record", last)
		}
	})
	t.Run("crash", func(t *testing.T) {
		dir, newest := copyOf(t)
		if err := os.Truncate(newest, size-size%512-512); err != nil {
			t.Fatal(err)
		}
		if p := checkProblems(t, dir); len(p) != 0 {
			t.Errorf("Check's problems = %v; want none for a tear a crash leaves", p)
		}
		if last := lastSeq(t, dir); last == 0 || last >= rotatedEvents {
			t.Errorf("LastSeq = %d; want the events before the tear", last)
		}
	})
}

// An older write-ahead log cut short (it was closed before the next began, so it ends with a
// whole record) makes pebble refuse with a bare "unexpected EOF", and store check stopped
// there with exit status 2. It is damage, said with what follows and how to recover.
func TestOlderLogCutShortIsDamage(t *testing.T) {
	dir := writeRotatedStore(t, filepath.Join(t.TempDir(), "db"), true)
	logs := logsOf(t, dir)
	if err := os.Truncate(logs[0], 120000); err != nil {
		t.Fatal(err)
	}
	p := checkProblems(t, dir)
	if len(p) != 1 || !errors.Is(p[0], disk.ErrCorrupt) || !strings.Contains(p[0].Error(), "cut short") || !strings.Contains(p[0].Error(), "commits in later logs follow") {
		t.Fatalf("Check's problems = %v; want the cut log, what follows it and how to recover", p)
	}
	t.Logf("Check: %v", p[0])
	if _, err := disk.Open(dir, disk.Options{}); !errors.Is(err, disk.ErrCorrupt) {
		t.Errorf("Open: %v; want disk.ErrCorrupt", err)
	}
}

// Damage in a write-ahead log that pebble no longer replays (its contents are in table files;
// pebble keeps the file for reuse) loses nothing: the store starts with every event. Before
// this egrid refused to start, counting the commits after the damage as lost.
func TestDamageInAnObsoleteLogIsNotDamage(t *testing.T) {
	dir := writeRotatedStore(t, filepath.Join(t.TempDir(), "db"), false)
	logs := logsOf(t, dir)
	var victim string
	var size int64
	for _, l := range logs[:len(logs)-1] {
		if fi, err := os.Stat(l); err == nil && fi.Size() > size {
			victim, size = l, fi.Size()
		}
	}
	if size < 100<<10 {
		t.Fatalf("the obsolete logs hold %d bytes; want commits in them", size)
	}
	f, err := os.OpenFile(victim, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef}, 50000); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if p := checkProblems(t, dir); len(p) != 0 {
		t.Errorf("Check's problems = %v; want none", p)
	}
	if last := lastSeq(t, dir); last != rotatedEvents {
		t.Errorf("LastSeq = %d; want %d", last, rotatedEvents)
	}
}

// A deleted MANIFEST failed the start with pebble's bare "could not open manifest file": it is
// damage, said with what to do.
func TestMissingManifestIsDamage(t *testing.T) {
	dir := writeStore(t, filepath.Join(t.TempDir(), "db"), false)
	manifests := files(t, dir, "MANIFEST-*")
	for _, m := range manifests {
		if err := os.Remove(m); err != nil {
			t.Fatal(err)
		}
	}
	_, err := disk.Open(dir, disk.Options{})
	if !errors.Is(err, disk.ErrCorrupt) || !strings.Contains(err.Error(), "restore the directory from a backup") {
		t.Fatalf("Open without its MANIFEST: err = %v; want disk.ErrCorrupt with the way to recover", err)
	}
	t.Logf("Open: %v", err)
}

// A second Open of a directory another store holds is refused for the lock, whatever the
// directory looks like meanwhile. Open looked for damage before taking the lock, so a store
// still being created by another process (its marker not written yet) was refused as damaged.
func TestOpenTakesTheLockBeforeLookingForDamage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	s, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, m := range files(t, dir, "marker.manifest.*") { // as while the other one creates it
		if err := os.Remove(m); err != nil {
			t.Fatal(err)
		}
	}
	_, err = disk.Open(dir, disk.Options{})
	if !errors.Is(err, disk.ErrLocked) || errors.Is(err, disk.ErrCorrupt) {
		t.Fatalf("second Open: %v; want disk.ErrLocked", err)
	}
	if _, err := disk.Check(t.Context(), dir, nil, slog.New(slog.DiscardHandler)); !errors.Is(err, disk.ErrLocked) {
		t.Errorf("Check: %v; want disk.ErrLocked", err)
	}
}

// deniedFS refuses to open the files whose names match deny, as a file owned by another user
// is refused.
type deniedFS struct {
	vfs.FS
	deny string
}

func (d deniedFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if ok, _ := filepath.Match(d.deny, filepath.Base(name)); ok {
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	return d.FS.Open(name, opts...)
}

// A write-ahead log egrid may not read is a permission to fix, not damage: Open's error wraps
// the permission (egrid serve then names the fix), and nothing is counted as damage.
func TestUnreadableLogIsAPermissionNotDamage(t *testing.T) {
	dir := writeStore(t, filepath.Join(t.TempDir(), "db"), true)
	_, err := disk.OpenFS(dir, disk.Options{}, deniedFS{vfs.Default, "*.log"})
	if !errors.Is(err, fs.ErrPermission) || errors.Is(err, disk.ErrCorrupt) {
		t.Fatalf("Open with an unreadable log: %v; want the permission error, not damage", err)
	}
}

// readOnlyFS is a file system mounted read-only: every write, create and lock fails with
// EROFS.
type readOnlyFS struct{ vfs.FS }

func rofs(name string) error { return &os.PathError{Op: "open", Path: name, Err: syscall.EROFS} }

func (readOnlyFS) Create(name string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, rofs(name)
}

func (readOnlyFS) OpenReadWrite(name string, _ vfs.DiskWriteCategory, _ ...vfs.OpenOption) (vfs.File, error) {
	return nil, rofs(name)
}

func (readOnlyFS) Lock(name string) (io.Closer, error)       { return nil, rofs(name) }
func (readOnlyFS) MkdirAll(name string, _ os.FileMode) error { return rofs(name) }
func (readOnlyFS) Remove(name string) error                  { return rofs(name) }
func (readOnlyFS) Rename(name, _ string) error               { return rofs(name) }

// egrid store check reads a store on a read-only mount: it writes nothing, and no process can
// write the store there either, so it goes without the lock it cannot take. Before, it failed
// with "open …/LOCK: read-only file system".
func TestReadOnlyStoreOpensOnAReadOnlyFileSystem(t *testing.T) {
	dir := writeStore(t, filepath.Join(t.TempDir(), "db"), false)
	s, err := disk.OpenFS(dir, disk.Options{ReadOnly: true}, readOnlyFS{vfs.Default})
	if err != nil {
		t.Fatalf("read-only Open on a read-only file system: %v", err)
	}
	defer s.Close()
	if last, err := s.LastSeq(t.Context(), "orders"); err != nil || last != damagedEvents {
		t.Errorf("LastSeq = %d, %v; want %d", last, err, damagedEvents)
	}
	if _, err := disk.OpenFS(dir, disk.Options{}, readOnlyFS{vfs.Default}); !errors.Is(err, syscall.EROFS) {
		t.Errorf("Open to write on a read-only file system: %v; want EROFS", err)
	}
}
