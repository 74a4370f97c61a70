package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/jetstream"
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

// An hourly expiry must keep up with a cluster that expires thousands of histories an hour:
// one ExpireHistory deletes every expired history, unreadable value and deletion marker of
// earlier releases, keeps the live ones, and succeeds though the whole takes longer than the
// store's Timeout (which bounds each of its requests). It read the whole bucket into memory
// and purged one key at a time while its watch was open (each purge recounting the watch's
// pending messages), all within one Timeout: 10 000 expired histories took some 12 seconds,
// and the call failed having deleted a fraction of them.
func TestExpireHistoryKeepsUpWithManyHistories(t *testing.T) {
	ctx := t.Context()
	nc, p := connect(t), newPrefix(t)
	// A short Timeout, so that no single request may take long; the expiry as a whole does.
	s, err := jetstream.Open(ctx, nc, jetstream.Options{Prefix: p, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	subs := []string{"a", "b"}
	for _, sub := range subs {
		if err := s.PutSubscription(ctx, "t", sub, nil); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	// n histories in all, every tenth live; more than an expiry's page and batch.
	const n, perPut = 10_000, 100
	live := func(i int) bool { return i%10 == 0 }
	id := func(i int) string { return fmt.Sprintf("event-%05d", i) }
	var g sync.WaitGroup
	errs := make(chan error, n/perPut)
	for w := range 8 { // eight writers, for a quick setup
		g.Add(1)
		go func() {
			defer g.Done()
			for from := w * perPut; from < n; from += 8 * perPut {
				recs := make([]store.HistoryRecord, 0, perPut)
				for i := from; i < from+perPut; i++ {
					exp := now.Add(-time.Minute)
					if live(i) {
						exp = now.Add(time.Hour)
					}
					recs = append(recs, store.HistoryRecord{EventID: id(i), Expires: exp, Payload: make([]byte, 250)})
				}
				if err := s.PutHistory(ctx, "t", subs[from/perPut%2], 0, recs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	g.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("PutHistory: %v", err)
	}
	// An unreadable value and a deletion marker an earlier release left.
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, p+"_history")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "h.t.a.unreadable", []byte{99}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "h.t.a.deleted", []byte{99}); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "h.t.a.deleted"); err != nil {
		t.Fatal(err)
	}

	if err := s.ExpireHistory(context.Background(), now); err != nil {
		t.Fatalf("ExpireHistory: %v", err)
	}
	str, err := js.Stream(ctx, "KV_"+p+"_history")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := str.CachedInfo().State.Msgs, uint64(n/10); got != want {
		t.Errorf("the history bucket holds %d messages after ExpireHistory, want %d (the live histories)", got, want)
	}
	for i := range n {
		_, err := s.History(ctx, "t", subs[i/perPut%2], id(i), now.Add(-time.Hour))
		switch {
		case live(i) && err != nil:
			t.Fatalf("live history %s after ExpireHistory: %v", id(i), err)
		case !live(i) && !errors.Is(err, store.ErrNotFound):
			t.Fatalf("expired history %s survived ExpireHistory: err %v", id(i), err)
		}
	}
}
