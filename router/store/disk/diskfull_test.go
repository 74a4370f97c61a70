package disk_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// On a real full disk (a tmpfs), Appends fail with ErrFailed instead of hanging or
// crashing; stored events are still read and subscription state is still taken; once space
// is freed the store reopens itself and takes Appends again, and everything acknowledged is
// there.
func TestDiskFull(t *testing.T) {
	ctx := t.Context()
	dir := testkit.Tmpfs(t, 64<<20)
	var logs syncBuffer
	s, err := disk.Open(filepath.Join(dir, "db"), disk.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), MemTableSize: 1 << 20, RecoverInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "t", "sub", nil); err != nil {
		t.Fatal(err)
	}
	var acked []uint64
	for i := range 100 {
		last, err := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent(fmt.Sprint("a", i))})
		if err != nil {
			t.Fatalf("Append before the disk is full: %v", err)
		}
		acked = append(acked, last)
	}
	filler := testkit.FillDisk(t, dir)

	var failed error
	for i := range 200_000 { // bounded: the disk is full long before
		last, err := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent(fmt.Sprint("b", i))})
		if err != nil {
			failed = err
			break
		}
		acked = append(acked, last)
	}
	if !errors.Is(failed, disk.ErrFailed) {
		t.Fatalf("Append on a full disk: err = %v, want one matching disk.ErrFailed", failed)
	}
	t.Logf("%d Appends acknowledged, then: %v", len(acked), failed)
	if h := s.Health(); h.State != store.Failed {
		t.Errorf("Health on a full disk = %+v, want Failed", h)
	}
	got, err := s.Read(ctx, "t", 1, 10)
	if err != nil || len(got) != 10 || got[0].Event.ID != "a0" {
		t.Errorf("Read on a full disk = %d entries, %v; want the first 10 acknowledged", len(got), err)
	}
	if err := s.UpdateSubscription(ctx, "t", "sub", store.Update{Cursor: 50}); err != nil {
		t.Errorf("UpdateSubscription on a full disk: %v, want it kept in memory", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := s.WaitFailed(wctx, false); err != nil {
		out, _ := exec.Command("df", "-B1", dir).CombinedOutput()
		ls, _ := exec.Command("ls", "-la", filepath.Join(dir, "db")).CombinedOutput()
		t.Fatalf("the store did not reopen itself once space was freed: %v\n%s\n%s\n%s", err, out, ls, lastLines(logs.String(), 20))
	}
	last, err := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("c")})
	if err != nil || last <= acked[len(acked)-1] {
		t.Fatalf("Append after space was freed = %d, %v; want a number after %d", last, err, acked[len(acked)-1])
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r, err := disk.Open(filepath.Join(dir, "db"), disk.Options{})
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	for _, seq := range acked {
		if got, err := r.Read(ctx, "t", seq, 1); err != nil || len(got) != 1 || got[0].Seq != seq {
			t.Fatalf("acknowledged %d; after reopening Read gives %+v, %v", seq, got, err)
		}
	}
	if st, err := r.LoadSubscription(ctx, "t", "sub"); err != nil || st.Cursor != 50 {
		t.Errorf("cursor after reopening = %+v, %v; want 50, written while the disk was full", st, err)
	}
}

// Below the free-space floor Appends are refused with store.ErrInsufficientStorage and a
// message saying what to do, before pebble ever fails; reads and state writes go on, and
// Appends are accepted again as soon as there is room.
func TestMinFreeBytes(t *testing.T) {
	ctx := t.Context()
	opts := disk.Options{MinFreeBytes: 100 << 20}
	var free atomic.Uint64
	free.Store(10 << 20)
	disk.SetFreeBytes(&opts, func(string) (uint64, error) { return free.Load(), nil })
	s, err := disk.OpenFS("db", opts, vfs.NewMem())
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
	_, err = s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("low")})
	if !errors.Is(err, store.ErrInsufficientStorage) || !strings.Contains(err.Error(), "free disk space") {
		t.Fatalf("Append below the floor: err = %v, want store.ErrInsufficientStorage saying what to do", err)
	}
	if h := s.Health(); h.State != store.LowSpace || h.FreeBytes != 10<<20 || h.MinFreeBytes != 100<<20 {
		t.Errorf("Health below the floor = %+v, want LowSpace with the free bytes and the floor", h)
	}
	if err := s.UpdateSubscription(ctx, "t", "sub", store.Update{Probation: []byte("x")}); err != nil {
		t.Errorf("UpdateSubscription below the floor: %v", err)
	}
	free.Store(200 << 20)
	if last, err := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("room")}); err != nil || last != 1 {
		t.Errorf("Append once there is room = %d, %v; want 1, nil", last, err)
	}
	if h := s.Health(); h.State != store.Healthy {
		t.Errorf("Health once there is room = %+v, want Healthy", h)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
