//go:build linux

package disk_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// logsHeld returns the disk space the write-ahead logs in dir take (their blocks, which a
// preallocated log holds beyond its size), and a listing.
func logsHeld(t *testing.T, dir string) (uint64, string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var held uint64
	var list strings.Builder
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
			t.Fatal(err)
		}
		held += uint64(st.Blocks) * 512
		fmt.Fprintf(&list, "%s: size %d, on disk %d; ", e.Name(), st.Size, st.Blocks*512)
	}
	return held, list.String()
}

func freeOn(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// On a small volume the write-ahead logs hold the data written to them, not pebble's
// preallocation of 110 % of the memtable (70 MB) each and the obsolete logs kept for
// recycling: a 200 MB volume was full after 81 publishes of 10 events, with 182 MB in logs.
func TestWriteAheadLogsOnASmallVolume(t *testing.T) {
	ctx := t.Context()
	dir := testkit.Tmpfs(t, 200<<20)
	db := filepath.Join(dir, "db")
	s, err := disk.Open(db, disk.Options{MinFreeBytes: 16 << 20}) // the default memtable: 64 MiB
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "t", "sub", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 300 { // about 3 MB: the memtable grows from 256 KiB through four logs
		evs := make([]*schemas.Event, 10)
		for j := range evs {
			evs[j] = testEvent(fmt.Sprint(i, "-", j))
		}
		last, err := s.Append(ctx, "t", publishTime, evs)
		if err != nil {
			held, list := logsHeld(t, db)
			t.Fatalf("Append %d on a 200 MB volume: %v; the logs hold %d bytes: %s", i, err, held, list)
		}
		if err := s.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: last}); err != nil {
			t.Fatal(err)
		}
		if err := s.Trim(ctx, "t", last); err != nil {
			t.Fatal(err)
		}
	}
	disk.WaitForCleaning(s)
	if held, list := logsHeld(t, db); held > 8<<20 {
		t.Errorf("after about 3 MB of events the write-ahead logs hold %d bytes on a 200 MB volume, want at most 8 MiB: %s", held, list)
	}
	if free := freeOn(t, dir); free < 180<<20 {
		t.Errorf("%d bytes free on the 200 MB volume after about 3 MB of events, want at least 180 MiB", free)
	}
}

// Below the free-space floor, once the subscriptions have caught up and the journal is
// trimmed, the store flushes its memtable (its write-ahead logs, with every event delivered,
// are then deleted) and compacts the trimmed journal: the space comes back and publishes are
// accepted again without a restart. Before, the logs stayed until the memtable filled, which
// took publishes: the store stayed below the floor for good.
func TestLowSpaceClearsOnceTheJournalIsTrimmed(t *testing.T) {
	ctx := t.Context()
	dir := testkit.Tmpfs(t, 60<<20)
	opts := disk.Options{MinFreeBytes: 30 << 20}
	reclaimed := make(chan struct{}, 16)
	disk.SetReclaimHook(&opts, func() { reclaimed <- struct{}{} })
	s, err := disk.Open(filepath.Join(dir, "db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "t", "sub", nil); err != nil {
		t.Fatal(err)
	}
	var last uint64
	refused := false
	for i := range 10_000 { // bounded: 60 MB of events; the floor comes after about 30
		evs := make([]*schemas.Event, 10)
		for j := range evs {
			evs[j] = testEvent(fmt.Sprint(i, "-", j))
		}
		l, err := s.Append(ctx, "t", publishTime, evs)
		if errors.Is(err, store.ErrInsufficientStorage) {
			refused = true
			break
		}
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		last = l
	}
	if !refused {
		t.Fatal("Appends never reached the floor")
	}
	if h := s.Health(); h.State != store.LowSpace {
		t.Fatalf("Health below the floor = %+v, want LowSpace", h)
	}
	// Every event delivered: the journal is trimmed.
	if err := s.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: last}); err != nil {
		t.Fatal(err)
	}
	if err := s.Trim(ctx, "t", last); err != nil {
		t.Fatal(err)
	}
	_ = s.Health() // as GET /admin/health or a publish asks
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	select {
	case <-reclaimed:
	case <-wctx.Done():
		held, list := logsHeld(t, filepath.Join(dir, "db"))
		t.Fatalf("below the floor with the journal trimmed, the store did not flush and compact: %d bytes free, the logs hold %d: %s", freeOn(t, dir), held, list)
	}
	disk.WaitForCleaning(s)
	if h := s.Health(); h.State != store.Healthy {
		held, list := logsHeld(t, filepath.Join(dir, "db"))
		t.Fatalf("Health once the trimmed journal's space was reclaimed = %+v, want Healthy; the logs hold %d: %s", h, held, list)
	}
	if got, err := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("again")}); err != nil || got != last+1 {
		t.Errorf("Append once there is room = %d, %v; want %d", got, err, last+1)
	}
}

