package router_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
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
