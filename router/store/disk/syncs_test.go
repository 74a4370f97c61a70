package disk_test

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// TestLogSyncsSeeAStalledDisk: the store reports its log syncs as pebble timed them, so a
// disk that holds a sync back shows in them. The log file system holds every fourth sync
// back by 30 ms of virtual time; the appends after the store opened then read as that many
// syncs over 5 ms, and the slowest as about 30 ms.
func TestLogSyncsSeeAStalledDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var syncs atomic.Int64
		var stall atomic.Bool
		fs := logFS{FS: vfs.Default, hook: func(op string) error {
			if op == "sync" && stall.Load() && syncs.Add(1)%4 == 0 {
				<-time.After(30 * time.Millisecond)
			}
			return nil
		}}
		s, err := disk.OpenFS(t.TempDir(), disk.Options{}, fs)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		if err := s.PutTopic(ctx, "orders", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		// Pebble times a sync after it has released the writes waiting for it: read once its
		// log's goroutine is waiting again.
		synctest.Wait()
		before := s.LogSyncs()
		if before.Count == 0 {
			t.Fatal("no log sync counted before the appends; the topic's definition was synced")
		}
		stall.Store(true)
		const appends = 40
		for i := range appends {
			if _, err := s.Append(ctx, "orders", publishTime, []*schemas.Event{testEvent(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		got := s.LogSyncs().Sub(before)
		if got.Count != appends {
			t.Fatalf("%d syncs counted for %d synced appends made one after another", got.Count, appends)
		}
		if n := got.Over(5 * time.Millisecond); n != uint64(syncs.Load()/4) {
			t.Errorf("%d syncs over 5 ms, want the %d held back", n, syncs.Load()/4)
		}
		if slowest := got.Quantile(1); slowest < 30*time.Millisecond || slowest > 36*time.Millisecond {
			t.Errorf("slowest sync in the bucket up to %v, want the one holding 30 ms", slowest)
		}
		if held := time.Duration(syncs.Load()/4) * 30 * time.Millisecond; got.Sum < held || got.Sum > held+30*time.Millisecond {
			t.Errorf("the syncs took %v together, want the %v held back and little more", got.Sum, held)
		}
		if p50 := got.Quantile(0.5); p50 > time.Millisecond {
			t.Errorf("median sync up to %v; only every fourth was held back", p50)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := s.LogSyncs(); got.Count != 0 {
			t.Errorf("a closed store reported %d syncs", got.Count)
		}
	})
}

func TestSyncTimesArithmetic(t *testing.T) {
	ms := time.Millisecond
	times := func(count uint64, cum ...uint64) disk.SyncTimes {
		bounds := []time.Duration{ms, 5 * ms, 20 * ms}
		st := disk.SyncTimes{Count: count}
		for i, c := range cum {
			st.Buckets = append(st.Buckets, disk.SyncBucket{UpperBound: bounds[i], Count: c})
		}
		return st
	}
	later, earlier := times(10, 6, 8, 9), times(4, 3, 4, 4)
	later.Sum, earlier.Sum = 900*ms, 100*ms
	d := later.Sub(earlier)
	if d.Count != 6 || d.Sum != 800*ms || d.Buckets[0].Count != 3 || d.Buckets[1].Count != 4 || d.Buckets[2].Count != 5 {
		t.Errorf("Sub: %+v", d)
	}
	if got := times(3, 1, 2).Sub(earlier); got.Count != 3 {
		t.Errorf("Sub of readings with different buckets: %+v, want the later reading", got)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, ms}, {0.6, ms}, {0.7, 5 * ms}, {0.9, 20 * ms}, {1, math.MaxInt64}} {
		if got := later.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := (disk.SyncTimes{}).Quantile(0.99); got != 0 {
		t.Errorf("Quantile of no syncs = %v", got)
	}
	for _, c := range []struct {
		d    time.Duration
		want uint64
	}{{0, 10}, {ms, 4}, {3 * ms, 4}, {5 * ms, 2}, {time.Second, 1}} {
		if got := later.Over(c.d); got != c.want {
			t.Errorf("Over(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}