// An Open that fails on a full disk says how much of it the store's own write-ahead logs hold
// and how much to free.
func TestOpenOnAFullDiskSaysWhatTheLogsHold(t *testing.T) {
	ctx := t.Context()
	dir := testkit.Tmpfs(t, 32<<20)
	db := filepath.Join(dir, "db")
	s, err := disk.Open(db, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.FillDisk(t, dir)
	r, err := disk.Open(db, disk.Options{MinFreeBytes: 20 << 20})
	if err == nil {
		_ = r.Close()
		t.Skip("pebble opened the store on a full disk")
	}
	if msg := err.Error(); !strings.Contains(msg, "write-ahead log files (*.log) in "+db+" hold") || !strings.Contains(msg, "free at least 20.0 MiB") {
		t.Errorf("Open on a full disk: %v; want it to say how much the write-ahead logs hold and how much to free", err)
	}
}

// A store failed on a full disk says in its health how much free space its reopening waits
// for, and how much there is now: with a floor (8 MiB) below what a reopening needs (16 MiB)
// the store stayed failed with 12 MiB free and a reason saying only that it reopens itself
// "once it has room".
func TestFailedHealthSaysWhatTheReopenWaitsFor(t *testing.T) {
	ctx := t.Context()
	dir := testkit.Tmpfs(t, 64<<20)
	s, err := disk.Open(filepath.Join(dir, "db"), disk.Options{MinFreeBytes: 8 << 20, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	filler := testkit.FillDisk(t, dir)
	// Definition writes are not held back by the floor: they meet the full disk.
	for i := 0; ; i++ {
		err := s.PutTopic(ctx, fmt.Sprint("u", i), nil)
		if errors.Is(err, disk.ErrFailed) {
			break
		}
		if err != nil || i == 10_000 { // bounded: the log's last page fills long before
			t.Fatalf("PutTopic on a full disk: err = %v after %d, want one matching disk.ErrFailed", err, i)
		}
	}
	st, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	const want = 12 << 20 // above the floor, below what a reopening needs
	if err := os.Truncate(filler, st.Size()-int64(want-freeOn(t, dir))); err != nil {
		t.Fatal(err)
	}
	free := freeOn(t, dir)
	if free < 8<<20 || free >= disk.ReopenFreeBytes {
		t.Fatalf("free after truncating the filler = %d, want between 8 and 16 MiB", free)
	}
	h := s.Health()
	if h.State != store.Failed {
		t.Fatalf("Health with %d bytes free = %+v, want Failed: a reopening needs 16 MiB", free, h)
	}
	needs := fmt.Sprintf("%.1f MiB", float64(disk.ReopenFreeBytes)/(1<<20))
	now := fmt.Sprintf("%.1f MiB", float64(h.FreeBytes)/(1<<20))
	if !strings.Contains(h.Reason, needs) || !strings.Contains(h.Reason, now+" free now") {
		t.Errorf("Health reason = %q; want it to name the free space the reopening waits for (%s) and what is free now (%s)", h.Reason, needs, now)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := s.WaitFailed(wctx, false); err != nil {
		t.Fatalf("the store did not reopen itself once space was freed: %v", err)
	}
}
