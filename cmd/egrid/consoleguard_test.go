package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/console"
	"github.com/egridio/egrid/router/httpapi"
)

// The web console gets the admin API's guard: a path over httpapi.MaxPathBytes is answered
// 414 with Event Grid's error body before the console sees it, as every API route answers it,
// where the console took any path the server's header limit let through.
func TestConsoleGuardedLikeTheAPI(t *testing.T) {
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	h := mainHandler(r, prometheus.NewRegistry(), nil, httpapi.New(r), console.NewAttempts(0), slog.New(slog.DiscardHandler))
	for _, path := range []string{console.Prefix + strings.Repeat("a", httpapi.MaxPathBytes), "/admin/topics/" + strings.Repeat("a", httpapi.MaxPathBytes)} {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, path, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if rec.Code != http.StatusRequestURITooLong || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Code != "RequestUriTooLong" {
			t.Errorf("GET of a %d-byte path under %s: %d %.200s; want 414 with Event Grid's error body", len(path), path[:8], rec.Code, rec.Body)
		}
	}
}
