package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

func TestZZShow(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("block") != "" { <-r.Context().Done(); return }
		w.WriteHeader(503)
	}))
	defer srv.Close()
	for _, u := range []string{srv.URL + "/x?code=secret", srv.URL + "/x?block=1&code=secret", "http://127.0.0.1:1/hook?code=secret", "https://user:pw@127.0.0.1:1/hook"} {
		s, _ := webhook.New(webhook.Config{URL: u, Timeout: 200 * time.Millisecond}, nil)
		err := s.Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: []byte("[]")})
		t.Log(err)
	}
	t.Log(webhook.Config{URL: "ftp://x/?a=b", Timeout: -1}.Validate())
}
