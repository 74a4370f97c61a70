package disk_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// A crash (simulated by pebble's crashable in-memory file system, which keeps what was synced
// and a random part of what was not) never loses an acknowledged Append, and loses only a
// tail of the unsynced subscription updates: the state after reopening is the state after
// some prefix of them, at least up to the last synced write (SPEC §6).
func TestCrash(t *testing.T) {
	const beforeSync, afterSync = 10, 100
	tests := []struct {
		name     string
		unsynced int // percent of unsynced data the crash keeps
		seed     uint64
	}{
		{name: "only synced data survives", unsynced: 0},
		{name: "half the unsynced blocks survive", unsynced: 50, seed: 1},
		{name: "half the unsynced blocks survive, another draw", unsynced: 50, seed: 2},
		{name: "all written data survives", unsynced: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			fs := vfs.NewCrashableMem()
			s, err := disk.OpenFS("db", disk.Options{}, fs)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if err := s.PutTopic(ctx, "t", nil); err != nil {
				t.Fatalf("PutTopic: %v", err)
			}
			if err := s.PutSubscription(ctx, "t", "sub", nil); err != nil {
				t.Fatalf("PutSubscription: %v", err)
			}
			// Update i sets the cursor to i and leaves exactly event i parked.
			updateTo := func(i uint64) {
				t.Helper()
				u := store.Update{Cursor: i, Put: []store.Parked{{Seq: i, Attempts: int(i), Event: testEvent(fmt.Sprint(i))}}, Delete: []uint64{i - 1}}
				if err := s.UpdateSubscription(ctx, "t", "sub", u); err != nil {
					t.Fatalf("UpdateSubscription: %v", err)
				}
			}
			for i := uint64(1); i <= beforeSync; i++ {
				updateTo(i)
			}
			acked := []*schemas.Event{testEvent("a1"), testEvent("a2")}
			if _, err := s.Append(ctx, "t", publishTime, acked); err != nil {
				t.Fatalf("Append: %v", err)
			}
			for i := uint64(beforeSync + 1); i <= beforeSync+afterSync; i++ {
				updateTo(i)
			}

			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: tc.unsynced, RNG: rand.New(rand.NewPCG(tc.seed, 0))})
			r, err := disk.OpenFS("db", disk.Options{}, crashed)
			if err != nil {
				t.Fatalf("Open after the crash: %v", err)
			}
			t.Cleanup(func() { _ = r.Close() })

			got, err := r.Read(ctx, "t", 0, 10)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 2 || got[0].Event.ID != "a1" || got[1].Event.ID != "a2" {
				t.Errorf("journal after the crash = %+v, want the acknowledged a1, a2 as 1, 2", got)
			}
			st, err := r.LoadSubscription(ctx, "t", "sub")
			if err != nil {
				t.Fatalf("LoadSubscription: %v", err)
			}
			k := st.Cursor
			t.Logf("cursor after the crash: %d", k)
			if k < beforeSync || k > beforeSync+afterSync {
				t.Fatalf("cursor after the crash = %d, want %d..%d (the synced Append came after update %d)",
					k, beforeSync, beforeSync+afterSync, beforeSync)
			}
			if tc.unsynced == 0 && k != beforeSync {
				t.Errorf("cursor after a crash keeping only synced data = %d, want %d", k, beforeSync)
			}
			if len(st.Parked) != 1 || st.Parked[0].Seq != k || st.Parked[0].Attempts != int(k) {
				t.Errorf("parked after the crash = %+v, want only %d: the state after update %d", st.Parked, k, k)
			}
			if last, err := r.Append(ctx, "t", publishTime, acked[:1]); err != nil || last != 3 {
				t.Errorf("Append after the crash = %d, %v; want 3, nil", last, err)
			}
		})
	}
}
