package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// scriptedKV is a key-value bucket whose WatchAll gives a watcher fed by the test.
type scriptedKV struct {
	jetstream.KeyValue // nil: only WatchAll is called
	updates            chan jetstream.KeyValueEntry
	stopped            bool
}

func (kv *scriptedKV) WatchAll(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return &scriptedWatcher{kv: kv}, nil
}

type scriptedWatcher struct{ kv *scriptedKV }

func (w *scriptedWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.kv.updates }
func (w *scriptedWatcher) Stop() error                             { w.kv.stopped = true; return nil }

// scriptedEntry is an entry of key; only Key is called.
type scriptedEntry struct {
	jetstream.KeyValueEntry
	key string
}

func (e scriptedEntry) Key() string { return e.key }

// listKeys returns the keys up to the watch's end-of-listing marker, gives up when its
// context ends although the watch is still listing (nats.go's KeyValue.Keys does not), and
// fails when the watch ends before the marker; it stops the watch each time.
func TestListKeysHonoursItsContext(t *testing.T) {
	t.Run("complete listing", func(t *testing.T) {
		kv := &scriptedKV{updates: make(chan jetstream.KeyValueEntry, 3)}
		kv.updates <- scriptedEntry{key: "a"}
		kv.updates <- scriptedEntry{key: "b"}
		kv.updates <- nil
		keys, err := listKeys(t.Context(), kv)
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
			keys, err := listKeys(ctx, kv)
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
		if keys, err := listKeys(t.Context(), kv); err == nil {
			t.Errorf("listKeys = %v, nil; want an error for a listing without its end", keys)
		}
	})
}
