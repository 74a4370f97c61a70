package jetstream_test

import (
	"errors"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
)

// A node that lost a subscription to another can still have a delivery history queued; its
// write must not replace the history the new owner wrote since (the router reads a history,
// adds a step and writes it whole, so the old owner's write would show an event it delivered
// no more, or its latest attempt gone). The old owner's write fails with ErrFenced and leaves
// the new owner's history; the owner's own writes go on replacing its histories.
func TestPutHistoryOfAStaleOwnerIsFenced(t *testing.T) {
	ctx := t.Context()
	nc, p := connect(t), newPrefix(t)
	a, b := open(t, nc, p), open(t, nc, p)
	defer a.Close()
	defer b.Close()
	if err := a.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.PutSubscription(ctx, "t", "sub", nil); err != nil {
		t.Fatal(err)
	}
	st, err := a.LoadSubscription(ctx, "t", "sub")
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Hour)
	put := func(s store.Store, payload string) error {
		return s.PutHistory(ctx, "t", "sub", st.Epoch, []store.HistoryRecord{{EventID: "e1", Expires: expires, Payload: []byte(payload)}})
	}
	if err := put(a, "attempt 1 by a"); err != nil {
		t.Fatalf("first owner's history: %v", err)
	}
	if err := a.UpdateSubscription(ctx, "t", "sub", store.Update{Epoch: st.Epoch, Cursor: 1}); err != nil {
		t.Fatal(err)
	}
	if err := put(a, "attempts 1-2 by a"); err != nil {
		t.Fatalf("first owner's history written again: %v", err)
	}
	// b takes the subscription over: it loads, writes its state and a history.
	if _, err := b.LoadSubscription(ctx, "t", "sub"); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdateSubscription(ctx, "t", "sub", store.Update{Epoch: st.Epoch, Cursor: 2}); err != nil {
		t.Fatal(err)
	}
	if err := put(b, "attempts 1-3 by b, delivered"); err != nil {
		t.Fatalf("new owner's history: %v", err)
	}
	if err := put(a, "attempts 1-3 by a, retrying"); !errors.Is(err, store.ErrFenced) {
		t.Errorf("stale owner's history = %v, want ErrFenced", err)
	}
	got, err := b.History(ctx, "t", "sub", "e1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Payload) != "attempts 1-3 by b, delivered" {
		t.Errorf("history after the stale owner's write = %q, want the new owner's", got.Payload)
	}
	if err := put(b, "attempts 1-4 by b"); err != nil {
		t.Errorf("new owner's history written again: %v", err)
	}
}
