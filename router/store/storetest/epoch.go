package storetest

import (
	"errors"
	"testing"

	"github.com/egridio/egrid/router/store"
)

// A subscription's epoch is non-zero, kept while its definition is replaced and across
// updates, and new when the subscription is deleted and created again under its name (also
// under a topic deleted and created again). An update of an earlier epoch fails with
// store.ErrStaleEpoch, which matches store.ErrNotFound, and applies nothing: no cursor, no
// parked event, no probation state, no dead letter. An update of the current epoch, or of
// epoch zero, applies. A subscription listed by Subscriptions carries its epoch as its Life,
// or no Life (zero) on a store that does not tell.
func testSubscriptionEpochs(t *testing.T, s store.Store) {
	ctx := t.Context()
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	first := load(t, s, "t", "sub").Epoch
	if first == 0 {
		t.Fatal("a new subscription's epoch is 0")
	}
	checkLife(t, s, "a new subscription", first)
	if err := s.PutSubscription(ctx, "t", "sub", []byte("new spec")); err != nil {
		t.Fatalf("PutSubscription on an existing subscription: %v", err)
	}
	if got := load(t, s, "t", "sub").Epoch; got != first {
		t.Errorf("epoch after replacing the spec = %d, want %d", got, first)
	}
	appendOK(t, s, "t", t0, events("t", 0, 3))
	update(t, s, "t", "sub", store.Update{Epoch: first, Cursor: 2, Put: []store.Parked{parked(1, 1)}})
	checkState(t, "after an update of the current epoch", load(t, s, "t", "sub"),
		store.SubscriptionState{Cursor: 2, Parked: []store.Parked{parked(1, 1)}})
	if idx, err := s.LoadSubscriptionIndex(ctx, "t", "sub"); err != nil || idx.Epoch != first {
		t.Errorf("LoadSubscriptionIndex epoch = %d, %v; want %d", idx.Epoch, err, first)
	}

	if err := s.DeleteSubscription(ctx, "t", "sub"); err != nil {
		t.Fatalf("DeleteSubscription: %v", err)
	}
	putSub(t, s, "t", "sub")
	second := load(t, s, "t", "sub").Epoch
	if second == 0 || second == first {
		t.Fatalf("epoch of the subscription created again = %d, want a new non-zero one (the deleted one's was %d)", second, first)
	}
	checkLife(t, s, "the subscription created again", second)
	stale := store.Update{
		Epoch: first, Cursor: 9, Put: []store.Parked{parked(2, 3)}, Probation: []byte("busy"),
		DeadLetters: []store.DeadLetterRecord{{ID: "stale", Payload: []byte("e2")}}, Sync: true,
	}
	err := s.UpdateSubscription(ctx, "t", "sub", stale)
	if !errors.Is(err, store.ErrStaleEpoch) || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("update of the deleted subscription's epoch: %v, want an error matching ErrStaleEpoch and ErrNotFound", err)
	}
	checkState(t, "the subscription created again after a stale update", load(t, s, "t", "sub"), store.SubscriptionState{Cursor: 3})
	if got := cursors(t, s, "t")["sub"]; got != 3 {
		t.Errorf("Cursors after a stale update = %d, want 3", got)
	}
	if got := deadLetters(t, s); got != "" {
		t.Errorf("outbox after a stale update = %q, want it empty", got)
	}

	update(t, s, "t", "sub", store.Update{Epoch: second, Cursor: 3, Put: []store.Parked{parked(3, 1)}})
	update(t, s, "t", "sub", store.Update{Delete: []uint64{3}}) // epoch 0: unchecked
	checkState(t, "after updates of the current epoch and of epoch 0", load(t, s, "t", "sub"), store.SubscriptionState{Cursor: 3})

	if err := s.DeleteTopic(ctx, "t"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	putTopic(t, s, "t")
	putSub(t, s, "t", "sub")
	third := load(t, s, "t", "sub").Epoch
	if third == 0 || third == first || third == second {
		t.Fatalf("epoch of the subscription created again under a topic created again = %d, want a new non-zero one (earlier: %d, %d)", third, first, second)
	}
	checkLife(t, s, "the subscription created again under a topic created again", third)
	err = s.UpdateSubscription(ctx, "t", "sub", store.Update{Epoch: second, Put: []store.Parked{parked(1, 1)}})
	if !errors.Is(err, store.ErrStaleEpoch) {
		t.Errorf("update of the epoch before the topic was deleted: %v, want ErrStaleEpoch", err)
	}
	checkState(t, "the subscription of the topic created again after a stale update", load(t, s, "t", "sub"), store.SubscriptionState{})
}

// checkLife checks that Subscriptions lists subscription "sub" of topic "t" with Life epoch,
// or with none (0).
func checkLife(t *testing.T, s store.Store, what string, epoch uint64) {
	t.Helper()
	defs, err := s.Subscriptions(t.Context(), "t")
	if err != nil {
		t.Fatalf("Subscriptions: %v", err)
	}
	for _, d := range defs {
		if d.Name == "sub" {
			if d.Life != 0 && d.Life != epoch {
				t.Errorf("%s: listed with Life %d, want its epoch %d (or 0)", what, d.Life, epoch)
			}
			return
		}
	}
	t.Errorf("%s: not listed by Subscriptions", what)
}
