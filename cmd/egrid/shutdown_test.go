package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// stuckAppends is a store whose appends never return until released, as on a disk or NATS
// server that stopped answering.
type stuckAppends struct {
	store.Store
	entered chan struct{} // closed at the first append
	once    sync.Once
	release chan struct{}
}

func (s *stuckAppends) Append(ctx context.Context, topic string, t time.Time, events []*schemas.Event) (uint64, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return s.Store.Append(ctx, topic, t, events)
}

// lineWriter hands on the lines written to it and keeps them.
type lineWriter struct {
	mu    sync.Mutex
	all   strings.Builder
	lines chan string
	part  string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.part += string(p)
	for {
		i := strings.IndexByte(w.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case w.lines <- w.part[:i]:
		default:
		}
		w.part = w.part[i+1:]
	}
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// A store that stopped answering holds the router's shutdown: egrid serve stops after its
// grace without closing the store, exits 1 and says what happened and what to check, where it
// closed the store under the shutdown still using it and exited 0 saying "stopped".
func TestServeStopsWhenTheStoreHoldsItsShutdown(t *testing.T) {
	defer func(g time.Duration) { shutdownGrace = g }(shutdownGrace)
	shutdownGrace = time.Second

	dir := t.TempDir()
	cfg := filepath.Join(dir, "egrid.yaml")
	if err := os.WriteFile(cfg, []byte("topics:\n  - name: orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stuck := &stuckAppends{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(stuck.release) // the background shutdown ends with the test
	logs := &lineWriter{lines: make(chan string, 100)}
	e := env{Stdout: io.Discard, Stderr: logs, Getenv: func(string) string { return "" },
		wrapStore: func(st store.Store) store.Store { stuck.Store = st; return stuck }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"egrid", "serve", "--insecure-dev", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--config", cfg}, e)
	}()

	var url string
	for url == "" {
		select {
		case line := <-logs.lines:
			if m := servingRE.FindStringSubmatch(line); m != nil && strings.Contains(line, "egrid serving") {
				url = m[1]
			}
		case code := <-exit:
			t.Fatalf("egrid serve exited with %d before serving:\n%s", code, logs)
		case <-time.After(time.Minute):
			t.Fatalf("egrid serve did not serve within a minute:\n%s", logs)
		}
	}
	go func() { // its append never returns; the server's shutdown gives up on it
		body := `[{"id":"1","subject":"s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","data":{}}]`
		resp, err := http.Post(url+"/topics/orders/api/events?api-version=2018-01-01", "application/json", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-stuck.entered:
	case <-time.After(time.Minute):
		t.Fatalf("the publish did not reach the store within a minute:\n%s", logs)
	}

	cancel()
	select {
	case code := <-exit:
		out := logs.String()
		if code != 1 || !strings.Contains(out, "stopping without closing the store") || !strings.Contains(out, "next start goes on from it") {
			t.Fatalf("exit %d, want 1 with the store left unclosed and why:\n%s", code, out)
		}
	case <-time.After(time.Minute):
		t.Fatalf("egrid serve did not stop within a minute of its signal, with a grace of %s:\n%s", shutdownGrace, logs)
	}
}

// A request still in progress when the HTTP shutdown's grace ends (here a subscription create
// waiting for its endpoint's validation handshake; a client sending its body slowly is the
// same) is cut, and the router's shutdown gets a grace of its own: egrid serve closes the store
// and exits 0. The two shared one grace, so the router's shutdown began with it spent, and
// serve left the store unclosed, blaming a disk that had nothing wrong, and exited 1.
func TestServeClosesTheStoreAfterARequestOutlastsTheGrace(t *testing.T) {
	defer func(g time.Duration) { shutdownGrace = g }(shutdownGrace)
	shutdownGrace = time.Second

	handshake, release := make(chan struct{}, 1), make(chan struct{})
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case handshake <- struct{}{}:
		default:
		}
		select { // the handshake is answered only when the test ends, or egrid gives up
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer endpoint.Close()
	defer close(release) // before the endpoint's Close, which waits for its handler

	dir := t.TempDir()
	cfg := filepath.Join(dir, "egrid.yaml")
	if err := os.WriteFile(cfg, []byte("topics:\n  - name: orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &lineWriter{lines: make(chan string, 100)}
	e := env{Stdout: io.Discard, Stderr: logs, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"egrid", "serve", "--insecure-dev", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--config", cfg}, e)
	}()
	var url string
	for url == "" {
		select {
		case line := <-logs.lines:
			if m := servingRE.FindStringSubmatch(line); m != nil && strings.Contains(line, "egrid serving") {
				url = m[1]
			}
		case code := <-exit:
			t.Fatalf("egrid serve exited with %d before serving:\n%s", code, logs)
		case <-time.After(time.Minute):
			t.Fatalf("egrid serve did not serve within a minute:\n%s", logs)
		}
	}
	go func() {
		body := `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"` + endpoint.URL + `/hook"}}}}`
		req, err := http.NewRequest(http.MethodPut, url+"/admin/topics/orders/eventSubscriptions/slow", strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-handshake: // the create's handler is in progress, waiting for the endpoint
	case <-time.After(time.Minute):
		t.Fatalf("no validation handshake within a minute:\n%s", logs)
	}

	cancel()
	select {
	case code := <-exit:
		out := logs.String()
		if code != 0 || strings.Contains(out, "stopping without closing the store") || !strings.Contains(out, "were cut") || !strings.Contains(out, "stopped") {
			t.Fatalf("exit %d; want 0, the request cut and the store closed:\n%s", code, out)
		}
	case <-time.After(time.Minute):
		t.Fatalf("egrid serve did not stop within a minute of its signal, with a grace of %s:\n%s", shutdownGrace, logs)
	}
}
