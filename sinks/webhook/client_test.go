package webhook_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// A sink on one of its own clients sends through the client's transport without Client.Do;
// what Client.Do would have added still happens wherever it matters: user info in the URL
// becomes Basic authentication, and a caller's client keeps its own policies (here, following
// a redirect, which the sink's own clients refuse).
func TestDeliverKeepsWhatClientDoAdds(t *testing.T) {
	var final atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/auth", func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "user" || p != "secret" {
			t.Errorf("Basic authentication = %q, %q, %v; want user, secret", u, p, ok)
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/final", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/final", func(w http.ResponseWriter, r *http.Request) { final.Add(1) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	batch := &sinks.Batch{Subscription: "s", Body: []byte(`[]`)}
	ctx := context.Background()

	withUser := strings.Replace(srv.URL, "http://", "http://user:secret@", 1) + "/auth"
	for name, client := range map[string]*http.Client{"shared": nil, "egress": webhook.NewClient(nil)} {
		if err := newSink(t, webhook.Config{URL: withUser}, client).Deliver(ctx, batch); err != nil {
			t.Errorf("%s client, user info in the URL: Deliver = %v", name, err)
		}
		if err := newSink(t, webhook.Config{URL: srv.URL + "/moved"}, client).Deliver(ctx, batch); err == nil {
			t.Errorf("%s client followed a redirect", name)
		}
	}
	if n := final.Load(); n != 0 {
		t.Fatalf("the sink's own clients followed %d redirects", n)
	}
	if err := newSink(t, webhook.Config{URL: srv.URL + "/moved"}, &http.Client{}).Deliver(ctx, batch); err != nil {
		t.Fatalf("a caller's client that follows redirects: Deliver = %v", err)
	}
	if n := final.Load(); n != 1 {
		t.Fatalf("a caller's client that follows redirects reached the target %d times, want 1", n)
	}
}

// A URL with an empty port ("host:") is sent with the Host header net/http would send,
// without the colon.
func TestDeliverHostWithEmptyPort(t *testing.T) {
	hosts := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hosts <- r.Host }))
	t.Cleanup(srv.Close)
	toServer := func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, srv.Listener.Addr().String())
	}
	client := webhook.NewClient(toServer)
	t.Cleanup(client.CloseIdleConnections)
	s := newSink(t, webhook.Config{URL: "http://localhost:/hook"}, client)
	if err := s.Deliver(context.Background(), &sinks.Batch{Subscription: "s", Body: []byte(`[]`)}); err != nil {
		t.Fatalf("Deliver = %v", err)
	}
	if got := <-hosts; got != "localhost" {
		t.Fatalf("Host = %q, want localhost", got)
	}
}
