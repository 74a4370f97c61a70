package httpserver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/httpserver"
)

// TestPollLimitAnswersOverTheBoundAtOnce admits polls until the test ends them: polls over
// the bound, or over one queue's half of it, are answered 429 at once while the others keep
// their slots, and a slot is free again as soon as a poll ends.
func TestPollLimitAnswersOverTheBoundAtOnce(t *testing.T) {
	l := httpserver.NewPollLimit(4)
	admit := func(q string) (release func()) {
		t.Helper()
		rec := httptest.NewRecorder()
		release, ok := l.Admit(rec, q)
		if !ok || release == nil || rec.Body.Len() != 0 || len(rec.Header()) != 0 {
			t.Fatalf("poll %s: not admitted (%v), or answered: %d %v %s", q, ok, rec.Code, rec.Header(), rec.Body)
		}
		return release
	}
	shed := func(q, want string) {
		t.Helper()
		rec := httptest.NewRecorder()
		if release, ok := l.Admit(rec, q); ok || release != nil {
			t.Fatalf("poll %s over the bound was admitted", q)
		}
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
			rec.Header().Get("Connection") == "close" ||
			!strings.Contains(rec.Body.String(), `"code":"TooManyRequests"`) ||
			!strings.Contains(rec.Body.String(), want) || !strings.Contains(rec.Body.String(), "--max-receive-polls") {
			t.Fatalf("poll %s over the bound: %d %v %s", q, rec.Code, rec.Header(), rec.Body)
		}
	}

	a1, a2 := admit("a"), admit("a")
	shed("a", "event subscription a has 2 receive long polls waiting already") // a's half of 4
	b1, b2 := admit("b"), admit("b")
	shed("c", "the server has 4 receive long polls waiting already") // the server's bound

	a1() // one of a's polls ends: a has a slot again, and so has c
	c := admit("c")
	shed("a", "the server has 4")
	c()
	a3 := admit("a")
	for _, release := range []func(){a2, a3, b1, b2} {
		release()
	}
	// Every slot is free again.
	d1, d2, e1, e2 := admit("d"), admit("d"), admit("e"), admit("e")
	shed("f", "the server has 4")
	for _, release := range []func(){d1, d2, e1, e2} {
		release()
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

// Take shares Admit's bounds (the polls another cluster node routed here): over either it
// refuses with the reason, and a slot it took is free again once released.
func TestPollLimitTakeSharesTheBounds(t *testing.T) {
	l := httpserver.NewPollLimit(4)
	rec := httptest.NewRecorder()
	admitted, ok := l.Admit(rec, "a")
	if !ok {
		t.Fatalf("the first poll of a was not admitted: %d %s", rec.Code, rec.Body)
	}
	took, err := l.Take("a")
	if err != nil {
		t.Fatalf("Take of a second poll of a: %v", err)
	}
	if _, err := l.Take("a"); err == nil || !strings.Contains(err.Error(), "event subscription a has 2 receive long polls waiting already") {
		t.Fatalf("Take of a third poll of a = %v, want refused over a's half", err)
	}
	rec = httptest.NewRecorder()
	if _, ok := l.Admit(rec, "a"); ok || rec.Code != http.StatusTooManyRequests {
		t.Fatalf("Admit of a third poll of a: admitted %v, %d; want 429 (Take's slots count)", ok, rec.Code)
	}
	b1, err1 := l.Take("b")
	b2, err2 := l.Take("b")
	if err1 != nil || err2 != nil {
		t.Fatalf("Take of two polls of b: %v, %v", err1, err2)
	}
	if _, err := l.Take("c"); err == nil || !strings.Contains(err.Error(), "the server has 4 receive long polls waiting already") {
		t.Fatalf("Take over the server's bound = %v, want refused", err)
	}
	took()
	b1()
	if release, err := l.Take("a"); err != nil {
		t.Fatalf("Take of a once a slot of a was released: %v", err)
	} else {
		release()
	}
	admitted()
	b2()
}
