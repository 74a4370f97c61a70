package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
)

// RunReopen runs the durability suite on a store kept in a directory: everything written
// before Close is there after open is called again on the same dir, and the store carries on
// from where it was (sequence numbers continue, cursors keep moving forwards). open is called
// from parallel subtests, each with its own dir; the suite closes every store it gets.
func RunReopen(t *testing.T, open func(t *testing.T, dir string) store.Store) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, reopen func() store.Store)
	}{
		{"EverythingSurvives", testEverythingSurvives},
		{"TrimmedJournalKeepsNumbering", testReopenAfterTrim},
		{"DeletesSurvive", testReopenAfterDelete},
		{"ReopenCycles", testReopenCycles},
		{"EpochsSurvive", testReopenEpochs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			reopen := func() store.Store {
				t.Helper()
				s := open(t, dir)
				t.Cleanup(func() {
					if err := s.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				})
				return s
			}
			tc.run(t, reopen)
		})
	}
}

func closeStore(t *testing.T, s store.Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func testEverythingSurvives(t *testing.T, reopen func() store.Store) {
	ctx := t.Context()
	s := reopen()
	for _, name := range []string{"orders", "audit", "temp"} {
		putTopic(t, s, name)
	}
	if err := s.PutTopic(ctx, "audit", []byte("audit v2")); err != nil {
		t.Fatalf("PutTopic: %v", err)
	}
	putSub(t, s, "orders", "billing")
	appendOK(t, s, "orders", t0, events("orders", 0, 4))
	putSub(t, s, "orders", "shipping")
	putSub(t, s, "orders", "dropped")
	appendOK(t, s, "orders", t0.Add(time.Minute), events("orders", 4, 3))
	appendOK(t, s, "audit", t0.Add(time.Hour), events("audit", 0, 2))
	putSub(t, s, "audit", "billing")
	appendOK(t, s, "temp", t0, events("temp", 0, 1))
	if err := s.PutSubscription(ctx, "orders", "shipping", []byte("shipping v2")); err != nil {
		t.Fatalf("PutSubscription: %v", err)
	}
	// A run of small updates, as a subscription actor makes them: these need not be synced,
	// but a clean Close keeps every one.
	for seq := uint64(1); seq <= 7; seq++ {
		u := store.Update{Cursor: seq, Put: []store.Parked{parked(seq, int(seq))}}
		if seq%2 == 0 {
			u.Delete = []uint64{seq - 1}
		}
		update(t, s, "orders", "billing", u)
	}
	update(t, s, "orders", "shipping", store.Update{Cursor: 5, Put: []store.Parked{parked(5, 0)}, Probation: []byte("busy")})
	update(t, s, "orders", "billing", store.Update{Probation: []byte("not found")})
	update(t, s, "audit", "billing", store.Update{Cursor: 1, Probation: []byte("cleared below")})
	update(t, s, "audit", "billing", store.Update{Probation: []byte{}})
	update(t, s, "orders", "dropped", store.Update{Probation: []byte("deleted with its subscription")})
	if err := s.Trim(ctx, "orders", 3); err != nil {
		t.Fatalf("Trim: %v", err)
	}
	if err := s.DeleteSubscription(ctx, "orders", "dropped"); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	if err := s.DeleteTopic(ctx, "temp"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if err := s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "1", Payload: []byte("one")}, {ID: "2", Payload: []byte("two")}, {ID: "3", Payload: []byte("three")}}); err != nil {
		t.Fatalf("PutDeadLetters: %v", err)
	}
	if err := s.DeleteDeadLetters(ctx, []string{"2"}); err != nil {
		t.Fatalf("DeleteDeadLetters: %v", err)
	}
	before := takeSnapshot(ctx, t, s)
	closeStore(t, s)

	s = reopen()
	after := takeSnapshot(ctx, t, s)
	checkSnapshot(t, after, before)
	if got, want := deadLetters(t, s), "1=one;3=three;"; got != want {
		t.Errorf("dead-letter outbox after reopening = %q, want %q", got, want)
	}
	// Guard against a snapshot that compares nothing.
	if string(before.states["orders/shipping"].Probation) != "busy" || string(before.states["orders/billing"].Probation) != "not found" {
		t.Fatalf("probation before Close: %q, %q", before.states["orders/shipping"].Probation, before.states["orders/billing"].Probation)
	}
	if len(before.topics) != 2 || len(before.journal["orders"]) != 4 || len(before.states) != 3 {
		t.Fatalf("snapshot before Close has %d topics, %d orders entries, %d subscriptions; want 2, 4, 3",
			len(before.topics), len(before.journal["orders"]), len(before.states))
	}

	// The store carries on: numbering continues, a new subscription starts at LastSeq, a
	// cursor still never moves backwards.
	if got := appendOK(t, s, "orders", t0, events("orders", 7, 2)); got != 9 {
		t.Errorf("Append of 2 after reopening returned %d, want 9", got)
	}
	putSub(t, s, "orders", "late")
	checkState(t, "subscription created after reopening", load(t, s, "orders", "late"), store.SubscriptionState{Cursor: 9})
	update(t, s, "orders", "billing", store.Update{Cursor: 2})
	if got := load(t, s, "orders", "billing").Cursor; got != 7 {
		t.Errorf("cursor after a lower update = %d, want 7", got)
	}
	_, err := s.LoadSubscription(ctx, "orders", "dropped")
	checkNotFound(t, "LoadSubscription of a subscription deleted before reopening", err)
	putSub(t, s, "orders", "dropped")
	checkState(t, "subscription recreated after reopening", load(t, s, "orders", "dropped"), store.SubscriptionState{Cursor: 9})
}

