package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
)

// A pull operation refused because the store of the node running the subscription failed a
// write on a full disk is answered as a publish or an admin write on a full disk is: 507 with
// Retry-After, saying to free disk space and naming no server file. Any other store failure
// stays 503.
func TestPullErrorOnAFullDiskIs507(t *testing.T) {
	a := &API{log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		name string
		err  error
		code int
		says string
	}{
		{"full disk", fmt.Errorf("acknowledge on event subscription %q: %w: write /var/lib/egrid/000042.log: no space left on device", "q", store.ErrDiskFull), http.StatusInsufficientStorage, "frees disk space"},
		{"unavailable", fmt.Errorf("acknowledge on event subscription %q: %w: read /var/lib/egrid/000042.log: input/output error", "q", router.ErrUnavailable), http.StatusServiceUnavailable, "retry later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			a.writePullError(w, "orders", "q", tc.err)
			body := w.Body.String()
			if w.Code != tc.code || w.Header().Get("Retry-After") == "" || !strings.Contains(body, tc.says) || strings.Contains(body, "/var/lib") {
				t.Errorf("answer: %d, Retry-After %q, %s; want %d with Retry-After saying %q, naming no server file",
					w.Code, w.Header().Get("Retry-After"), body, tc.code, tc.says)
			}
		})
	}
}

// A pull operation whose state write was fenced (another node took the subscription over) or
// failed (the subscription restarts) is answered 503 with Retry-After, saying nothing was
// recorded and to send it again, and naming no server file; it was answered 500.
func TestPullErrorOfASubscriptionNotRunningIs503(t *testing.T) {
	a := &API{log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		name string
		err  error
		says string
	}{
		{"fenced", fmt.Errorf("event subscription %q: %w (%w)", "q", router.ErrSubscriptionNotRunning, fmt.Errorf("saving state of subscription orders/q: %w", router.ErrSubscriptionMoved)), "moved to another node"},
		{"write failed", fmt.Errorf("event subscription %q: %w (saving state: read /var/lib/egrid/000042.log: input/output error)", "q", router.ErrSubscriptionNotRunning), "not running on this server at the moment"},
		// The same, on the node a call was routed to (cluster mode): the answer carries the
		// owner's kind, and ErrNotPlaced (an ErrUnavailable) with it.
		{"fenced on the owner", fmt.Errorf("node b: taken over elsewhere: %w (%w, %w)", router.ErrSubscriptionNotRunning, router.ErrSubscriptionMoved, router.ErrNotPlaced), "moved to another node"},
		{"not running on the owner", fmt.Errorf("node b does not run it: saving state: read /var/lib/egrid/000042.log: input/output error: %w (%w)", router.ErrNotPlaced, router.ErrSubscriptionNotRunning), "not running on this server at the moment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			a.writePullError(w, "orders", "q", tc.err)
			body := w.Body.String()
			if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || !strings.Contains(body, tc.says) || !strings.Contains(body, "send it again") || strings.Contains(body, "/var/lib") {
				t.Errorf("answer: %d, Retry-After %q, %s; want 503 with Retry-After saying %q and to send it again, naming no server file",
					w.Code, w.Header().Get("Retry-After"), body, tc.says)
			}
		})
	}
}
