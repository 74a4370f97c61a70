package probes

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Paths of the probe endpoints.
const (
	LivenessPath  = "/healthz"
	ReadinessPath = "/readyz"
)

// DefaultTimeout bounds a readiness probe's checks.
const DefaultTimeout = 2 * time.Second

// Check is one readiness check. Run returns nil when the part it checks is ready, else an
// error that says what is wrong; it must be safe for concurrent use and return once ctx ends.
// The error's text is served as it is to anyone who asks (GET /readyz needs no credentials),
// so it must name no file, path, address or secret of the server: say what failed and where
// the details are, and log the details.
type Check struct {
	Name string
	Run  func(ctx context.Context) error
}

// Result is the outcome of one check in a readiness answer.
type Result struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Report is the body of a readiness answer.
type Report struct {
	Ready  bool     `json:"ready"`
	Checks []Result `json:"checks"`
}

// Run runs every check in order under one timeout and reports each.
func Run(ctx context.Context, timeout time.Duration, checks []Check) Report {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep := Report{Ready: true, Checks: make([]Result, 0, len(checks))}
	for _, c := range checks {
		res := Result{Name: c.Name, OK: true}
		if err := c.Run(ctx); err != nil {
			res.OK, res.Error, rep.Ready = false, err.Error(), false
		}
		rep.Checks = append(rep.Checks, res)
	}
	return rep
}

// Liveness serves GET /healthz: 200 "ok" whenever it runs.
func Liveness() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok\n"))
	})
}

// Readiness serves GET /readyz: the [Report] of checks() as JSON, with 200 when ready and
// 503 Service Unavailable when a check failed. checks is called on each request, so the set
// may change while the server runs.
func Readiness(checks func() []Check, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := Run(r.Context(), timeout, checks())
		status := http.StatusOK
		if !rep.Ready {
			status = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(rep)
	})
}
