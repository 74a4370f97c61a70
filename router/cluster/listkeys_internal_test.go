package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/internal/bucketkeys"
)

// scriptedKV is a key-value bucket whose WatchAll gives a watcher fed by the test; its other
// methods are those of the bucket it embeds (a real one, or nil when only WatchAll and Get
// are called).
type scriptedKV struct {
	jetstream.KeyValue
	updates chan jetstream.KeyValueEntry
	stopped bool
	stored  map[string]bool // the keys Get finds (nil: the embedded bucket answers)
	got     []string        // the keys Get was asked for and found
}

func (kv *scriptedKV) WatchAll(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return &scriptedWatcher{kv: kv}, nil
}

type scriptedWatcher struct{ kv *scriptedKV }

func (w *scriptedWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.kv.updates }
func (w *scriptedWatcher) Stop() error                             { w.kv.stopped = true; return nil }

// Get answers the keys of stored, ErrKeyNotFound for the others.
func (kv *scriptedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if kv.stored == nil && kv.KeyValue != nil {
		return kv.KeyValue.Get(ctx, key)
	}
	if !kv.stored[key] {
		return nil, jetstream.ErrKeyNotFound
	}
	kv.got = append(kv.got, key)
	return scriptedEntry{key: key}, nil
}

// scriptedEntry is an entry of key, a put unless op says otherwise; only Key and Operation
// are called.
type scriptedEntry struct {
	jetstream.KeyValueEntry
	key string
	op  jetstream.KeyValueOp
}

func (e scriptedEntry) Key() string { return e.key }
func (e scriptedEntry) Operation() jetstream.KeyValueOp {
	if e.op == 0 {
		return jetstream.KeyValuePut
	}
	return e.op
}

// storedKeys is a listing of the keys a bucket's stream holds that answers keys.
func storedKeys(keys ...string) func(context.Context) ([]string, error) {
	return func(context.Context) ([]string, error) { return keys, nil }
}

// listKeys returns the keys up to the watch's end-of-listing marker, leaves a watch whose
// marker does not come after a pause and reads the keys it did not deliver with gets, gives
// up when its context ends although NATS does not answer (nats.go's KeyValue.Keys does not),
// and fails when the watch ends before the marker; it stops the watch each time.
func TestListKeysHonoursItsContext(t *testing.T) {
	t.Run("complete listing", func(t *testing.T) {
		kv := &scriptedKV{updates: make(chan jetstream.KeyValueEntry, 3)}
		kv.updates <- scriptedEntry{key: "a"}
		kv.updates <- scriptedEntry{key: "b"}
		kv.updates <- nil
		keys, err := listKeys(t.Context(), kv, storedKeys("a", "b"))
		if err != nil || !slices.Equal(keys, []string{"a", "b"}) {
			t.Errorf("listKeys = %v, %v; want [a b]", keys, err)
		}
		if !kv.stopped {
			t.Error("the watch was not stopped")
		}
	})
	t.Run("stalled listing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv := &scriptedKV{updates: make(chan jetstream.KeyValueEntry, 1)}
			kv.updates <- scriptedEntry{key: "a"} // then nothing: a watch waiting on a lost server
			ctx, cancel := context.WithTimeout(t.Context(), 600*time.Millisecond)
			defer cancel()
			start := time.Now()
			// The watch is left after a pause; the stream's keys are then read from the
			// lost server, which does not answer either.
			lost := func(ctx context.Context) ([]string, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			keys, err := listKeys(ctx, kv, lost)
			if !errors.Is(err, context.DeadlineExceeded) || keys != nil {
				t.Errorf("listKeys = %v, %v; want no keys and the context's deadline", keys, err)
			}
			if waited := time.Since(start); waited != 600*time.Millisecond {
				t.Errorf("listKeys returned after %v, want at its context's deadline (600ms)", waited)
			}
			if !kv.stopped {
				t.Error("the watch was not stopped")
			}
		})
	})
	t.Run("watch ended early", func(t *testing.T) {
		kv := &scriptedKV{updates: make(chan jetstream.KeyValueEntry, 1)}
		kv.updates <- scriptedEntry{key: "a"}
		close(kv.updates)
		if keys, err := listKeys(t.Context(), kv, storedKeys("a")); err == nil {
			t.Errorf("listKeys = %v, nil; want an error for a listing without its end", keys)
		}
	})
	t.Run("end marker never comes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			kv := &scriptedKV{updates: make(chan jetstream.KeyValueEntry, 1), stored: map[string]bool{"a": true, "b": true}}
			kv.updates <- scriptedEntry{key: "a"} // then nothing: c, counted as pending, expired
			start := time.Now()
			keys, err := listKeys(t.Context(), kv, storedKeys("a", "b", "c"))
			slices.Sort(keys)
			if err != nil || !slices.Equal(keys, []string{"a", "b"}) {
				t.Errorf("listKeys = %v, %v; want [a b] (b read with a get, c gone)", keys, err)
			}
			if waited := time.Since(start); waited != bucketkeys.WatchIdle {
				t.Errorf("listKeys returned after %v (virtual), want %v: the watch left after a pause", waited, bucketkeys.WatchIdle)
			}
		})
	})
	t.Run("end marker before every key", func(t *testing.T) {
		kv := &scriptedKV{updates: make(chan jetstream.KeyValueEntry, 3), stored: map[string]bool{"a": true, "c": true}}
		kv.updates <- scriptedEntry{key: "a"}
		kv.updates <- scriptedEntry{key: "b", op: jetstream.KeyValueDelete}
		kv.updates <- nil // early: c and d not delivered
		keys, err := listKeys(t.Context(), kv, storedKeys("a", "b", "c", "d"))
		slices.Sort(keys)
		if err != nil || !slices.Equal(keys, []string{"a", "c"}) {
			t.Errorf("listKeys = %v, %v; want [a c] (c read with a get, b deleted, d gone meanwhile)", keys, err)
		}
		if !slices.Equal(kv.got, []string{"c"}) {
			t.Errorf("keys read with a get and found: %v, want [c]", kv.got)
		}
	})
}

// A watch whose end-of-listing marker comes before every key was delivered (the server's
// pending count is not monotonic while the bucket is written, nats-io/nats-server#4824) does
// not shorten the listing: the keys the bucket's stream holds that the watch left out are
// read one by one, a deleted one left out. On the old code the view was [a]: nodes b and c
// looked gone.
func TestListKeysCompletesAnEarlyEndedWatch(t *testing.T) {
	nc := testNATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	bucket := "LK_members"
	stored, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), bucket) })
	for _, k := range []string{"a", "b", "c", "gone"} {
		if _, err := stored.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := stored.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	kv := &scriptedKV{KeyValue: stored, updates: make(chan jetstream.KeyValueEntry, 2)}
	kv.updates <- scriptedEntry{key: "a"}
	kv.updates <- nil // the end marker, early
	keys, err := listKeys(ctx, kv, streamKeys(js, stored))
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, []string{"a", "b", "c"}) {
		t.Errorf("listKeys = %v, %v; want [a b c]", keys, err)
	}
}
