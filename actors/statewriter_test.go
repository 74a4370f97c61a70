package actors_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/store"
)

// failingStore fails every UpdateSubscription.
type failingStore struct{ store.Store }

func (failingStore) UpdateSubscription(context.Context, string, string, store.Update) error {
	return errors.New("disk gone")
}

func TestStateWriterKeepsTheOrderOfUpdates(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	if err := st.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"a", "b"} {
		if err := st.PutSubscription(ctx, "orders", sub, nil); err != nil {
			t.Fatal(err)
		}
	}
	w := actors.NewStateWriter(st, "orders")
	updates := []store.Update{
		{Cursor: 3, Put: []store.Parked{{Seq: 2, Attempts: 1}, {Seq: 3, Attempts: 1}}},
		{Cursor: 5, Delete: []uint64{2}},             // 2 delivered on its retry
		{Put: []store.Parked{{Seq: 3, Attempts: 2}}}, // 3 failed again
		{Cursor: 4}, // a lower cursor never moves it back
	}
	for _, u := range updates {
		if err := w.Enqueue("a", u, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Enqueue("b", store.Update{Cursor: 7}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush("a", 0); err != nil {
		t.Fatal(err)
	}
	got, err := st.LoadSubscription(ctx, "orders", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Cursor != 5 || len(got.Parked) != 1 || got.Parked[0].Seq != 3 || got.Parked[0].Attempts != 2 {
		t.Errorf("state of a = %+v, want cursor 5 and only seq 3 parked with 2 attempts", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got, _ := st.LoadSubscription(ctx, "orders", "b"); got.Cursor != 7 {
		t.Errorf("cursor of b = %d after Close, want 7: Close must write what is queued", got.Cursor)
	}
	if err := w.Enqueue("a", store.Update{Cursor: 9}, nil); err == nil {
		t.Error("Enqueue after Close succeeded")
	}
}

func TestStateWriterReportsAFailedWrite(t *testing.T) {
	w := actors.NewStateWriter(failingStore{store.NewMemory()}, "orders")
	defer w.Close()
	if err := w.Enqueue("a", store.Update{Cursor: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush("a", 0); err == nil {
		t.Fatal("Flush after a failed write returned nil")
	}
	if err := w.Enqueue("a", store.Update{Cursor: 2}, nil); err == nil {
		t.Fatal("Enqueue after a failed write returned nil: the actor must learn the store is gone")
	}
}

// heldStore holds its first UpdateSubscription until release is closed, so that the
// updates queued meanwhile are merged, and records every update it is asked to write.
type heldStore struct {
	store.Store
	entered, release chan struct{}
	first            bool
	writes           []store.Update
}

func (g *heldStore) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if !g.first {
		g.first = true
		close(g.entered)
		<-g.release
	}
	g.writes = append(g.writes, u)
	return g.Store.UpdateSubscription(ctx, topic, sub, u)
}

func TestStateWriterMergesProbation(t *testing.T) {
	tests := []struct {
		name   string
		queued [][]byte // Probation of the updates queued while the first write is held
		want   []byte   // stored probation afterwards
	}{
		{name: "last wins", queued: [][]byte{[]byte("busy"), nil, []byte("not found"), nil}, want: []byte("not found")},
		{name: "clear wins", queued: [][]byte{[]byte("busy"), []byte{}, nil}, want: nil},
		{name: "set after clear", queued: [][]byte{[]byte{}, []byte("busy")}, want: []byte("busy")},
		{name: "unchanged", queued: [][]byte{nil, nil}, want: []byte("first")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			mem := memoryWithSubscription(t)
			g := &heldStore{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
			w := actors.NewStateWriter(g, "orders")
			defer w.Close()
			if err := w.Enqueue("a", store.Update{Cursor: 1, Probation: []byte("first")}, nil); err != nil {
				t.Fatal(err)
			}
			<-g.entered
			for i, p := range tt.queued {
				if err := w.Enqueue("a", store.Update{Cursor: uint64(2 + i), Probation: p}, nil); err != nil {
					t.Fatal(err)
				}
			}
			close(g.release)
			if err := w.Flush("a", 0); err != nil {
				t.Fatal(err)
			}
			if len(g.writes) != 2 {
				t.Fatalf("%d writes, want 2: the updates queued behind the first are merged into one", len(g.writes))
			}
			got, err := mem.LoadSubscription(ctx, "orders", "a")
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Probation) != string(tt.want) || (got.Probation == nil) != (tt.want == nil) {
				t.Errorf("stored probation = %q, want %q", got.Probation, tt.want)
			}
			if want := uint64(1 + len(tt.queued)); got.Cursor != want {
				t.Errorf("cursor = %d, want %d", got.Cursor, want)
			}
		})
	}
}

// failFirstStore fails its first UpdateSubscription once release is closed, and passes the
// rest through.
type failFirstStore struct {
	store.Store
	entered, release chan struct{}
	first            bool
}

func (f *failFirstStore) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if !f.first {
		f.first = true
		close(f.entered)
		<-f.release
		return errors.New("server is disconnected")
	}
	return f.Store.UpdateSubscription(ctx, topic, sub, u)
}

// An update queued behind one that fails is not written: it changes a state the store does
// not have. Written, the later cursor without the events the failed update parked would
// skip them for good (lost in cluster mode when a NATS connection failed over between the
// two writes).
func TestStateWriterWritesNothingAfterAFailedWrite(t *testing.T) {
	ctx := context.Background()
	mem := memoryWithSubscription(t)
	st := &failFirstStore{Store: mem, entered: make(chan struct{}), release: make(chan struct{})}
	w := actors.NewStateWriter(st, "orders")
	defer w.Close()
	// Events 1-2 failed their attempt: parked, the cursor past them.
	if err := w.Enqueue("a", store.Update{Cursor: 2, Put: []store.Parked{{Seq: 1, Attempts: 1}, {Seq: 2, Attempts: 1}}}, nil); err != nil {
		t.Fatal(err)
	}
	<-st.entered
	// Events 3-4 delivered: the cursor moves on, while the first write is under way.
	if err := w.Enqueue("a", store.Update{Cursor: 4}, nil); err != nil {
		t.Fatal(err)
	}
	close(st.release)
	if err := w.Flush("a", 0); err == nil {
		t.Fatal("Flush after a failed write returned nil")
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close after a failed write returned nil")
	}
	got, err := mem.LoadSubscription(ctx, "orders", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got.Cursor != 0 || len(got.Parked) != 0 {
		t.Errorf("stored state %+v after the first write failed, want the state before it (cursor 0, nothing parked): the update behind it was written", got)
	}
}

// subHeldStore holds the first UpdateSubscription of subscription sub until release is
// closed, then fails it with fail, or passes it through when fail is nil; the writes of
// other subscriptions pass through.
type subHeldStore struct {
	store.Store
	sub              string
	fail             error
	entered, release chan struct{}
	held             bool
}

func (s *subHeldStore) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if sub == s.sub && !s.held {
		s.held = true
		close(s.entered)
		<-s.release
		if s.fail != nil {
			return s.fail
		}
	}
	return s.Store.UpdateSubscription(ctx, topic, sub, u)
}

// A failed state write is its subscription's own: the other subscriptions of the topic
// share the writer and go on being written. The writer kept the first failure for all of
// them, so one subscription deleted while its last write was under way (the write then
// finds it gone) or whose write failed made every subscription of the topic fail each
// write from then on, restart and fail again. A write that finds its subscription deleted
// has nothing left to update: it is dropped, not reported. Any other failure ends its own
// subscription's writes, as before.
func TestStateWriterFailureIsTheSubscriptionsOwn(t *testing.T) {
	tests := []struct {
		name    string
		fail    error // returned for a's held write; nil: it reaches the store
		deleteA bool  // a is deleted from the store while its write is held
		wantErr bool  // a's writes are reported failed from then on
	}{
		{name: "subscription deleted under its write", deleteA: true},
		{name: "subscription's write failed", fail: errors.New("server is disconnected"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			mem := memoryWithSubscription(t)
			if err := mem.PutSubscription(ctx, "orders", "b", nil); err != nil {
				t.Fatal(err)
			}
			st := &subHeldStore{Store: mem, sub: "a", fail: tt.fail, entered: make(chan struct{}), release: make(chan struct{})}
			w := actors.NewStateWriter(st, "orders")
			if err := w.Enqueue("a", store.Update{Cursor: 1}, nil); err != nil {
				t.Fatal(err)
			}
			<-st.entered
			// Queued behind a's write, and written after it fails.
			if err := w.Enqueue("b", store.Update{Cursor: 2}, nil); err != nil {
				t.Fatal(err)
			}
			if tt.deleteA {
				if err := mem.DeleteSubscription(ctx, "orders", "a"); err != nil {
					t.Fatal(err)
				}
			}
			close(st.release)
			errA := w.Flush("a", 0)
			if gotErr := errA != nil; gotErr != tt.wantErr {
				t.Errorf("Flush(a) = %v, want an error: %v", errA, tt.wantErr)
			}
			if err := w.Enqueue("a", store.Update{Cursor: 3}, nil); (err != nil) != tt.wantErr {
				t.Errorf("Enqueue(a) after its write failed = %v, want an error: %v", err, tt.wantErr)
			}
			if err := w.Flush("b", 0); err != nil {
				t.Fatalf("Flush(b) = %v after a's write failed, want nil: b's writes are not a's", err)
			}
			var written bool
			if err := w.Enqueue("b", store.Update{Cursor: 4}, func(err error) { written = err == nil }); err != nil {
				t.Fatalf("Enqueue(b) = %v after a's write failed, want nil", err)
			}
			if err := w.Flush("b", 0); err != nil {
				t.Fatalf("Flush(b) = %v, want nil", err)
			}
			if !written {
				t.Error("b's update was not reported written")
			}
			if got, err := mem.LoadSubscription(ctx, "orders", "b"); err != nil || got.Cursor != 4 {
				t.Errorf("cursor of b = %d, %v; want 4: b's updates were not written", got.Cursor, err)
			}
			if !tt.deleteA {
				if got, err := mem.LoadSubscription(ctx, "orders", "a"); err != nil || got.Cursor != 0 {
					t.Errorf("cursor of a = %d, %v; want 0: nothing of a is written after its failed write", got.Cursor, err)
				}
			}
			if err := w.Close(); (err != nil) != tt.wantErr {
				t.Errorf("Close = %v, want an error: %v", err, tt.wantErr)
			}
		})
	}
}

// memoryWithSubscription is a memory store holding topic orders and its subscription a.
func memoryWithSubscription(t *testing.T) *store.Memory {
	t.Helper()
	mem := store.NewMemory()
	if err := mem.PutTopic(context.Background(), "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := mem.PutSubscription(context.Background(), "orders", "a", nil); err != nil {
		t.Fatal(err)
	}
	return mem
}

// A subscription deleted and created again under its name while a write of the deleted one
// is under way, with more of its updates queued behind it: the new subscription's updates
// are neither merged into the old ones nor dropped or failed with them, and nothing of the
// old ones reaches the new subscription's state (the store refuses their epoch).
func TestStateWriterKeepsEpochsApart(t *testing.T) {
	tests := []struct {
		name    string
		fail    error // returned for the old subscription's held write; nil: it reaches the store
		wantErr bool  // the old subscription's writes are reported failed
	}{
		{name: "the old write reaches the store"},
		{name: "the old write fails", fail: errors.New("server is disconnected"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			mem := memoryWithSubscription(t)
			old, err := mem.LoadSubscription(ctx, "orders", "a")
			if err != nil {
				t.Fatal(err)
			}
			st := &subHeldStore{Store: mem, sub: "a", fail: tt.fail, entered: make(chan struct{}), release: make(chan struct{})}
			w := actors.NewStateWriter(st, "orders")
			if err := w.Enqueue("a", store.Update{Epoch: old.Epoch, Cursor: 1, Put: []store.Parked{{Seq: 1, Attempts: 1}}}, nil); err != nil {
				t.Fatal(err)
			}
			<-st.entered
			oldCalled, oldWritten := false, false
			if err := w.Enqueue("a", store.Update{Epoch: old.Epoch, Cursor: 2, Put: []store.Parked{{Seq: 2, Attempts: 1}}, Probation: []byte("busy")}, func(err error) { oldCalled, oldWritten = true, err == nil }); err != nil {
				t.Fatal(err)
			}
			if err := mem.DeleteSubscription(ctx, "orders", "a"); err != nil {
				t.Fatal(err)
			}
			if err := mem.PutSubscription(ctx, "orders", "a", nil); err != nil {
				t.Fatal(err)
			}
			fresh, err := mem.LoadSubscription(ctx, "orders", "a")
			if err != nil {
				t.Fatal(err)
			}
			if fresh.Epoch == old.Epoch {
				t.Fatalf("the subscription created again has the deleted one's epoch %d", old.Epoch)
			}
			newWritten := false
			if err := w.Enqueue("a", store.Update{Epoch: fresh.Epoch, Cursor: 3}, func(err error) { newWritten = err == nil }); err != nil {
				t.Fatalf("Enqueue for the new subscription = %v, want nil", err)
			}
			close(st.release)
			if err := w.Flush("a", old.Epoch); (err != nil) != tt.wantErr {
				t.Errorf("Flush of the old subscription = %v, want an error: %v", err, tt.wantErr)
			}
			if err := w.Flush("a", fresh.Epoch); err != nil {
				t.Fatalf("Flush of the new subscription = %v, want nil: its writes are not the old one's", err)
			}
			if !oldCalled {
				t.Error("the old subscription's queued update, dropped, was not reported")
			}
			if oldWritten {
				t.Error("the old subscription's queued update was reported written")
			}
			if !newWritten {
				t.Error("the new subscription's update was not reported written")
			}
			got, err := mem.LoadSubscription(ctx, "orders", "a")
			if err != nil {
				t.Fatal(err)
			}
			if got.Cursor != 3 || len(got.Parked) != 0 || got.Probation != nil {
				t.Errorf("new subscription's state = cursor %d, %d parked, probation %q; want cursor 3, nothing parked, no probation", got.Cursor, len(got.Parked), got.Probation)
			}
			if err := w.Enqueue("a", store.Update{Epoch: fresh.Epoch, Cursor: 4}, nil); err != nil {
				t.Errorf("Enqueue for the new subscription after the old one's write = %v, want nil", err)
			}
			if err := w.Close(); (err != nil) != tt.wantErr {
				t.Errorf("Close = %v, want an error: %v", err, tt.wantErr)
			}
			if got, _ := mem.LoadSubscription(ctx, "orders", "a"); got.Cursor != 4 {
				t.Errorf("cursor of the new subscription = %d after Close, want 4", got.Cursor)
			}
		})
	}
}

// Every update of a write that fails is reported with the failure, and so is every update
// queued behind it (dropped with it), before Flush of the subscription returns: whoever waits
// for them (a queue subscription's consumers) is answered at once. They were never called,
// and the consumers waited for their own timeouts.
func TestStateWriterReportsAFailedWriteToItsWaiters(t *testing.T) {
	tests := []struct {
		name string
		fail error
		want error
	}{
		{name: "fenced", fail: fmt.Errorf("writing: %w", store.ErrFenced), want: store.ErrFenced},
		{name: "subscription deleted", fail: fmt.Errorf("writing: %w", store.ErrNotFound), want: store.ErrNotFound},
		{name: "store failed", fail: errDiskGone, want: errDiskGone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &subHeldStore{Store: memoryWithSubscription(t), sub: "a", fail: tt.fail, entered: make(chan struct{}), release: make(chan struct{})}
			w := actors.NewStateWriter(st, "orders")
			var got []error
			report := func(err error) { got = append(got, err) }
			if err := w.Enqueue("a", store.Update{Cursor: 1}, report); err != nil {
				t.Fatal(err)
			}
			<-st.entered
			if err := w.Enqueue("a", store.Update{Cursor: 2}, report); err != nil { // queued behind the held write
				t.Fatal(err)
			}
			close(st.release)
			_ = w.Flush("a", 0)
			if len(got) != 2 {
				t.Fatalf("%d updates reported after the failed write, want 2 (the failed one and the one queued behind it)", len(got))
			}
			for i, err := range got {
				if !errors.Is(err, tt.want) {
					t.Errorf("update %d reported %v, want an error wrapping %v", i, err, tt.want)
				}
			}
			_ = w.Close()
		})
	}
}

var errDiskGone = errors.New("disk gone")
