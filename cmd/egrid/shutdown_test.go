package main

import (
	"context"
	"io"
	"net/http"
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
