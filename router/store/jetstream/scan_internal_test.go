package jetstream

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// TestListingReadsWhatTheWatchLeftOut checks the listing the router takes for the whole
// truth: a watch whose end marker comes before some keys (as the server's pending count
// allows while keys are written) leaves them out, and the keys the stream holds that it did
// not deliver are read with a get; a key whose marker the watch delivered is deleted and not
// read again, and a key the get does not find was deleted meanwhile.
func TestListingReadsWhatTheWatchLeftOut(t *testing.T) {
	w := &fakeWatcher{updates: make(chan jetstream.KeyValueEntry, 8)}
	w.updates <- fakeEntry{key: "sub.t.a", val: "a1", op: jetstream.KeyValuePut}
	w.updates <- fakeEntry{key: "sub.t.b", op: jetstream.KeyValueDelete}
	w.updates <- fakeEntry{key: "sub.t.a", val: "a2", op: jetstream.KeyValuePut} // written again meanwhile
	w.updates <- nil                                                             // early: c and d not delivered
	entries, err := watched(t.Context(), w)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{"sub.t.a": "a3", "sub.t.c": "c1"} // d deleted after the stream was read
	var got []string
	get := func(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
		got = append(got, key)
		v, ok := stored[key]
		if !ok {
			return nil, jetstream.ErrKeyNotFound
		}
		return fakeEntry{key: key, val: v, op: jetstream.KeyValuePut}, nil
	}
	want := []string{"sub.t.a", "sub.t.b", "sub.t.c", "sub.t.d"}
	if err := fillMissing(t.Context(), want, entries, get); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"sub.t.c", "sub.t.d"}) {
		t.Errorf("read with a get: %v, want [sub.t.c sub.t.d] (the keys the watch did not deliver)", got)
	}
	listed := map[string]string{}
	for k, e := range entries {
		if e.Operation() == jetstream.KeyValuePut {
			listed[k] = string(e.Value())
		}
	}
	if w := map[string]string{"sub.t.a": "a2", "sub.t.c": "c1"}; !maps.Equal(listed, w) {
		t.Errorf("listing %v, want %v", listed, w)
	}

	// A get that fails fails the listing: a partial one is never returned.
	failing := func(context.Context, string) (jetstream.KeyValueEntry, error) {
		return nil, context.DeadlineExceeded
	}
	if err := fillMissing(t.Context(), []string{"sub.t.e"}, entries, failing); err == nil {
		t.Error("fillMissing with a failing get returned no error")
	}

	// A watch that closes before its marker fails the listing too.
	closed := &fakeWatcher{updates: make(chan jetstream.KeyValueEntry)}
	close(closed.updates)
	if _, err := watched(t.Context(), closed); err == nil {
		t.Error("watched on a watch that closed early returned no error")
	}
}

type fakeWatcher struct{ updates chan jetstream.KeyValueEntry }

func (w *fakeWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }
func (w *fakeWatcher) Stop() error                             { return nil }

type fakeEntry struct {
	key, val string
	op       jetstream.KeyValueOp
}

func (e fakeEntry) Bucket() string                  { return "EGRID_meta" }
func (e fakeEntry) Key() string                     { return e.key }
func (e fakeEntry) Value() []byte                   { return []byte(e.val) }
func (e fakeEntry) Revision() uint64                { return 1 }
func (e fakeEntry) Created() time.Time              { return time.Time{} }
func (e fakeEntry) Delta() uint64                   { return 0 }
func (e fakeEntry) Operation() jetstream.KeyValueOp { return e.op }

// TestStreamKeysNamesEveryKeyWritten checks the first read of a complete listing against a
// real bucket: every subscription key of the topic the stream holds, a deletion marker
// included (one an earlier release left: deletes now remove theirs), and no key of another
// topic.
func TestStreamKeysNamesEveryKeyWritten(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx := t.Context()
	if err := s.PutTopic(ctx, "other", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"a", "b", "c"} {
		if err := s.PutSubscription(ctx, "orders", sub, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSubscription(ctx, "other", "x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.meta.Purge(ctx, subKey("orders", "b")); err != nil { // as earlier releases deleted
		t.Fatal(err)
	}
	keys, err := s.metaStream.keys(ctx, s.meta, subPattern("orders"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	want := []string{subKey("orders", "a"), subKey("orders", "b"), subKey("orders", "c")}
	if !slices.Equal(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	subs, err := s.Subscriptions(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 2 || subs[0].Name != "a" || subs[1].Name != "c" {
		t.Errorf("Subscriptions after deleting b = %v, want a and c", subs)
	}
}

// TestDeletionsLeaveNoMarkers checks that expired delivery histories and delivered dead
// letters leave nothing in their buckets' streams (a key-value purge's marker, kept for
// good, grew the history bucket by a message per delivered event), that an expiry also
// removes the markers an earlier release left, and that a purge up to the revision a listing
// read keeps a value written again since.
func TestDeletionsLeaveNoMarkers(t *testing.T) {
	s, _ := holesStore(t, 1)
	ctx := t.Context()
	if err := s.PutSubscription(ctx, "orders", "billing", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	recs := []store.HistoryRecord{
		{EventID: "old", Expires: now.Add(-time.Minute), Payload: []byte("x")},
		{EventID: "new", Expires: now.Add(time.Hour), Payload: []byte("y")},
		{EventID: "marked", Expires: now.Add(time.Hour), Payload: []byte("z")},
	}
	if err := s.PutHistory(ctx, "orders", "billing", 0, recs); err != nil {
		t.Fatal(err)
	}
	// As an earlier release deleted a history: a key-value purge, leaving a marker.
	if err := s.history.Purge(ctx, historyKey("orders", "billing", "marked")); err != nil {
		t.Fatal(err)
	}
	if err := s.ExpireHistory(ctx, now); err != nil {
		t.Fatal(err)
	}
	keys, err := s.historyStream.keys(ctx, s.history, ">")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{historyKey("orders", "billing", "new")}; !slices.Equal(keys, want) {
		t.Errorf("the history stream holds %v after the expiry, want only %v", keys, want)
	}
	if _, err := s.History(ctx, "orders", "billing", "new", now); err != nil {
		t.Errorf("the history that has not expired: %v", err)
	}

	if err := s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "7", Payload: []byte("a")}, {ID: "8", Payload: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDeadLetters(ctx, []string{"7"}); err != nil {
		t.Fatal(err)
	}
	if keys, err := s.deadStream.keys(ctx, s.dead, ">"); err != nil || !slices.Equal(keys, []string{escape("8")}) {
		t.Errorf("the outbox stream holds %v (%v) after deleting 7, want only 8", keys, err)
	}

	// A purge up to an older revision keeps the value written after it.
	key := historyKey("orders", "billing", "again")
	rev, err := s.history.Put(ctx, key, []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.history.Put(ctx, key, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if err := purgeKey(ctx, s.history, s.historyStream, key, rev); err != nil {
		t.Fatal(err)
	}
	if e, err := s.history.Get(ctx, key); err != nil || string(e.Value()) != "second" {
		t.Errorf("after a purge up to the first revision: %v, %v; want the second value", e, err)
	}

	// Deleting the subscription removes all its histories in one purge, markers and all.
	if err := s.DeleteSubscription(ctx, "orders", "billing"); err != nil {
		t.Fatal(err)
	}
	if keys, err := s.historyStream.keys(ctx, s.history, ">"); err != nil || len(keys) != 0 {
		t.Errorf("the history stream holds %v (%v) after the subscription was deleted, want nothing", keys, err)
	}
}
