package actors

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/store"
)

// epochFailingStore fails every UpdateSubscription, naming the update's epoch.
type epochFailingStore struct{ store.Store }

func (epochFailingStore) UpdateSubscription(_ context.Context, _, _ string, u store.Update) error {
	return fmt.Errorf("disk gone at epoch %d", u.Epoch)
}

// A topic's state writer lives as long as the topic, and a subscription can fail a write in
// each of many lives (deleted and created again under its name, or under other names): it
// keeps the failure of each name's latest epoch only, while that epoch's actor can ask for
// it, and none of a name once it is forgotten for the subscription's deletion. Close still
// returns the first failure. Before, every failed epoch stayed for the writer's life.
func TestStateWriterForgetsFailuresNothingAsksFor(t *testing.T) {
	w := NewStateWriter(epochFailingStore{store.NewMemory()}, "orders")
	fail := func(sub string, epoch uint64) {
		t.Helper()
		if err := w.Enqueue(sub, store.Update{Epoch: epoch, Cursor: 1}, nil); err != nil {
			t.Fatalf("Enqueue of %s epoch %d before its write failed: %v", sub, epoch, err)
		}
		if err := w.Flush(sub, epoch); err == nil {
			t.Fatalf("Flush of %s epoch %d: nil, want its failure", sub, epoch)
		}
	}
	failures := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.failed)
	}
	const lives = 100
	for epoch := uint64(1); epoch <= lives; epoch++ {
		fail("a", epoch)
	}
	fail("b", 7)
	if n := failures(); n != 2 {
		t.Errorf("%d failures kept after %d failed epochs of a and one of b, want 2: the latest epoch of each", n, lives)
	}
	if err := w.Enqueue("a", store.Update{Epoch: lives, Cursor: 2}, nil); err == nil {
		t.Error("Enqueue of a's latest failed epoch: nil, want its failure: its actor must crash")
	}
	if err := w.Flush("b", 7); err == nil {
		t.Error("Flush of b's failed epoch: nil, want its failure")
	}
	w.Forget("a")
	if n := failures(); n != 1 {
		t.Errorf("%d failures kept after a was forgotten, want b's only", n)
	}
	if err := w.Flush("b", 7); err == nil {
		t.Error("Flush of b's failed epoch after a was forgotten: nil, want its failure")
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "epoch 1") {
		t.Errorf("Close = %v, want the first failure (a's epoch 1)", err)
	}
}
