package disk_test

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// A store that failed on a write reopens itself past a damaged table block of subscription
// state, as Open starts past it: the copy of the state the failed instance held goes on after
// the block, which is reported once and counted, and publishes are accepted again. Before, the
// copy gave up at the block and the store tried again every 30 s for as long as the process
// ran: one full-disk episode refused every publish until a restart.
func TestRecoveryGoesPastADamagedStateBlock(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	table := disk.WriteStateStore(t, dir)["parked retries"]
	fi, err := os.Stat(table)
	if err != nil {
		t.Fatal(err)
	}
	disk.DamageAt(t, table, fi.Size()/4)

	s, logs, mu, counts := openAndRecover(t, dir)
	if h := s.Health(); h.State != store.Healthy || h.Recoveries != 1 {
		t.Errorf("Health = %+v; want Healthy after 1 recovery", h)
	}
	if seq, err := s.Append(ctx, "orders", publishTime, []*schemas.Event{testEvent("after")}); err != nil || seq <= 200 {
		t.Errorf("Append after the recovery = %d, %v; want a number after 200", seq, err)
	}
	if c, err := s.Cursors(ctx, "orders"); err != nil || c["billing"] != 200 || c["audit"] != 60 {
		t.Errorf("Cursors after the recovery = %v, %v; want billing at 200, audit at 60", c, err)
	}
	st, err := s.LoadSubscriptionIndex(ctx, "orders", "billing")
	if err != nil || len(st.Parked) < 150 || len(st.Parked) >= 200 || string(st.Probation) != "probation" {
		t.Errorf("billing's state after the recovery: %d parked, probation %q, %v; want all but the damaged block's; logs:\n%s", len(st.Parked), st.Probation, err, logs.String())
	}
	l := logs.String()
	if n := strings.Count(l, `level=ERROR msg="disk store:`); n != 2 || // the failed write, and the block
		!strings.Contains(l, `met a damaged table block holding the state of topics or subscriptions, and goes on past it: parked retries among them are lost`) ||
		!strings.Contains(l, "of=[orders/billing]") {
		t.Errorf("%d ERRORs; want 1 about the failed write and 1 about the block, naming parked retries of orders/billing; logs:\n%s", n, l)
	}
	if mu.Lock(); counts[disk.DamageTable] != 1 || len(counts) != 1 {
		t.Errorf("damage counted %v; want the block counted once", counts)
	}
	mu.Unlock()
}

// openAndRecover opens dir counting damage, fails a write (a full disk) and waits for the store
// to reopen itself.
func openAndRecover(t *testing.T, dir string) (s *disk.Store, logs *syncBuffer, mu *sync.Mutex, counts map[string]int) {
	t.Helper()
	ctx := t.Context()
	var full atomic.Bool
	fs := logFS{FS: vfs.Default, hook: func(string) error {
		if full.Load() {
			return syscall.ENOSPC
		}
		return nil
	}}
	logs, mu, counts = new(syncBuffer), new(sync.Mutex), map[string]int{}
	opts := disk.Options{RecoverInterval: time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)), OnCorruption: func(kind string) {
		mu.Lock()
		counts[kind]++
		mu.Unlock()
	}}
	disk.NoCompactions(&opts)
	disk.SetFreeBytes(&opts, func(string) (uint64, error) { return 1 << 30, nil })
	s, err := disk.OpenFS(dir, opts, fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	full.Store(true)
	if _, err := s.Append(ctx, "orders", publishTime, []*schemas.Event{testEvent("refused")}); err == nil {
		t.Fatal("Append on a full disk succeeded; want it refused")
	}
	full.Store(false)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.WaitFailed(wctx, false); err != nil {
		t.Fatalf("the store did not reopen itself past the damaged block: %v\n%s", err, logs.String())
	}
	return s, logs, mu, counts
}

// A damaged table block holding a subscription's cursor or a topic's trim floor, reported and
// counted at Open, is not counted again when the store reopens itself after a failed write and
// its copy of the state goes past the block: one block, one count (per Store), one ERROR.
// Before, Open's report and the copy's were kept apart, and the block was counted twice.
func TestRecoveryCountsADamagedBlockFoundAtOpenOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		write   func(t *testing.T, dir string)
		report  string
		cursors map[string]uint64
	}{
		{
			name:    "cursor",
			write:   func(t *testing.T, dir string) { disk.DamageAt(t, disk.WriteStateStore(t, dir)["cursor"], 8) },
			report:  `level=ERROR msg="disk store: a subscription's cursor is in a damaged table block`,
			cursors: map[string]uint64{"billing": 50, "audit": 60}, // billing at the floor
		},
		{
			name:    "trim floor",
			write:   disk.WriteFloorDamagedStore,
			report:  `level=ERROR msg="disk store: a topic's trim floor (the newest event number trimmed from its journal) is in a damaged table block`,
			cursors: map[string]uint64{"billing": 10, "audit": 5},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "db")
			tc.write(t, dir)

			s, logs, mu, counts := openAndRecover(t, dir)
			if c, err := s.Cursors(ctx, "orders"); err != nil || !maps.Equal(c, tc.cursors) {
				t.Errorf("Cursors after the recovery = %v, %v; want %v", c, err, tc.cursors)
			}
			if mu.Lock(); counts[disk.DamageTable] != 1 || len(counts) != 1 || s.Health().Corruptions != 1 {
				t.Errorf("damage counted %v (health %d); want the block counted once", counts, s.Health().Corruptions)
			}
			mu.Unlock()
			l := logs.String()
			if n := strings.Count(l, `level=ERROR msg="disk store:`); n != 2 || !strings.Contains(l, tc.report) { // the failed write, and the block
				t.Errorf("%d ERRORs; want 1 about the failed write and 1 about the block; logs:\n%s", n, l)
			}
		})
	}
}
