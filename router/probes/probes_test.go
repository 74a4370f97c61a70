package probes_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/egridio/egrid/router/probes"
)

func TestLiveness(t *testing.T) {
	w := httptest.NewRecorder()
	probes.Liveness().ServeHTTP(w, httptest.NewRequest(http.MethodGet, probes.LivenessPath, nil))
	if w.Code != http.StatusOK || w.Body.String() != "ok\n" {
		t.Errorf("GET /healthz: %d %q, want 200 ok", w.Code, w.Body.String())
	}
}

func TestReadiness(t *testing.T) {
	var storeErr error
	checks := func() []probes.Check {
		return []probes.Check{
			{Name: "store", Run: func(context.Context) error { return storeErr }},
			{Name: "actors", Run: func(context.Context) error { return nil }},
		}
	}
	h := probes.Readiness(checks, time.Minute)
	for _, c := range []struct {
		name   string
		err    error
		status int
		want   probes.Report
	}{
		{"ready", nil, http.StatusOK, probes.Report{Ready: true, Checks: []probes.Result{{Name: "store", OK: true}, {Name: "actors", OK: true}}}},
		{"store failed", errors.New("the store is failed: disk full"), http.StatusServiceUnavailable,
			probes.Report{Checks: []probes.Result{{Name: "store", Error: "the store is failed: disk full"}, {Name: "actors", OK: true}}}},
	} {
		storeErr = c.err
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, probes.ReadinessPath, nil))
		var got probes.Report
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: body %q: %v", c.name, w.Body.String(), err)
		}
		if w.Code != c.status || got.Ready != c.want.Ready || len(got.Checks) != 2 || got.Checks[0] != c.want.Checks[0] || got.Checks[1] != c.want.Checks[1] {
			t.Errorf("%s: %d %+v, want %d %+v", c.name, w.Code, got, c.status, c.want)
		}
	}
}

// TestReadinessTimeout: a check that hangs fails when the probe's timeout ends, instead of
// hanging the probe.
func TestReadinessTimeout(t *testing.T) {
	hang := []probes.Check{{Name: "minio", Run: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}}
	rep := probes.Run(context.Background(), time.Millisecond, hang)
	if rep.Ready || rep.Checks[0].Error != context.DeadlineExceeded.Error() {
		t.Errorf("hung check: %+v, want not ready with the deadline error", rep)
	}
}
