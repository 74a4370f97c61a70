package router_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/testkit"
)

// A replay stopped by Close while its read of an object hangs (a store that ignores
// cancellation) terminates at once and waits for the read off its mailbox; Close returns only
// once that read has returned (or had its 5 s), before it goes on to close the stores.
func TestCloseWaitsForAStoppedReplaysObjectRead(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		var replaying atomic.Bool
		hook := h.Endpoint("hook", func(int, *http.Request) testkit.Response {
			if !replaying.Load() {
				return testkit.Response{Status: http.StatusBadRequest}
			}
			return testkit.Response{Status: http.StatusOK}
		})
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		deadLetterEach(t, h, "e1", "e2")
		router.SetReplayWindow(h.Router(), 1) // no events kept: each object is read again
		replaying.Store(true)
		store := h.DeadLetterStore()
		var mu sync.Mutex
		var release func()
		defer func() {
			mu.Lock()
			defer mu.Unlock()
			if release != nil {
				release()
			}
		}()
		if _, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{
			Progress: func(p router.ReplayProgress) {
				if p.Stage == router.ReplayReading && p.Done == p.Total {
					mu.Lock()
					release = store.HoldReads() // the selection is made: the replay's reads hang
					mu.Unlock()
				}
			}}); err != nil {
			t.Fatal(err)
		}
		h.Settle() // the replay's first object read hangs
		closed := make(chan error, 1)
		go func() { closed <- h.Router().Close(context.Background()) }()
		h.Advance(4 * time.Second)
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while a stopped replay's object read hangs", err)
		default:
		}
		mu.Lock()
		release()
		mu.Unlock()
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
	})
}