// A journal trimmed to nothing keeps its numbering across a reopen: a store that derived
// LastSeq from the newest entry left would reuse numbers that subscriptions' cursors have
// already passed.
func testReopenAfterTrim(t *testing.T, reopen func() store.Store) {
	s := reopen()
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	appendOK(t, s, "t", t0, events("t", 0, 5))
	update(t, s, "t", "sub", store.Update{Cursor: 5})
	// A lower Trim afterwards changes nothing.
	for _, through := range []uint64{5, 2} {
		if err := s.Trim(t.Context(), "t", through); err != nil {
			t.Fatalf("Trim(%d): %v", through, err)
		}
	}
	closeStore(t, s)

	s = reopen()
	if got := lastSeq(t, s, "t"); got != 5 {
		t.Errorf("LastSeq after trimming everything and reopening = %d, want 5", got)
	}
	evs := events("t", 5, 1)
	if got := appendOK(t, s, "t", t0, evs); got != 6 {
		t.Errorf("Append after trimming everything and reopening returned %d, want 6", got)
	}
	checkEntries(t, "journal", read(t, s, "t", 0, 100), entries(6, t0, evs))
}

// Deleted topics and subscriptions stay deleted, and a topic deleted and created again keeps
// only what came after.
func testReopenAfterDelete(t *testing.T, reopen func() store.Store) {
	ctx := t.Context()
	s := reopen()
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	appendOK(t, s, "t", t0, events("old", 0, 5))
	update(t, s, "t", "sub", store.Update{Cursor: 3, Put: []store.Parked{parked(2, 1)}})
	if err := s.DeleteTopic(ctx, "t"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	putTopic(t, s, "t")
	fresh := events("new", 0, 2)
	appendOK(t, s, "t", t0, fresh)
	putTopic(t, s, "gone")
	if err := s.DeleteTopic(ctx, "gone"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	closeStore(t, s)

	s = reopen()
	topics, err := s.Topics(ctx)
	if err != nil {
		t.Fatalf("Topics: %v", err)
	}
	checkDefs(t, "Topics after reopening", topics, []store.Definition{def("t", `{"name":"t"}`)})
	checkEntries(t, "journal of the re-created topic", read(t, s, "t", 0, 100), entries(1, t0, fresh))
	_, err = s.LoadSubscription(ctx, "t", "sub")
	checkNotFound(t, "LoadSubscription of a subscription of the deleted topic", err)
	putTopic(t, s, "gone")
	if got := appendOK(t, s, "gone", t0, events("gone", 0, 1)); got != 1 {
		t.Errorf("first Append to a topic deleted before reopening returned %d, want 1", got)
	}
}

// Several open/close cycles, each continuing where the last one stopped.
func testReopenCycles(t *testing.T, reopen func() store.Store) {
	var want []store.Entry
	for cycle := range 4 {
		s := reopen()
		if cycle == 0 {
			putTopic(t, s, "t")
			putSub(t, s, "t", "sub")
		}
		if got := lastSeq(t, s, "t"); got != uint64(len(want)) {
			t.Fatalf("cycle %d: LastSeq = %d, want %d", cycle, got, len(want))
		}
		evs := events("cycle", cycle*10, cycle+1)
		last := appendOK(t, s, "t", t0.Add(time.Duration(cycle)*time.Second), evs)
		want = append(want, entries(last-uint64(len(evs))+1, t0.Add(time.Duration(cycle)*time.Second), evs)...)
		if last != uint64(len(want)) {
			t.Errorf("cycle %d: Append returned %d, want %d", cycle, last, len(want))
		}
		update(t, s, "t", "sub", store.Update{Cursor: last})
		checkEntries(t, "journal", read(t, s, "t", 0, 100), want)
		checkState(t, "subscription", load(t, s, "t", "sub"), store.SubscriptionState{Cursor: last})
		closeStore(t, s)
	}
}

// A subscription keeps its epoch across a reopen, and one created again after a reopen does
// not get the epoch of the one deleted before it: an update of that epoch applies nothing.
func testReopenEpochs(t *testing.T, reopen func() store.Store) {
	ctx := t.Context()
	s := reopen()
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	putSub(t, s, "t", "kept")
	deleted, kept := load(t, s, "t", "sub").Epoch, load(t, s, "t", "kept").Epoch
	if err := s.DeleteSubscription(ctx, "t", "sub"); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	closeStore(t, s)

	s = reopen()
	if got := load(t, s, "t", "kept").Epoch; got != kept {
		t.Errorf("epoch after reopening = %d, want %d", got, kept)
	}
	putSub(t, s, "t", "sub")
	again := load(t, s, "t", "sub").Epoch
	if again == 0 || again == deleted {
		t.Fatalf("epoch of the subscription created again after reopening = %d, want a new non-zero one (the deleted one's was %d)", again, deleted)
	}
	err := s.UpdateSubscription(ctx, "t", "sub", store.Update{Epoch: deleted, Cursor: 5, Put: []store.Parked{parked(1, 1)}})
	if !errors.Is(err, store.ErrStaleEpoch) {
		t.Errorf("update of the epoch deleted before reopening: %v, want ErrStaleEpoch", err)
	}
	update(t, s, "t", "kept", store.Update{Epoch: kept, Put: []store.Parked{parked(1, 1)}})
	closeStore(t, s)

	s = reopen()
	checkState(t, "the subscription created again, reopened", load(t, s, "t", "sub"), store.SubscriptionState{})
	checkState(t, "the kept subscription, reopened", load(t, s, "t", "kept"), store.SubscriptionState{Parked: []store.Parked{parked(1, 1)}})
	if got := load(t, s, "t", "sub").Epoch; got != again {
		t.Errorf("epoch of the subscription created again, reopened = %d, want %d", got, again)
	}
}
