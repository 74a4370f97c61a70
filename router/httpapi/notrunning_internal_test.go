package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/actors"
)

// A status or end-probation call that reaches a subscription's actor as it stops (before it
// had loaded its state: changed, moved or restarting) is answered 503 with Retry-After and the
// actor's message, a call to make again; it was answered 400 BadRequest "InvalidProperty", as
// if the caller's request were wrong.
func TestSubscriptionNotRunningIsServiceUnavailable(t *testing.T) {
	a := &API{log: slog.New(slog.DiscardHandler)}
	err := fmt.Errorf("event subscription %q of topic %q stopped before it had loaded its state: %w", "audit", "orders", actors.ErrNotRunning)
	w := httptest.NewRecorder()
	a.writeAdminError(w, httptest.NewRequest("GET", "/admin/topics/orders/eventSubscriptions/audit", nil), err)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "stopped before it had loaded its state") {
		t.Errorf("answer to a subscription that was not running: %d, Retry-After %q, %s; want 503 with Retry-After and the actor's message",
			w.Code, w.Header().Get("Retry-After"), w.Body.String())
	}
}
