package httpapi

import (
	"net/http"

	"github.com/egridio/egrid/router"
)

// getHealth serves GET /admin/health: the store's health ([router.Router.Health]) as JSON,
// with status 200 when Healthy and 503 otherwise, so a probe can use the status alone.
func (a *API) getHealth(w http.ResponseWriter, _ *http.Request) {
	h := a.r.Health()
	status := http.StatusOK
	if h.State != router.Healthy {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, struct {
		Store router.Health `json:"store"`
	}{h})
}
