package disk_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
)

// A delete whose write failed leaves its outcome to the store's reopening, which reads whether
// the definition is still on disk; when that definition is in a damaged table block, the
// reopening takes it as still there (the delete failed, as it answered: delete again), reports
// the block once (an ERROR saying what to do, a count) and finishes: the store takes writes
// again, and the delete made again succeeds. Before, the reopening failed on pebble's bare
// error and tried again for as long as the process ran, refusing every write.
func TestRecoveryGoesPastADamagedDefinitionOfAFailedDelete(t *testing.T) {
	for _, tc := range []struct {
		name, topic, sub string
		del              func(ctx context.Context, s *disk.Store) error
		listed           func(ctx context.Context, s *disk.Store) bool
	}{
		{
			name: "DeleteSubscription", topic: "a", sub: "s1",
			del: func(ctx context.Context, s *disk.Store) error { return s.DeleteSubscription(ctx, "a", "s1") },
			listed: func(ctx context.Context, s *disk.Store) bool {
				_, err := s.LoadSubscription(ctx, "a", "s1")
				return err == nil
			},
		},
		{
			name: "DeleteTopic", topic: "a",
			del: func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "a") },
			listed: func(ctx context.Context, s *disk.Store) bool {
				_, err := s.Cursors(ctx, "a")
				return err == nil
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "db")
			var failWrites, room atomic.Bool
			fs := logFS{FS: vfs.Default, hook: func(op string) error {
				if op == "write" && failWrites.Load() {
					return errInjected
				}
				return nil
			}}
			logs, mu, counts := new(syncBuffer), new(sync.Mutex), map[string]int{}
			opts := disk.Options{RecoverInterval: time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)), OnCorruption: func(kind string) {
				mu.Lock()
				counts[kind]++
				mu.Unlock()
			}}
			disk.NoCompactions(&opts)
			disk.SetFreeBytes(&opts, func(string) (uint64, error) {
				if room.Load() {
					return 1 << 40, nil
				}
				return 0, nil
			})
			s, err := disk.OpenFS(dir, opts, fs)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			for _, step := range []func() error{
				func() error { return s.PutTopic(ctx, "a", []byte("a")) },
				func() error { return s.PutSubscription(ctx, "a", "s1", []byte("s1")) },
				func() error { return s.PutTopic(ctx, "b", []byte("b")) },
			} {
				if err := step(); err != nil {
					t.Fatal(err)
				}
			}
			s.DamageDefinition(t, dir, tc.topic, tc.sub)

			// The delete's log write fails: its batch is not on disk, and the store fails.
			failWrites.Store(true)
			if err := tc.del(ctx, s); !errors.Is(err, disk.ErrFailed) {
				t.Fatalf("delete = %v, want ErrFailed", err)
			}
			failWrites.Store(false)
			room.Store(true)
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := s.WaitFailed(wctx, false); err != nil {
				t.Fatalf("the store did not reopen itself past the damaged definition: %v\nlogs:\n%s", err, logs.String())
			}
			if h := s.Health(); h.State != store.Healthy || h.Recoveries != 1 {
				t.Errorf("Health = %+v; want Healthy after 1 recovery", h)
			}
			if !tc.listed(ctx, s) {
				t.Errorf("%s/%s is not served after the reopening; want it kept (its delete failed)", tc.topic, tc.sub)
			}
			if err := s.PutTopic(ctx, "c", []byte("c")); err != nil {
				t.Errorf("PutTopic after the reopening: %v; want writes taken again", err)
			}
			l := logs.String()
			if n := strings.Count(l, `level=ERROR msg="disk store:`); n != 2 || // the failed write, and the block
				strings.Count(l, `level=ERROR msg="disk store: reopening after a failed write could not read whether a failed delete reached the disk`) != 1 ||
				!strings.Contains(l, "delete it again") || !strings.Contains(l, "egrid store check") {
				t.Errorf("%d ERRORs; want 1 about the failed write and 1 about the damaged definition, saying what to do; logs:\n%s", n, l)
			}
			if mu.Lock(); counts[disk.DamageTable] != 1 || len(counts) != 1 {
				t.Errorf("damage counted %v; want the block counted once", counts)
			}
			mu.Unlock()
			if err := tc.del(ctx, s); err != nil {
				t.Errorf("delete made again after the reopening: %v; want it done", err)
			}
		})
	}
}
