package router_test

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// A router started on a store whose outbox holds dead letters already tried once writes them
// at once, and publishes their BlobCreated notifications while it is still being built: the
// router's parts those notifications reach must be in place before anything can publish.
func TestNotificationsWhileTheRouterStarts(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		h.DeadLetterStore().Down()
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(6 * time.Minute) // the write was tried and failed: it is retried at the next start
		h.DeadLetterStore().Up()
		h.Restart()
		h.Advance(time.Minute)
		if n := h.DeadLetterObjects().Puts(); n != 1 {
			t.Fatalf("%d objects written after the restart, want 1", n)
		}
	})
}

// A router whose New fails half-way through restoring the store (a stored subscription that
// does not load) stops what it had started: the topics restored before it leave no committer
// or actor behind, so the bubble ends.
func TestNewThatFailsRestoringLeavesNothingRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := store.NewMemory()
		for _, topic := range []string{"a-orders", "b-orders"} {
			if err := st.PutTopic(ctx, topic, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.PutSubscription(ctx, "b-orders", "broken", []byte(`{not json`)); err != nil {
			t.Fatal(err)
		}
		if _, err := router.New(router.Config{}, router.Deps{Store: st}); err == nil {
			t.Fatal("New restored a subscription that does not decode")
		}
	})
}

// A time scale that is NaN or infinite is refused by Config.Validate and so by New: the retry
// policy refuses it, so a router that took one started with every stored subscription Failed
// while publishes answered 200. Negative values were refused already; 0 and 1 are real time.
func TestNewRefusesANonFiniteTimeScale(t *testing.T) {
	for _, ts := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1} {
		cfg := router.Config{TimeScale: ts}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "timeScale") || !strings.Contains(err.Error(), "finite number >= 0") {
			t.Errorf("Validate with timeScale %v = %v; want an error naming timeScale and the range", ts, err)
		}
		if r, err := router.New(cfg, router.Deps{}); err == nil {
			_ = r.Close(context.Background())
			t.Errorf("New with timeScale %v succeeded, want the Validate error", ts)
		}
	}
	for _, ts := range []float64{0, 1, 600} {
		if err := (router.Config{TimeScale: ts}).Validate(); err != nil {
			t.Errorf("Validate with timeScale %v = %v, want nil", ts, err)
		}
	}
}
