package disk_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

const damagedEvents = 3000

// writeStore writes topic orders with subscription billing and damagedEvents acknowledged
// events, one Append each, in dir. With crash, it returns a copy of the directory taken while
// the store is open (the events only in the write-ahead log, as after kill -9); otherwise it
// closes the store (everything flushed to table files) and returns dir.
func writeStore(t *testing.T, dir string, crash bool) string {
	t.Helper()
	ctx := t.Context()
	s, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	for i := range damagedEvents {
		if _, err := s.Append(ctx, "orders", publishTime, []*schemas.Event{testEvent(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if !crash {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	image := filepath.Join(t.TempDir(), "image")
	if err := os.CopyFS(image, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return image
}

// files returns the paths in dir whose names match pattern.
func files(t *testing.T, dir, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// openCounting opens dir and counts the damage reported through OnCorruption by kind.
func openCounting(dir string, logs *syncBuffer) (*disk.Store, map[string]int, func() map[string]int, error) {
	var mu sync.Mutex
	counts := map[string]int{}
	s, err := disk.Open(dir, disk.Options{
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		OnCorruption: func(kind string) {
			mu.Lock()
			counts[kind]++
			mu.Unlock()
		},
	})
	get := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range counts {
			out[k] = v
		}
		return out
	}
	return s, counts, get, err
}

// A missing marker file would make pebble start an empty store (and delete the tables): Open
// refuses, naming the marker and the command that recreates it; after that command the store
// opens with everything in it.
func TestMissingMarkerRefusesToStart(t *testing.T) {
	for _, marker := range []string{"marker.manifest.*", "marker.format-version.*"} {
		t.Run(marker, func(t *testing.T) {
			dir := writeStore(t, filepath.Join(t.TempDir(), "db"), false)
			m := files(t, dir, marker)
			if len(m) != 1 {
				t.Fatalf("markers %s: %v", marker, m)
			}
			if err := os.Remove(m[0]); err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			_, _, counts, err := openCounting(dir, &logs)
			if !errors.Is(err, disk.ErrCorrupt) || !strings.Contains(err.Error(), "touch ") {
				t.Fatalf("Open without %s: err = %v, want disk.ErrCorrupt with the touch command", marker, err)
			}
			if !strings.Contains(logs.String(), "level=ERROR") || counts()[disk.DamageMarker] != 1 {
				t.Errorf("want one ERROR and one count of marker damage; counts %v, logs:\n%s", counts(), logs.String())
			}
			// The fix the message gives.
			fix := err.Error()[strings.Index(err.Error(), "touch ")+len("touch "):]
			fix = fix[:strings.IndexAny(fix, ", ")]
			if err := os.WriteFile(fix, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := disk.Open(dir, disk.Options{})
			if err != nil {
				t.Fatalf("Open after the fix: %v", err)
			}
			defer s.Close()
			if last, err := s.LastSeq(t.Context(), "orders"); err != nil || last != damagedEvents {
				t.Errorf("LastSeq after the fix = %d, %v; want %d", last, err, damagedEvents)
			}
		})
	}
}

// A write-ahead log damaged in the middle would be replayed up to the damage and the
// acknowledged events after it dropped: Open refuses, saying how many commits follow the
// damage and how to recover.
func TestMidWALDamageRefusesToStart(t *testing.T) {
	dir := writeStore(t, filepath.Join(t.TempDir(), "db"), true)
	var biggest string
	var size int64
	for _, f := range files(t, dir, "*.log") {
		if fi, err := os.Stat(f); err == nil && fi.Size() > size {
			biggest, size = f, fi.Size()
		}
	}
	if size < 1<<20 {
		t.Fatalf("the log holds %d bytes; want the events in it", size)
	}
	f, err := os.OpenFile(biggest, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 4096), size/2); err != nil { // a zeroed page
		t.Fatal(err)
	}
	_ = f.Close()

	var logs syncBuffer
	_, _, counts, err := openCounting(dir, &logs)
	if !errors.Is(err, disk.ErrCorrupt) || !strings.Contains(err.Error(), "truncate -s") || !strings.Contains(err.Error(), "follow the damage") {
		t.Fatalf("Open on a damaged log: err = %v, want disk.ErrCorrupt saying what follows the damage and how to recover", err)
	}
	t.Logf("Open: %v", err)
	if counts()[disk.DamageWAL] != 1 {
		t.Errorf("damage counted %v, want one wal", counts())
	}
	problems, _, _, _ := disk.CheckDir(nil, dir)
	if len(problems) != 1 {
		t.Errorf("CheckDir = %v, want the damaged log", problems)
	}
}

// A damaged table block does not silence the topic: Read goes on after it, the lost entries
// are named in an ERROR and counted, and nothing else is skipped.
func TestDamagedTableBlockIsReportedAndSkipped(t *testing.T) {
	dir := writeStore(t, filepath.Join(t.TempDir(), "db"), false)
	var biggest string
	var size int64
	for _, f := range files(t, dir, "*.sst") {
		if fi, err := os.Stat(f); err == nil && fi.Size() > size {
			biggest, size = f, fi.Size()
		}
	}
	if size < 100<<10 {
		t.Fatalf("the biggest table holds %d bytes; want the events in it", size)
	}
	f, err := os.OpenFile(biggest, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(strings.Repeat("\xff", 64)), size/3); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	var logs syncBuffer
	s, _, counts, err := openCounting(dir, &logs)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	ctx := t.Context()
	read, next := 0, uint64(1)
	for range damagedEvents { // bounded
		got, err := s.Read(ctx, "orders", next, 500)
		if err != nil {
			t.Fatalf("Read from %d: %v", next, err)
		}
		if len(got) == 0 {
			break
		}
		read += len(got)
		next = got[len(got)-1].Seq + 1
	}
	lost := damagedEvents - read
	t.Logf("read %d of %d entries; %d in the damaged block", read, damagedEvents, lost)
	if lost <= 0 || lost > 200 {
		t.Errorf("read %d of %d entries; want all but the damaged block's", read, damagedEvents)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "topic=orders") || !strings.Contains(l, "fromSeq=") {
		t.Errorf("want an ERROR naming the topic and the lost seqs; logs:\n%s", l)
	}
	if counts()[disk.DamageTable] != 1 || s.Health().Corruptions != 1 {
		t.Errorf("damage counted %v, Health %+v; want one table damage", counts(), s.Health())
	}
	// A second pass reports nothing new.
	if _, err := s.Read(ctx, "orders", 1, damagedEvents); err != nil || counts()[disk.DamageTable] != 1 {
		t.Errorf("reading again: %v, counts %v; want the damage reported once", err, counts())
	}
}

// A table file cut short or gone (a copy that stopped early, a file deleted by hand) would
// lose what it holds: Open refuses, naming the file and the way to recover, counts the damage
// once and store check reports it.
func TestTruncatedOrMissingTableRefusesToStart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(path string) error
		want   string
	}{
		{name: "truncated", damage: func(p string) error { return os.Truncate(p, 100) }, want: "cut short"},
		{name: "deleted", damage: os.Remove, want: "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeStore(t, filepath.Join(t.TempDir(), "db"), false)
			tables := files(t, dir, "*.sst")
			if len(tables) == 0 {
				t.Fatal("no table file after Close")
			}
			victim := tables[len(tables)-1]
			if err := tc.damage(victim); err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			_, _, counts, err := openCounting(dir, &logs)
			if !errors.Is(err, disk.ErrCorrupt) {
				t.Fatalf("Open with table %s %s: err = %v, want disk.ErrCorrupt", filepath.Base(victim), tc.name, err)
			}
			t.Logf("Open: %v", err)
			for _, want := range []string{victim, tc.want, "restore the directory from a backup"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Open's error does not say %q", want)
				}
			}
			if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, filepath.Base(victim)) {
				t.Errorf("want an ERROR naming the table; logs:\n%s", l)
			}
			if got := counts(); got[disk.DamageTable] != 1 || len(got) != 1 {
				t.Errorf("damage counted %v, want one table", got)
			}
			r, err := disk.Check(t.Context(), dir, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("Check: %v, want the damage among its problems", err)
			}
			if len(r.Problems) != 1 || !errors.Is(r.Problems[0], disk.ErrCorrupt) || !strings.Contains(r.Problems[0].Error(), victim) {
				t.Errorf("Check's problems = %v, want the damaged table", r.Problems)
			}
		})
	}
}
