package router

import "github.com/egridio/egrid/router/store"

// Health is the health of the router's store: its state, the reason when not healthy, the
// free space and the floor, and how often it recovered or found damage ([store.Health]).
type Health = store.Health

// The states of a [Health].
const (
	Healthy  = store.Healthy  // every call works
	LowSpace = store.LowSpace // below the free-space floor: publishes are refused with 507
	Failed   = store.Failed   // a write to disk failed, or (cluster mode) NATS is unreachable: publishes refused with 503 (507 on a full disk) until it recovers
)

// ErrInsufficientStorage ([store.ErrInsufficientStorage]) is wrapped by a publish refused
// because the disk holding the store is below its free-space floor, and by a publish or
// definition write refused because the store failed a write on a full disk (that error wraps
// [ErrUnavailable] and [store.ErrDiskFull] as well); the HTTP plane answers 507.
var ErrInsufficientStorage = store.ErrInsufficientStorage

// Health returns the health of the router's store (SPEC §6): Healthy; LowSpace, when the disk
// is below the store's free-space floor and publishes are refused with 507; or Failed, when a
// write to disk failed: publishes and definition changes are refused with 503 (507 when the
// disk was full) while stored events are still delivered, until the store has reopened itself;
// in cluster mode Failed also while the node is not connected to NATS. A store that does not
// report its health ([store.HealthReporter]) is always Healthy. It is what a readiness probe
// asks (GET /admin/health in router/httpapi).
func (r *Router) Health() Health {
	if h, ok := r.store.(store.HealthReporter); ok {
		return h.Health()
	}
	return Health{State: Healthy}
}
