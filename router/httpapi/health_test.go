package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store/disk"
)

// getHealth serves GET /admin/health in-process and returns the status and the store state.
func getHealth(t *testing.T, h http.Handler) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, localRequest(http.MethodGet, "/admin/health", nil))
	var body struct {
		Store struct {
			State string `json:"state"`
		} `json:"store"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("GET /admin/health: %d %q: %v", rec.Code, rec.Body.String(), err)
	}
	return rec.Code, body.Store.State
}

// The store's health is visible (Router.Health, GET /admin/health), and below the disk
// store's free-space floor a publish gets 507 with Retry-After and nothing is accepted.
func TestHealthAndInsufficientStorage(t *testing.T) {
	ctx := t.Context()
	healthy, err := router.New(router.Config{InsecureDev: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close(ctx)
	if code, state := getHealth(t, httpapi.New(healthy)); code != http.StatusOK || state != "healthy" {
		t.Errorf("GET /admin/health of a healthy store = %d %q, want 200 healthy", code, state)
	}

	st, err := disk.Open(t.TempDir(), disk.Options{MinFreeBytes: 1 << 62}) // no disk has that much
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	req := localRequest(http.MethodPost, "/topics/orders/api/events?api-version=2018-01-01",
		strings.NewReader(`[{"id":"e1","subject":"/s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1","data":{}}]`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	httpapi.New(r).ServeHTTP(rec, req)
	if rec.Code != http.StatusInsufficientStorage || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "frees disk space") {
		t.Errorf("publish below the floor = %d (Retry-After %q) %s; want 507 with Retry-After saying to free disk space", rec.Code, rec.Header().Get("Retry-After"), rec.Body.String())
	}
	if h := r.Health(); h.State != router.LowSpace || h.MinFreeBytes != 1<<62 {
		t.Errorf("Health below the floor = %+v, want LowSpace with the floor", h)
	}
	if code, state := getHealth(t, httpapi.New(r)); code != http.StatusServiceUnavailable || state != "low-space" {
		t.Errorf("GET /admin/health below the floor = %d %q, want 503 low-space", code, state)
	}
}
