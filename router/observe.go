package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egridio/egrid/router/metrics/promexport"
	"github.com/egridio/egrid/router/probes"
	"github.com/egridio/egrid/sinks"
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

// storeNotReady is the readiness check's answer for a store that is not healthy. It names the
// state and where the reason is, never the reason itself: /readyz needs no credentials, and a
// store's reason can name the server's files and data directory (the project's rule for
// errors that can, as the admin API's writeAdminError: the log only, and GET /admin/health,
// which needs the admin token).
const storeNotReady = "the store is %s: see the log or GET /admin/health with the admin token"

// deadLettersNotReady is the readiness check's answer for a dead-letter store that does not
// answer; the error, which names its endpoint, goes to the log.
const deadLettersNotReady = "the dead-letter store does not answer: see the log"

// deadLettersRefused is the readiness check's answer for a dead-letter store that answers
// but refuses the credentials.
const deadLettersRefused = "the dead-letter store refused the credentials: " + MinIOCredentialsHint

// ReadinessChecks returns the checks of a readiness probe (router/probes): the store takes
// writes ([Router.Health] is Healthy: not below its free-space floor, not failed), the router's actors run
// (it was built and is not closed), and, when the dead-letter store can be pinged (MinIO),
// that it answers; in cluster mode, that the node is connected to NATS. A failed check says
// what is wrong in fixed words and where to look for why (the log, or [Router.Health]): its
// text is served without credentials, so it names no file, path or endpoint of the server.
// The dead-letter store is pinged at most once every [PingInterval], one ping at a time:
// probes in between, and those that arrive while a ping runs, share its result, so a flood
// of /readyz requests cannot flood the dead-letter store.
func (r *Router) ReadinessChecks() []probes.Check {
	checks := []probes.Check{
		{Name: CheckStore, Run: func(context.Context) error {
			hs := r.Health()
			if hs.State == Healthy {
				return nil
			}
			return fmt.Errorf(storeNotReady, hs.State)
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
			if err := r.dlPing.run(ctx, func(ctx context.Context) error {
				err := p.Ping(ctx)
				switch {
				case errors.Is(err, sinks.ErrCredentialsRefused):
					r.log.Warn("readiness: the dead-letter store refused the credentials; "+MinIOCredentialsHint, "err", err)
				case err != nil:
					r.log.Warn("readiness: the dead-letter store does not answer", "err", err)
				}
				return err
			}); err != nil {
				if errors.Is(err, sinks.ErrCredentialsRefused) {
					return errors.New(deadLettersRefused)
				}
				return errors.New(deadLettersNotReady)
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

// PingInterval is how long the readiness check keeps the dead-letter store's ping result.
const PingInterval = time.Second

// sharedPing runs a readiness ping at most once every PingInterval and one at a time: a
// call within PingInterval of the last ping's end takes its result, and one made while a
// ping runs waits for it (or for its own ctx) and takes its result. The zero value is ready.
type sharedPing struct {
	mu      sync.Mutex
	done    bool      // a ping ended
	at      time.Time // when it ended
	err     error     // and its result
	running chan struct{}
}

// run returns the result of a ping of ping's, shared as [sharedPing] says. The ping runs on
// the caller's goroutine, bounded by probes.DefaultTimeout and not by ctx: callers that wait
// for it share its result, which a caller that went away must not cut short.
func (p *sharedPing) run(ctx context.Context, ping func(context.Context) error) error {
	for {
		p.mu.Lock()
		if p.done && time.Since(p.at) < PingInterval {
			err := p.err
			p.mu.Unlock()
			return err
		}
		if ch := p.running; ch != nil {
			p.mu.Unlock()
			select {
			case <-ch:
				continue // take its result
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		p.running = make(chan struct{})
		p.mu.Unlock()
		return p.ping(ctx, ping)
	}
}

// ping runs ping for [sharedPing.run], which has set running, and records its result.
func (p *sharedPing) ping(ctx context.Context, ping func(context.Context) error) (err error) {
	err = errors.New("the ping did not return") // what waiters take if ping panics
	defer func() {
		p.mu.Lock()
		p.done, p.at, p.err = true, time.Now(), err
		close(p.running)
		p.running = nil
		p.mu.Unlock()
	}()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probes.DefaultTimeout)
	defer cancel()
	return ping(pctx)
}
