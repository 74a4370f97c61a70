package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/console"
	"github.com/egridio/egrid/router/httpapi"
)

// startInProcess serves a real router (in memory, --insecure-dev) with serve's handler on
// 127.0.0.1, for CLI tests that need a server but not the binary.
func startInProcess(t *testing.T) string {
	t.Helper()
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mainHandler(r, prometheus.NewRegistry(), nil, httpapi.New(r), console.NewAttempts(0), slog.New(slog.DiscardHandler)))
	t.Cleanup(func() {
		srv.Close()
		_ = r.Close(context.Background())
	})
	return srv.URL
}

// TestNamesAreOnePathSegment: a name holding '?', '#' or '/' (or one that is "..") reaches the
// server whole, as one path segment, so the server refuses it; it is never cut short into
// another topic's or subscription's path. `topic delete --name 'orders?typo'` once deleted
// orders, exited 0 and said "deleted topic orders?typo".
func TestNamesAreOnePathSegment(t *testing.T) {
	server := "--server=" + startInProcess(t)
	if code, out := cliRun(t, "topic", "create", server, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}
	if code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "billing",
		"--endpoint", "http://127.0.0.1:9/hook", "--skip-validation"); code != 0 {
		t.Fatalf("event-subscription create: %d %s", code, out)
	}
	for _, name := range []string{"orders?typo", "orders#typo", "orders/x/..", "orders/", ".."} {
		code, out := cliRun(t, "topic", "delete", server, "--name", name)
		if code == 0 || strings.Contains(out, "deleted") {
			t.Errorf("topic delete --name %q: exit %d, %q; want the server's refusal", name, code, out)
		}
		if code, out := cliRun(t, "topic", "show", server, "--name", "orders"); code != 0 {
			t.Fatalf("after topic delete --name %q, topic orders is gone: %d %s", name, code, out)
		}
		code, out = cliRun(t, "event-subscription", "delete", server, "--topic", "orders", "--name", strings.Replace(name, "orders", "billing", 1))
		if code == 0 || strings.Contains(out, "deleted") {
			t.Errorf("event-subscription delete --name %q: exit %d, %q; want the server's refusal", name, code, out)
		}
		if code, out := cliRun(t, "event-subscription", "show", server, "--topic", "orders", "--name", "billing"); code != 0 {
			t.Fatalf("after event-subscription delete --name %q, billing is gone: %d %s", name, code, out)
		}
		code, out = cliRun(t, "publish", server, "--topic", name, "--data", `{"id":"1","subject":"/x","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`)
		if code == 0 || strings.Contains(out, "published") {
			t.Errorf("publish --topic %q: exit %d, %q; want the server's refusal", name, code, out)
		}
	}
	// The refusal is the server's: it names the topic it did not find.
	if _, out := cliRun(t, "topic", "delete", server, "--name", "orders?typo"); !strings.Contains(out, "404") {
		t.Errorf("topic delete --name orders?typo: %q; want the server's 404", out)
	}
}

// TestPublishReadsABoundedAnswer: publish reads at most 1 MiB of the server's answer, as the
// other commands bound theirs, however much --server sends.
func TestPublishReadsABoundedAnswer(t *testing.T) {
	big := strings.Repeat("x", 4<<20)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, big)
	}))
	defer fake.Close()
	code, out := cliRun(t, "publish", "--server", fake.URL, "--topic", "orders", "--data", `{"id":"1"}`)
	if code != 1 || len(out) > maxPublishAnswer+100 {
		t.Errorf("publish against a server answering 4 MiB: exit %d, %d bytes printed; want exit 1 and at most %d", code, len(out), maxPublishAnswer+100)
	}
}

// TestNotEgridsAnswer: a --server that is not egrid's, answering 200 with HTML, gets an error
// that says so and what to check, not only the JSON decoder's complaint.
func TestNotEgridsAnswer(t *testing.T) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><body>Welcome to nginx!</body></html>")
	}))
	defer fake.Close()
	code, out := cliRun(t, "topic", "list", "--server", fake.URL)
	if code != 1 || !strings.Contains(out, "the answer of GET /admin/topics from --server "+fake.URL+" is not egrid's JSON") || !strings.Contains(out, "check --server") {
		t.Errorf("topic list against a web server: exit %d, %q; want exit 1 naming the call, the server and what to check", code, out)
	}
}

// TestOutputFormatIsChecked: -o takes table or json; anything else is a usage error (exit 2)
// before the command does anything, where -o jsn printed a table and exited 0.
func TestOutputFormatIsChecked(t *testing.T) {
	server := "--server=" + startInProcess(t)
	for _, args := range [][]string{
		{"topic", "create", server, "--name", "orders", "-o", "jsn"},
		{"topic", "list", server, "--output", "yaml"},
		{"explain", server, "--topic", "orders", "--subscription", "s", "--event-id", "1", "-o", "JSON "},
	} {
		code, out := cliRun(t, args...)
		if code != 2 || !strings.Contains(out, "use table or json") {
			t.Errorf("%s: exit %d, %q; want exit 2 saying to use table or json", strings.Join(args, " "), code, out)
		}
	}
	if code, out := cliRun(t, "topic", "list", server, "-o", "json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("topic list -o json: exit %d, %q; want [] (and no topic created by the refused create)", code, out)
	}
	if code, out := cliRun(t, "topic", "list", server, "-o", "table"); code != 0 || !strings.HasPrefix(out, "NAME") {
		t.Errorf("topic list -o table: exit %d, %q", code, out)
	}
}
