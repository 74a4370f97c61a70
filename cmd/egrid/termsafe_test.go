package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
)

// hostile is text that a terminal obeys: set the window title (OSC 0, ended by BEL), clear the
// screen (CSI 2J), write the clipboard (OSC 52), and CSI as the one C1 character U+009B.
const hostile = "\x1b]0;PWNED\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\u009b2J"

// requireNoControls fails if out holds a character a terminal would obey (other than newline
// and tab).
func requireNoControls(t *testing.T, what, out string) {
	t.Helper()
	if i := strings.IndexFunc(out, func(r rune) bool {
		return r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f))
	}); i >= 0 {
		t.Errorf("%s prints a control character (%q at byte %d):\n%q", what, out[i:i+1], i, out)
	}
}

// hijackAnswer writes the status line "HTTP/1.1 " + status on r's raw connection, as net/http's
// own server never would.
func hijackAnswer(t *testing.T, w http.ResponseWriter, r *http.Request, status string) {
	_, _ = io.Copy(io.Discard, r.Body)
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijacking: %v", err)
		return
	}
	defer conn.Close()
	_, _ = rw.WriteString("HTTP/1.1 " + status + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	_ = rw.Flush()
}

// TestEndpointStatusReachesTheTerminalEscaped: an endpoint whose status line carries escape
// sequences can no longer drive the terminal of whoever runs `egrid event-subscription create`
// (the failed handshake's error) or `egrid explain` (the attempt's response).
func TestEndpointStatusReachesTheTerminalEscaped(t *testing.T) {
	got := make(chan struct{}, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/refuses":
			hijackAnswer(t, w, r, "400 "+hostile)
		case answerHandshake(w, r):
		default:
			hijackAnswer(t, w, r, "503 "+hostile)
			got <- struct{}{}
		}
	}))
	defer hook.Close()
	// A time scale makes the 30 s floor of a 503 a 50 ms wait.
	srv := startServer(t, "--insecure-dev", "--time-scale", "600", "--data-dir", filepath.Join(t.TempDir(), "data"))
	defer srv.stop(t)
	server := "--server=" + srv.url
	if code, out := cliRun(t, "topic", "create", server, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}

	code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "refused", "--endpoint", hook.URL+"/refuses")
	if code == 0 || !strings.Contains(out, `PWNED`) {
		t.Fatalf("event-subscription create against an endpoint answering 400: exit %d, %q; want the handshake's failure", code, out)
	}
	requireNoControls(t, "event-subscription create", out)

	if code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "billing", "--endpoint", hook.URL+"/hook"); code != 0 {
		t.Fatalf("event-subscription create: %d %s", code, out)
	}
	if code, out := cliRun(t, "publish", server, "--topic", "orders", "--data",
		`{"id":"order-1","subject":"/x","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`); code != 0 {
		t.Fatalf("publish: %d %s", code, out)
	}
	// The second request is the retry: the first attempt's record was queued before the retry
	// was scheduled, so explain sees it.
	timeout := time.After(60 * time.Second)
	for range 2 {
		select {
		case <-got:
		case <-timeout:
			t.Fatal("the endpoint did not see the delivery and its retry within 60 s")
		}
	}
	code, out = cliRun(t, "explain", server, "--topic", "orders", "--subscription", "billing", "--event-id", "order-1")
	if code != 0 || !strings.Contains(out, "response: ") || !strings.Contains(out, "PWNED") {
		t.Fatalf("explain: exit %d, output:\n%s\nwant the 503's response", code, out)
	}
	requireNoControls(t, "explain", out)
}

// TestPrintedServerTextIsEscaped: whatever the server sends, the CLI's printers (tables and
// their notes, explain, errors) show control characters escaped, and plain text as it is.
func TestPrintedServerTextIsEscaped(t *testing.T) {
	t.Run("tables", func(t *testing.T) {
		var buf bytes.Buffer
		var sub armSubscription
		sub.Name = "billing" + hostile
		sub.Properties.ProvisioningState = "Failed"
		sub.Properties.ProvisioningMessage = "endpoint answered " + hostile
		sub.Properties.Destination.EndpointType = "webhook"
		sub.Properties.Destination.Properties.EndpointURL = "https://hook.example/é"
		if err := printSubscriptions(env{Stdout: &buf}, "table", sub); err != nil {
			t.Fatal(err)
		}
		if err := printTopics(env{Stdout: &buf}, "table", armTopic{Name: "orders\ttab\nnewline" + hostile}); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		requireNoControls(t, "the tables", out)
		if strings.Count(out, "\n") != 5 || !strings.Contains(out, `billing\x1b]0;PWNED\a\x1b[2J`) || !strings.Contains(out, `orders\ttab\nnewline`) || !strings.Contains(out, "https://hook.example/é") {
			t.Errorf("tables:\n%s\nwant 5 lines, the hostile text escaped, plain text as it is", out)
		}
	})
	t.Run("explain", func(t *testing.T) {
		var buf bytes.Buffer
		printExplanation(env{Stdout: &buf}, &router.Explanation{
			EventID: "order-1" + hostile, Topic: "orders", Subscription: "billing", State: router.EventDeadLettered, Reason: "MaxDeliveryAttemptsExceeded", DeadLetterObject: "billing/x" + hostile,
			Attempts: []router.ExplainedAttempt{{Attempt: 1, Outcome: "Busy", StatusCode: 503, Explanation: "retry" + hostile, Response: "503 " + hostile}},
		})
		requireNoControls(t, "explain", buf.String())
		if !strings.Contains(buf.String(), `response: 503 \x1b]0;PWNED`) {
			t.Errorf("explain:\n%s\nwant the response escaped", buf.String())
		}
	})
	t.Run("errors", func(t *testing.T) {
		fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": "Bad" + hostile, "message": "no\n" + hostile,
				"details": []map[string]string{{"message": "one" + hostile}, {"message": "two"}}}})
		}))
		defer fake.Close()
		code, out := cliRun(t, "topic", "show", "--server", fake.URL, "--name", "orders")
		requireNoControls(t, "an error", out)
		if code != 1 || !strings.Contains(out, "\n  - one\\x1b]0;PWNED") {
			t.Errorf("topic show against a hostile server: exit %d, %q; want exit 1 and the details escaped, one a line", code, out)
		}
	})
}
