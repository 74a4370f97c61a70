package blob_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/blob"
)

// slowServer is a fake S3 server answering every HEAD and GET with the headers of a 1000-byte object
// and a first few bytes of it; body then sends the rest, or holds it back.
func slowServer(t *testing.T, body func(w http.ResponseWriter, r *http.Request, flush func())) *blob.Store {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.Header().Set("Last-Modified", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write([]byte("[{\"id\":\"1\""))
		flush := func() { _ = http.NewResponseController(w).Flush() }
		flush()
		body(w, r, flush)
	}))
	return fastTimingOut(t, srv)
}

// A server that stalls in the middle of an object's content, or trickles it, fails the Get
// at the read timeout with an error naming the object and the timeout, instead of holding
// the reader (a replay re-reading an object has no other deadline) for as long as the server
// keeps the connection. Before, Get waited for as long as its caller's context allowed.
func TestGetOfAStallingServerTimesOut(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	for _, tt := range []struct {
		name string
		body func(w http.ResponseWriter, r *http.Request, flush func())
	}{
		{"stalls", func(_ http.ResponseWriter, r *http.Request, _ func()) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}},
		{"trickles", func(w http.ResponseWriter, r *http.Request, flush func()) {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for range 990 { // a byte every 20 ms: 20 s for the object
				select {
				case <-tick.C:
				case <-r.Context().Done():
					return
				}
				if _, err := w.Write([]byte(" ")); err != nil {
					return
				}
				flush()
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := slowServer(t, tt.body)
			// The caller's own deadline is far beyond the read timeout: it only keeps a
			// failing test from hanging.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _, err := s.Get(ctx, "dead-letters", "SUB/2026/1/1/0/x.json", 1<<20)
			if ctx.Err() != nil {
				t.Fatalf("Get returned only when its caller's context ended (%v), not at the read timeout", err)
			}
			if err == nil {
				t.Fatal("Get of a stalled object succeeded")
			}
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "dead-letters/SUB/2026/1/1/0/x.json") || !strings.Contains(err.Error(), "readTimeout") {
				t.Errorf("error %q: want it to name the object and the read timeout", err)
			}
		})
	}
}

// A server that stops answering in the middle of a listing fails the List at the read
// timeout with an error naming the listing, the server and the timeout, instead of holding
// the lister (list, show, a replay, explain) for as long as its caller waits. Before, a
// listing was bounded only by its caller's context.
func TestListOfAStallingServerTimesOut(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>dead-letters</Name>`))
		_ = http.NewResponseController(w).Flush()
		select { // the rest of the page never comes
		case <-release:
		case <-r.Context().Done():
		}
	}))
	s := fastTimingOut(t, srv)
	// The caller's own deadline is far beyond the read timeout: it only keeps a failing test
	// from hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.List(ctx, "dead-letters", sinks.ListQuery{Prefix: "SUB/"})
	if ctx.Err() != nil {
		t.Fatalf("List returned only when its caller's context ended (%v), not at the read timeout", err)
	}
	if err == nil {
		t.Fatal("List of a stalled server succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "listing dead-letters/SUB/*") ||
		!strings.Contains(err.Error(), srv.Listener.Addr().String()) || !strings.Contains(err.Error(), "readTimeout") {
		t.Errorf("error %q: want it to name the listing, the server and the read timeout", err)
	}
}

// fastTimingOut is a store on srv, closed when t ends, whose reads and listings time out after
// 200 ms.
func fastTimingOut(t *testing.T, srv *httptest.Server) *blob.Store {
	t.Helper()
	t.Cleanup(srv.Close)
	s, err := blob.New(blob.Config{
		Endpoint: strings.TrimPrefix(srv.URL, "http://"), AccessKey: "k", SecretKey: "secret-key", Region: "us-east-1",
		ReadTimeout: 200 * time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
