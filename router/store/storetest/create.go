package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/egridio/egrid/router/store"
)

// racers is how many creates of one name the create tests run at once.
const racers = 8

// race runs create(i) for each of racers at once and returns the one that succeeded; every
// other must have failed with store.ErrExists.
func race(t *testing.T, what string, create func(i int) error) int {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() { errs[i] = create(i) })
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("%s: racers %d and %d both created it; want exactly one", what, winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrExists):
			t.Errorf("%s: racer %d: %v, want nil or an error matching store.ErrExists", what, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("%s: none of the racers created it; want exactly one", what)
	}
	return winner
}

// CreateTopic and CreateSubscription create a name that holds nothing, as PutTopic and
// PutSubscription do, and write nothing for a name that holds a definition: they fail with
// store.ErrExists and the definition stored first stands, with its state. Of several
// creates of one name at once exactly one wins. A name deleted can be created again.
func testCreates(t *testing.T, s store.Store) {
	ctx := t.Context()
	topics := func(what string, want ...store.Definition) {
		t.Helper()
		got, err := s.Topics(ctx)
		if err != nil {
			t.Fatalf("%s: Topics: %v", what, err)
		}
		checkDefs(t, what, got, want)
	}
	subs := func(what string, want ...store.Definition) {
		t.Helper()
		got, err := s.Subscriptions(ctx, "t")
		if err != nil {
			t.Fatalf("%s: Subscriptions: %v", what, err)
		}
		checkDefs(t, what, got, want)
	}

	spec := []byte("t1")
	if err := s.CreateTopic(ctx, "t", spec); err != nil {
		t.Fatalf("CreateTopic of a new name: %v", err)
	}
	spec[0] = 'X' // the store must have copied it
	appendOK(t, s, "t", t0, events("t", 0, 3))
	if err := s.CreateTopic(ctx, "t", []byte("t2")); !errors.Is(err, store.ErrExists) {
		t.Errorf("CreateTopic of a name that holds a topic: %v, want an error matching store.ErrExists", err)
	}
	topics("after a second create of the topic", def("t", "t1"))
	if got := lastSeq(t, s, "t"); got != 3 {
		t.Errorf("LastSeq after a second create of the topic = %d, want 3 (kept)", got)
	}

	if err := s.CreateSubscription(ctx, "t", "sub", []byte("s1")); err != nil {
		t.Fatalf("CreateSubscription of a new name: %v", err)
	}
	first := load(t, s, "t", "sub")
	if first.Epoch == 0 || first.Cursor != 3 {
		t.Errorf("a created subscription: epoch %d, cursor %d; want a non-zero epoch and the cursor at LastSeq 3", first.Epoch, first.Cursor)
	}
	appendOK(t, s, "t", t0, events("t", 3, 2))
	update(t, s, "t", "sub", store.Update{Cursor: 4, Put: []store.Parked{parked(4, 1)}})
	if err := s.CreateSubscription(ctx, "t", "sub", []byte("s2")); !errors.Is(err, store.ErrExists) {
		t.Errorf("CreateSubscription of a name that holds a subscription: %v, want an error matching store.ErrExists", err)
	}
	subs("after a second create of the subscription", def("sub", "s1"))
	got := load(t, s, "t", "sub")
	checkState(t, "state after a second create", got, store.SubscriptionState{Cursor: 4, Parked: []store.Parked{parked(4, 1)}})
	if got.Epoch != first.Epoch {
		t.Errorf("epoch after a second create = %d, want %d (kept)", got.Epoch, first.Epoch)
	}
	checkNotFound(t, "CreateSubscription on an unknown topic", s.CreateSubscription(ctx, "ghost", "sub", []byte("x")))

	// Several writers (router nodes) create one name at once.
	w := race(t, "creates of one topic", func(i int) error { return s.CreateTopic(ctx, "raced", fmt.Appendf(nil, "racer-%d", i)) })
	topics("after the topic creates' race", def("raced", fmt.Sprintf("racer-%d", w)), def("t", "t1"))
	w = race(t, "creates of one subscription", func(i int) error {
		return s.CreateSubscription(ctx, "t", "raced", fmt.Appendf(nil, "racer-%d", i))
	})
	subs("after the subscription creates' race", def("raced", fmt.Sprintf("racer-%d", w)), def("sub", "s1"))

	// A name deleted holds nothing: it can be created again, a subscription with a new epoch.
	if err := s.DeleteSubscription(ctx, "t", "sub"); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	if err := s.CreateSubscription(ctx, "t", "sub", []byte("s3")); err != nil {
		t.Fatalf("CreateSubscription of a deleted subscription's name: %v", err)
	}
	if again := load(t, s, "t", "sub"); again.Epoch == first.Epoch || again.Cursor != 5 || len(again.Parked) != 0 {
		t.Errorf("a subscription created again: epoch %d (was %d), cursor %d, %d parked; want a new epoch, the cursor at LastSeq 5, nothing parked", again.Epoch, first.Epoch, again.Cursor, len(again.Parked))
	}
	if err := s.DeleteTopic(ctx, "raced"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if err := s.CreateTopic(ctx, "raced", []byte("again")); err != nil {
		t.Fatalf("CreateTopic of a deleted topic's name: %v", err)
	}
	topics("after the topic was created again", def("raced", "again"), def("t", "t1"))
}
