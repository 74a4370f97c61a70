package bucketkeys

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

type stalledWatcher struct{ updates chan jetstream.KeyValueEntry }

func (w stalledWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }
func (w stalledWatcher) Stop() error                             { return nil }

// A watch whose end marker never comes is left WatchIdle after its last value, or after a
// third of the time its context has left when that is shorter, so the gets that follow have
// the rest.
func TestInitialValuesLeavesAStalledWatch(t *testing.T) {
	for _, c := range []struct {
		name     string
		deadline time.Duration // 0: none
		want     time.Duration
	}{
		{"no deadline", 0, WatchIdle},
		{"a far deadline", 10 * time.Second, WatchIdle},
		{"a near deadline", 300 * time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				if c.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.deadline)
					defer cancel()
				}
				w := stalledWatcher{updates: make(chan jetstream.KeyValueEntry)}
				start := time.Now()
				if err := InitialValues(ctx, w, func(jetstream.KeyValueEntry) error { return nil }); err != nil {
					t.Fatal(err)
				}
				if waited := time.Since(start); waited != c.want {
					t.Errorf("InitialValues left the watch after %v (virtual), want %v", waited, c.want)
				}
			})
		})
	}
}
