package jetstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/internal/bucketkeys"
)

// stallRounds bounds the races of TestListingRacingAPurgeDoesNotStall: each round is one
// listing against one subscription's delete, on two stores (two nodes) of one server.
const stallRounds = 200

// TestListingRacingAPurgeDoesNotStall: one node lists a topic's subscriptions while another
// deletes one of them, whose record (and the delete's marker) is purged from the bucket's
// stream. A purge of a key the listing's watch counted as pending and had not delivered yet
// leaves the watch waiting for it, with no end-of-listing marker to come; the listing still
// ends, long before its deadline, and without the deleted subscription or with it (deleted
// after the listing read it), never failing.
func TestListingRacingAPurgeDoesNotStall(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	other, err := Open(ctx, s.nc, Options{Prefix: "HOLES"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	const kept = 40 // the records a listing delivers before the newest, the deleted one
	for i := range kept {
		if err := s.PutSubscription(ctx, "orders", fmt.Sprintf("kept%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	// delay holds a side back by n round trips to the server, shifting the delete against the
	// listing round by round.
	delay := func(n int) error {
		for range n {
			if err := s.nc.Flush(); err != nil {
				return err
			}
		}
		return nil
	}
	stalled := 0
	for i := range stallRounds {
		name := fmt.Sprintf("gone%d", i)
		if err := other.CreateSubscription(ctx, "orders", name, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		var n int
		delErr, listErr := raceOrphan(
			func() error {
				if err := delay(i % 6); err != nil {
					return err
				}
				return other.DeleteSubscription(ctx, "orders", name)
			},
			func() error {
				if err := delay(i / 6 % 3); err != nil {
					return err
				}
				// A deadline far shorter than the store's own (10s) and far longer than a
				// listing of a few dozen records takes.
				lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				subs, err := s.Subscriptions(lctx, "orders")
				n = len(subs)
				return err
			},
		)
		if delErr != nil {
			t.Fatalf("round %d: DeleteSubscription: %v", i, delErr)
		}
		switch {
		case errors.Is(listErr, context.DeadlineExceeded):
			stalled++
		case listErr != nil:
			t.Fatalf("round %d: Subscriptions: %v", i, listErr)
		case n != kept && n != kept+1:
			t.Fatalf("round %d: Subscriptions listed %d, want %d or %d", i, n, kept, kept+1)
		}
		if stalled > 0 {
			t.Fatalf("round %d: a listing racing a delete did not end before its deadline (the watch waiting for a purged record): %v", i, listErr)
		}
	}
}

// TestWatchThatStallsEndsTheWait checks, in virtual time, the wait on a watch whose end marker
// never comes (a key it counted purged before delivery): it ends bucketkeys.WatchIdle after the last
// value delivered, each value starting the wait again, and returns what was delivered, the
// listing reading the rest with gets.
func TestWatchThatStallsEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &fakeWatcher{updates: make(chan jetstream.KeyValueEntry, 2)}
		w.updates <- fakeEntry{key: "sub.t.a", val: "a1", op: jetstream.KeyValuePut}
		late := time.AfterFunc(bucketkeys.WatchIdle-time.Millisecond, func() {
			w.updates <- fakeEntry{key: "sub.t.b", val: "b1", op: jetstream.KeyValuePut}
		})
		defer late.Stop()
		start := time.Now()
		entries, err := watched(t.Context(), w)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Sorted(maps.Keys(entries)); !slices.Equal(got, []string{"sub.t.a", "sub.t.b"}) {
			t.Errorf("watched returned %v, want [sub.t.a sub.t.b] (b came within bucketkeys.WatchIdle of a)", got)
		}
		if waited, want := time.Since(start), 2*bucketkeys.WatchIdle-time.Millisecond; waited != want {
			t.Errorf("watched waited %v (virtual), want %v: bucketkeys.WatchIdle after the last value", waited, want)
		}
	})
}
