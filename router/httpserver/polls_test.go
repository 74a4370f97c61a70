package httpserver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/httpserver"
)

// TestLimitPollsAnswersOverTheBoundAtOnce holds polls in a handler until the test lets them
// go: polls over the server's bound, or over one queue's half of it, are answered 429 at once
// while the others keep waiting, and a slot is free again as soon as a poll ends.
func TestLimitPollsAnswersOverTheBoundAtOnce(t *testing.T) {
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{}), "c": make(chan struct{})}
	entered := make(chan string, 8)
	h := httpserver.LimitPolls(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("q")
		entered <- q
		if ch := release[q]; ch != nil {
			<-ch
		}
	}), 4, func(r *http.Request) (string, bool) {
		q := r.URL.Query().Get("q")
		return q, q != ""
	})
	serve := func(q string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/poll?q="+q, nil))
		return rec
	}
	done := make(chan *httptest.ResponseRecorder, 8)
	wait := func(q string) {
		t.Helper()
		go func() { done <- serve(q) }()
		if got := <-entered; got != q {
			t.Fatalf("poll %s: the handler served %s", q, got)
		}
	}
	shed := func(q, want string) {
		t.Helper()
		rec := serve(q) // answered without waiting: no handler runs
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
			rec.Header().Get("Connection") == "close" ||
			!strings.Contains(rec.Body.String(), `"code":"TooManyRequests"`) ||
			!strings.Contains(rec.Body.String(), want) || !strings.Contains(rec.Body.String(), "--max-receive-polls") {
			t.Fatalf("poll %s over the bound: %d %v %s", q, rec.Code, rec.Header(), rec.Body)
		}
	}

	wait("a")
	wait("a")
	shed("a", "event subscription a has 2 receive long polls waiting already") // a's half of 4
	wait("b")
	wait("b")
	shed("c", "the server has 4 receive long polls waiting already") // the server's bound
	// A request that is not a poll is not limited.
	if rec := serve(""); rec.Code != http.StatusOK {
		t.Fatalf("a request that is not a poll: %d", rec.Code)
	}
	if got := <-entered; got != "" {
		t.Fatalf("the request that is not a poll: the handler served %q", got)
	}
	select {
	case rec := <-done:
		t.Fatalf("a waiting poll was answered %d", rec.Code)
	default:
	}

	release["a"] <- struct{}{} // one of a's polls ends: a has a slot again, and so has c
	if rec := <-done; rec.Code != http.StatusOK {
		t.Fatalf("the poll that ended: %d", rec.Code)
	}
	wait("c")
	shed("a", "the server has 4")
	release["c"] <- struct{}{}
	<-done
	wait("a")
	close(release["a"])
	close(release["b"])
	for range 4 {
		if rec := <-done; rec.Code != http.StatusOK {
			t.Fatalf("a poll let go: %d", rec.Code)
		}
	}
}

// New bounds the streams of an HTTP/2 connection (served over TLS by default), and the long
// polls by default to a quarter of the connections, so that polls leave most of them to
// publishers.
func TestNewBoundsStreamsAndPolls(t *testing.T) {
	srv := httpserver.New(httpserver.Config{}, http.NotFoundHandler(), httpserver.Requests{}, nil)
	if srv.HTTP2 == nil || srv.HTTP2.MaxConcurrentStreams != httpserver.MaxConcurrentStreams || httpserver.MaxConcurrentStreams > 250 {
		t.Errorf("HTTP/2 config %+v: want MaxConcurrentStreams %d", srv.HTTP2, httpserver.MaxConcurrentStreams)
	}
	for _, tt := range []struct {
		name      string
		cfg       httpserver.Config
		wantPolls int
	}{
		{name: "default", cfg: httpserver.Config{MaxConnections: 4096}, wantPolls: httpserver.DefaultMaxReceivePolls},
		{name: "few connections", cfg: httpserver.Config{MaxConnections: 100}, wantPolls: 25},
		{name: "one connection", cfg: httpserver.Config{MaxConnections: 1}, wantPolls: 1},
		{name: "set", cfg: httpserver.Config{MaxConnections: 100, MaxReceivePolls: 500}, wantPolls: 500},
	} {
		if got := tt.cfg.WithDefaults().MaxReceivePolls; got != tt.wantPolls {
			t.Errorf("%s: MaxReceivePolls %d, want %d", tt.name, got, tt.wantPolls)
		}
	}
	if err := (httpserver.Config{MaxReceivePolls: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "maxReceivePolls -1") {
		t.Errorf("Validate of a negative maxReceivePolls: %v", err)
	}
}
