package disk_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// TestWritesKeptWhileFailedAreMerged makes thousands of state writes of two subscriptions,
// interleaved, while the store is failed, as deliveries from the journal go on during a
// full-disk wait: the store keeps one write per subscription (it kept every one, some 300
// bytes each, for as long as the disk stayed full), and what it reads back meanwhile and
// writes once it has reopened itself is what the writes in order leave: the highest cursor,
// each parked event's last put or delete, the last probation, every dead letter.
func TestWritesKeptWhileFailedAreMerged(t *testing.T) {
	ctx := t.Context()
	var failing, full atomic.Bool
	fs := logFS{vfs.NewMem(), func(string) error {
		if failing.Load() {
			return errInjected
		}
		return nil
	}}
	opts := disk.Options{RecoverInterval: time.Millisecond}
	disk.SetFreeBytes(&opts, func(string) (uint64, error) {
		if full.Load() {
			return 0, nil
		}
		return 1 << 30, nil
	})
	s, err := disk.OpenFS("db", opts, fs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	subs := []string{"a", "b"}
	for _, sub := range subs {
		if err := s.PutSubscription(ctx, "t", sub, nil); err != nil {
			t.Fatal(err)
		}
		// Stored before the failure: parked 1 and 2; 1 is deleted while failed.
		if err := s.UpdateSubscription(ctx, "t", sub, store.Update{Put: []store.Parked{parkedEvent(1), parkedEvent(2)}}); err != nil {
			t.Fatal(err)
		}
	}
	full.Store(true)
	failing.Store(true)
	if _, err := s.Append(ctx, "t", publishTime, []*schemas.Event{testEvent("x")}); !errors.Is(err, disk.ErrFailed) {
		t.Fatalf("Append: %v; want the store failed", err)
	}
	failing.Store(false) // it waits for free space now

	const n = 5000
	for i := range n {
		for _, sub := range subs {
			u := store.Update{Cursor: uint64(i + 1)}
			seq := uint64(100 + i%50) // parked, settled and parked again
			if i%2 == 0 {
				u.Put = []store.Parked{parkedEvent(seq)}
			} else {
				u.Delete = []uint64{seq}
			}
			if i == 0 {
				u.Delete = append(u.Delete, 1)
			}
			if i%1000 == 0 {
				u.DeadLetters = []store.DeadLetterRecord{{ID: fmt.Sprint(sub, i), Payload: []byte("dead")}}
				u.Probation = []byte(fmt.Sprint(i))
			}
			if err := s.UpdateSubscription(ctx, "t", sub, u); err != nil {
				t.Fatalf("update %d of %s: %v", i, sub, err)
			}
		}
	}
	if got := s.PendingWrites(); got != len(subs) {
		t.Fatalf("%d writes kept in memory after %d, want one per subscription (%d)", got, n*len(subs), len(subs))
	}
	// i%50 from 0 to 49 for the last 50 updates: seqs of even i (puts) stay parked.
	want := []uint64{2}
	for i := n - 50; i < n; i++ {
		if i%2 == 0 {
			want = append(want, uint64(100+i%50))
		}
	}
	slices.Sort(want)
	check := func(when string) {
		t.Helper()
		for _, sub := range subs {
			st, err := s.LoadSubscription(ctx, "t", sub)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for _, p := range st.Parked {
				got = append(got, p.Seq)
			}
			if st.Cursor != n || !slices.Equal(got, want) || string(st.Probation) != "4000" {
				t.Fatalf("%s: %s has cursor %d, parked %v, probation %q; want %d, %v, 4000", when, sub, st.Cursor, got, st.Probation, n, want)
			}
		}
		var dead []string
		if err := s.ScanDeadLetters(ctx, func(r store.DeadLetterRecord) error { dead = append(dead, r.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(dead) != 2*n/1000 {
			t.Fatalf("%s: dead letters %v; want %d", when, dead, 2*n/1000)
		}
	}
	check("while failed")

	full.Store(false)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.WaitFailed(wctx, false); err != nil {
		t.Fatal(err)
	}
	if got := s.PendingWrites(); got != 0 {
		t.Fatalf("%d writes still kept after the store reopened itself", got)
	}
	check("after the store reopened itself")
}

func parkedEvent(seq uint64) store.Parked {
	return store.Parked{Seq: seq, PublishTime: publishTime, Event: testEvent(fmt.Sprint("p", seq)), Attempts: 1, NextDue: publishTime.Add(time.Minute)}
}
