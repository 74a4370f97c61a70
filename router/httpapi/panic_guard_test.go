package httpapi_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/httpapi"
)

// Guard answers a panic of the handler it guards 500 with Event Grid's error body, and the
// handler goes on serving.
func TestGuardAnswersAPanic(t *testing.T) {
	h := httpapi.Guard(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/boom" {
			panic("a bug")
		}
		w.WriteHeader(http.StatusNoContent)
	}), slog.New(slog.DiscardHandler))
	for _, c := range []struct {
		path string
		code int
	}{{"/boom", http.StatusInternalServerError}, {"/fine", http.StatusNoContent}} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		if rec.Code != c.code || (c.code == 500 && !strings.Contains(rec.Body.String(), `"code":"InternalServerError"`)) {
			t.Errorf("GET %s: %d %s; want %d", c.path, rec.Code, rec.Body, c.code)
		}
	}
}
