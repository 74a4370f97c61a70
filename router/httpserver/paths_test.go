package httpserver_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/testkit"
)

// TestPathsWithEmptyOrDotSegmentsAreNotRedirected: a request whose path has an empty, "." or
// ".." segment is answered 404 with Event Grid's error body naming the plain form, and
// reaches no handler. Before, Go's ServeMux answered it 307 with a plain-text body and the
// plain form in Location, where egrid's API never redirects and answers every error in
// JSON (a client following the redirect would send a publish's body again).
func TestPathsWithEmptyOrDotSegmentsAreNotRedirected(t *testing.T) {
	mux := http.NewServeMux()
	reached := make(chan string, 16)
	mux.HandleFunc("POST /topics/{topic}/api/events", func(w http.ResponseWriter, r *http.Request) {
		reached <- r.URL.Path
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		reached <- r.URL.Path
		http.NotFound(w, r)
	})
	srv := httpserver.New(httpserver.Config{}, mux, httpserver.Requests{}, nil)
	ln := testkit.NewPipeListener()
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	for _, tc := range []struct{ target, plain string }{
		{"//topics/t/api/events", "/topics/t/api/events"},
		{"/topics//t/api/events", "/topics/t/api/events"},
		{"/topics/x/../t/api/events", "/topics/t/api/events"},
		{"/./topics/t/api/events", "/topics/t/api/events"},
		{"/admin//topics/", "/admin/topics/"},
	} {
		resp := post(t, ln, tc.target)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Location") != "" {
			t.Errorf("POST %s: %d, Location %q; want 404 and no redirect", tc.target, resp.StatusCode, resp.Header.Get("Location"))
		}
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != "NotFound" || !strings.Contains(e.Error.Message, "send "+tc.plain) {
			t.Errorf("POST %s: body %q; want Event Grid's error body naming %s", tc.target, body, tc.plain)
		}
	}
	select {
	case p := <-reached:
		t.Errorf("a request for %s reached the handler", p)
	default:
	}

	resp := post(t, ln, "/topics/t/api/events")
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(reached) != 1 {
		t.Errorf("POST of a plain path: %d, reached the handler %d times; want 200, once", resp.StatusCode, len(reached))
	}
	<-reached
	// A "/" sent percent-encoded separates no segment: an explain of the event id
	// "https://example.com/orders/1" or "../etc/x" reaches its route.
	for _, target := range []string{"/events/https:%2F%2Fexample.com%2Forders%2F1", "/events/..%2Fetc%2Fx"} {
		resp := post(t, ln, target)
		resp.Body.Close()
		select {
		case <-reached:
		default:
			t.Errorf("POST %s: %d without reaching the handler; want it passed on", target, resp.StatusCode)
		}
	}
}

// TestH2CPrefaceIsAnsweredAsSuch: the preface of HTTP/2 without TLS (h2c, prior knowledge),
// which egrid does not serve, is answered 505 saying what to send instead, and the connection
// closed; before, its "*" target read as a path and was answered 404 "send /*".
func TestH2CPrefaceIsAnsweredAsSuch(t *testing.T) {
	reached := make(chan string, 1)
	srv := httpserver.New(httpserver.Config{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- r.Method
	}), httpserver.Requests{}, nil)
	ln := testkit.NewPipeListener()
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	c := dial(t, ln)
	defer c.Close()
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct{ Code, Message string }
	}
	if resp.StatusCode != http.StatusHTTPVersionNotSupported || json.Unmarshal(body, &e) != nil || e.Error.Code != "HTTPVersionNotSupported" ||
		!strings.Contains(e.Error.Message, "HTTP/2 without TLS (h2c") || !strings.Contains(e.Error.Message, "--tls-cert") {
		t.Errorf("the h2c preface: %d %q; want 505 saying h2c is not served and what to send instead", resp.StatusCode, body)
	}
	if !resp.Close {
		t.Error("the connection stays open after the h2c preface; want it closed")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("reading on after the answer: %v; want the end of the connection", err)
	}
	select {
	case m := <-reached:
		t.Errorf("the preface reached the handler as a %s request", m)
	default:
	}
}

// post sends POST target verbatim (as the client wrote it, no cleaning) and reads the answer.
func post(t *testing.T, ln *testkit.PipeListener, target string) *http.Response {
	t.Helper()
	c := dial(t, ln)
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "POST "+target+" HTTP/1.1\r\nHost: egrid\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
