package disk_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// readCountFS counts the bytes read from each write-ahead log, by name.
type readCountFS struct {
	vfs.FS
	mu   *sync.Mutex
	read map[string]int64
}

func newReadCountFS(fs vfs.FS) readCountFS {
	return readCountFS{FS: fs, mu: new(sync.Mutex), read: map[string]int64{}}
}

func (fs readCountFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return readCountFile{f, fs, filepath.Base(name)}, nil
}

func (fs readCountFS) add(name string, n int) {
	fs.mu.Lock()
	fs.read[name] += int64(n)
	fs.mu.Unlock()
}

func (fs readCountFS) bytesRead(name string) int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.read[name]
}

type readCountFile struct {
	vfs.File
	fs   readCountFS
	name string
}

func (f readCountFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	f.fs.add(f.name, n)
	return n, err
}

func (f readCountFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.add(f.name, n)
	return n, err
}

// writeRecycledStore appends events in dir, with a memtable of 1 MiB so that pebble rotates
// its write-ahead logs and writes new ones into the files of flushed ones, until the newest
// log is such a recycled file of at least 512 KiB that holds one Append: its records, then
// the stale tail of the log that was in the file before. It returns a copy of the directory
// taken then, as after kill -9, the newest log's path in it, and the events appended.
func writeRecycledStore(t *testing.T, dir string) (image, newest string, appended uint64) {
	t.Helper()
	ctx := t.Context()
	s, err := disk.Open(dir, disk.Options{MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	last := ""
	for i := range 5000 { // bounded: about 30 MB of appends; a log is recycled after 2 MB
		events := make([]*schemas.Event, 8)
		for j := range events {
			events[j] = testEvent(fmt.Sprint(i, "-", j))
		}
		if appended, err = s.Append(ctx, "orders", publishTime, events); err != nil {
			t.Fatal(err)
		}
		logs := files(t, dir, "*.log")
		n := logs[len(logs)-1]
		if n == last {
			continue
		}
		last = n
		if fi, err := os.Stat(n); err != nil {
			t.Fatal(err)
		} else if fi.Size() < 512<<10 {
			continue // a new file, or one recycled from a small log
		}
		image = filepath.Join(t.TempDir(), "image")
		if err := os.CopyFS(image, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		return image, filepath.Join(image, filepath.Base(n)), appended
	}
	t.Fatal("pebble wrote no log into a recycled file")
	return "", "", 0
}

// A store whose newest write-ahead log is a recycled file (pebble writes a new log into the
// file of a flushed one, over its start) holds, after kill -9, the new log's records and then
// the stale tail of the old log, which carry the old log's number. The check before the start
// read the whole tail again from every 32 KiB block of it (a 120 MB recycled file: 218 GB
// read, more than a minute before egrid serve said anything). It reads the log a bounded
// number of times, finds nothing damaged, and the store starts with every event.
func TestRecycledLogIsReadABoundedNumberOfTimes(t *testing.T) {
	image, newest, appended := writeRecycledStore(t, filepath.Join(t.TempDir(), "db"))
	fi, err := os.Stat(newest)
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()

	fs := newReadCountFS(vfs.Default)
	problems, _, tails, err := disk.CheckDir(fs, image)
	if err != nil || len(problems) != 0 || len(tails) != 0 {
		t.Fatalf("CheckDir = %v, %v, %v; want no damage in a recycled log", problems, tails, err)
	}
	read := fs.bytesRead(filepath.Base(newest))
	t.Logf("CheckDir read %d bytes of %s (%d bytes)", read, filepath.Base(newest), size)
	// The records before the stale tail and pebble's look past them for a chunk saying more
	// was synced (the whole file, as pebble's own replay reads it); then the first block of
	// the tail, which ends the log.
	if read > size+2*32<<10 {
		t.Errorf("CheckDir read %d bytes of %s, %.1f times its %d bytes; want the file once and a block",
			read, filepath.Base(newest), float64(read)/float64(size), size)
	}

	fs = newReadCountFS(vfs.Default)
	s, err := disk.OpenFS(image, disk.Options{MemTableSize: 1 << 20}, fs)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if last, err := s.LastSeq(t.Context(), "orders"); err != nil || last != appended {
		t.Errorf("LastSeq = %d, %v; want %d", last, err, appended)
	}
	t.Logf("Open read %d bytes of %s", fs.bytesRead(filepath.Base(newest)), filepath.Base(newest))
}
