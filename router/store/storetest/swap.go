package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/egridio/egrid/router/store"
)

// SwapSubscription replaces a subscription's definition only when the stored one is the one
// given: otherwise it writes nothing and fails with store.ErrChanged. A successful swap keeps
// the state and the epoch, as PutSubscription does, and a state write since the definition
// was read does not fail it. Of several swaps from one definition at once exactly one wins.
// An unknown topic or subscription, or one deleted, is store.ErrNotFound.
func testSwapSubscription(t *testing.T, s store.Store) {
	ctx := t.Context()
	putTopic(t, s, "t")
	if err := s.PutSubscription(ctx, "t", "sub", []byte("v1")); err != nil {
		t.Fatalf("PutSubscription: %v", err)
	}
	appendOK(t, s, "t", t0, events("t", 0, 4))
	state := store.SubscriptionState{Cursor: 3, Parked: []store.Parked{parked(2, 1)}, Probation: []byte("busy")}
	update(t, s, "t", "sub", store.Update{Cursor: 3, Put: state.Parked, Probation: state.Probation})
	epoch := load(t, s, "t", "sub").Epoch
	subs := func(what, want string) {
		t.Helper()
		got, err := s.Subscriptions(ctx, "t")
		if err != nil {
			t.Fatalf("%s: Subscriptions: %v", what, err)
		}
		checkDefs(t, what, got, []store.Definition{def("sub", want)})
	}

	err := s.SwapSubscription(ctx, "t", "sub", []byte("v0"), []byte("v2"))
	if !errors.Is(err, store.ErrChanged) {
		t.Errorf("swap from a definition that is not the stored one: %v, want an error matching store.ErrChanged", err)
	}
	subs("after a swap from another definition", "v1")

	spec := []byte("v2")
	if err := s.SwapSubscription(ctx, "t", "sub", []byte("v1"), spec); err != nil {
		t.Fatalf("swap from the stored definition: %v", err)
	}
	spec[0] = 'X' // the store must have copied it
	subs("after a swap from the stored definition", "v2")
	got := load(t, s, "t", "sub")
	checkState(t, "state after a swap", got, state)
	if got.Epoch != epoch {
		t.Errorf("epoch after a swap = %d, want %d (kept)", got.Epoch, epoch)
	}
	if err := s.SwapSubscription(ctx, "t", "sub", []byte("v1"), []byte("v3")); !errors.Is(err, store.ErrChanged) {
		t.Errorf("a second swap from the definition the first replaced: %v, want an error matching store.ErrChanged", err)
	}
	subs("after a second swap from the replaced definition", "v2")

	// A state write since the definition was read is no change to the definition.
	update(t, s, "t", "sub", store.Update{Cursor: 4})
	if err := s.SwapSubscription(ctx, "t", "sub", []byte("v2"), []byte("v3")); err != nil {
		t.Fatalf("swap after a state write: %v", err)
	}
	subs("after a swap following a state write", "v3")
	state.Cursor = 4
	checkState(t, "state after a swap following a state write", load(t, s, "t", "sub"), state)

	const racers = 8
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() { errs[i] = s.SwapSubscription(ctx, "t", "sub", []byte("v3"), fmt.Appendf(nil, "racer-%d", i)) })
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("racers %d and %d both swapped from v3; want exactly one", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrChanged):
			t.Errorf("racer %d: %v, want nil or an error matching store.ErrChanged", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("none of the racers swapped from v3; want exactly one")
	}
	subs("after the race", fmt.Sprintf("racer-%d", winner))

	checkNotFound(t, "SwapSubscription on an unknown topic", s.SwapSubscription(ctx, "ghost", "sub", nil, []byte("x")))
	checkNotFound(t, "SwapSubscription of an unknown subscription", s.SwapSubscription(ctx, "t", "ghost", nil, []byte("x")))
	if err := s.DeleteSubscription(ctx, "t", "sub"); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	checkNotFound(t, "SwapSubscription of a deleted subscription", s.SwapSubscription(ctx, "t", "sub", []byte(fmt.Sprintf("racer-%d", winner)), []byte("x")))
	if got, err := s.Subscriptions(ctx, "t"); err != nil || len(got) != 0 {
		t.Errorf("Subscriptions after a swap of a deleted subscription: %v, %v; want none", got, err)
	}
}
