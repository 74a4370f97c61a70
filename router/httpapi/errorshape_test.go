package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
)

// TestEveryErrorHasDetails: every error answer of the data plane has Azure's documented shape,
// {"error": {"code", "message", "details": [{"code", "message"}]}}: a 401 and a 413 as a 400
// does, one detail repeating the error when it has none of its own.
func TestEveryErrorHasDetails(t *testing.T) {
	ctx := context.Background()
	r, err := router.New(router.Config{}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	keys, _ := r.Topic("orders")
	h := httpapi.New(r)
	big := `[{"id":"1","subject":"s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1","data":"` + strings.Repeat("x", 1<<20) + `"}]`
	tests := []struct {
		name, method, path, key, body string
		want                          int
	}{
		{name: "wrong key", method: "POST", path: "/topics/orders/api/events?api-version=2018-01-01", key: "wrong", body: `[]`, want: 401},
		{name: "too large", method: "POST", path: "/topics/orders/api/events?api-version=2018-01-01", key: keys.Key1, body: big, want: 413},
		{name: "bad JSON", method: "POST", path: "/topics/orders/api/events?api-version=2018-01-01", key: keys.Key1, body: `[{`, want: 400},
		{name: "unknown route", method: "GET", path: "/nowhere", want: 404},
		{name: "wrong method", method: "GET", path: "/topics/orders/api/events", want: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			if tt.key != "" {
				req.Header.Set("aeg-sas-key", tt.key)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.want, rec.Body)
			}
			var e struct {
				Error struct {
					Code, Message string
					Details       []struct{ Code, Message string }
				}
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if e.Error.Code == "" || e.Error.Message == "" || len(e.Error.Details) == 0 || e.Error.Details[0].Code == "" || e.Error.Details[0].Message == "" {
				t.Errorf("body %s lacks Azure's shape: code, message and details with code and message", rec.Body)
			}
		})
	}
}
