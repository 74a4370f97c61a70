package router

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egridio/egrid/router/metrics/promexport"
	"github.com/egridio/egrid/router/probes"
)

// Collector returns a prometheus.Collector of the router's metrics (see
// router/metrics/promexport for the names): register it in a host service's registry. It
// reads the counters and the gauges the actors publish at scrape time and never waits on an
// actor.
func (r *Router) Collector() prometheus.Collector { return promexport.New(r.metrics, nil) }

// Readiness check names ([Router.ReadinessChecks]).
const (
	CheckStore       = "store"
	CheckActors      = "actors"
	CheckDeadLetters = "deadLetterStore"
	CheckCluster     = "cluster"
)

// pinger is a dead-letter store that can tell whether it is reachable (sinks/blob.Store).
type pinger interface {
	Ping(ctx context.Context) error
}

// ReadinessChecks returns the checks of a readiness probe (router/probes): the store takes
// writes ([Router.Health] is Healthy: not below its free-space floor, not failed), the router's actors run
// (it was built and is not closed), and, when the dead-letter store can be pinged (MinIO),
// that it answers; in cluster mode, that the node is connected to NATS. A failed check says
// what is wrong.
func (r *Router) ReadinessChecks() []probes.Check {
	checks := []probes.Check{
		{Name: CheckStore, Run: func(context.Context) error {
			hs := r.Health()
			if hs.State == Healthy {
				return nil
			}
			if hs.Reason == "" {
				return fmt.Errorf("the store is %s", hs.State)
			}
			return fmt.Errorf("the store is %s: %s", hs.State, hs.Reason)
		}},
		{Name: CheckActors, Run: func(context.Context) error {
			r.mu.RLock()
			defer r.mu.RUnlock()
			if r.closed {
				return errors.New("the router is shutting down")
			}
			return nil
		}},
	}
	if p, ok := r.deps.DeadLetterStore.(pinger); ok {
		checks = append(checks, probes.Check{Name: CheckDeadLetters, Run: func(ctx context.Context) error {
			if err := p.Ping(ctx); err != nil {
				return fmt.Errorf("the dead-letter store does not answer: %w", err)
			}
			return nil
		}})
	}
	if nc := r.deps.NATS; nc != nil {
		checks = append(checks, probes.Check{Name: CheckCluster, Run: func(context.Context) error {
			if !nc.IsConnected() {
				return fmt.Errorf("not connected to NATS (%v): publishes are refused and this node delivers nothing until it reconnects", nc.Status())
			}
			return nil
		}})
	}
	return checks
}
