package router

import "github.com/egridio/egrid/router/store"

// Health returns the health of the router's store (SPEC §6): Healthy; LowSpace, when the disk
// is below the store's free-space floor and publishes are refused with 507; or Failed, when a
// write to disk failed: publishes and definition changes are refused with 503 while stored
// events are still delivered, until the store has reopened itself. A store that does not
// report its health ([store.HealthReporter]) is always Healthy. It is what a readiness probe
// asks (GET /admin/health in router/httpapi).
func (r *Router) Health() store.Health {
	if h, ok := r.store.(store.HealthReporter); ok {
		return h.Health()
	}
	return store.Health{State: store.Healthy}
}
