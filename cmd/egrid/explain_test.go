package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestExplainThroughTheBinary scripts a failure (503, then 200) against a running server and
// asks `egrid explain` why the event was retried: the answer names the floor rule.
func TestExplainThroughTheBinary(t *testing.T) {
	var calls atomic.Int32
	got := make(chan int, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answerHandshake(w, r) {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		n := int(calls.Add(1))
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		got <- n
	}))
	defer hook.Close()
	// A time scale makes the 30 s floor of a 503 a 50 ms wait.
	srv := startServer(t, "--insecure-dev", "--time-scale", "600", "--data-dir", filepath.Join(t.TempDir(), "data"))
	defer srv.stop(t)
	server := "--server=" + srv.url

	if code, out := cliRun(t, "topic", "create", server, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}
	if code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "billing", "--endpoint", hook.URL+"/hook"); code != 0 {
		t.Fatalf("event-subscription create: %d %s", code, out)
	}
	code, out := cliRun(t, "topic", "key", "list", server, "--name", "orders", "-o", "json")
	var keys map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &keys) != nil {
		t.Fatalf("topic key list: %d %s", code, out)
	}
	if code, out := cliRun(t, "publish", server, "--topic", "orders", "--key", keys["key1"], "--data",
		`{"id":"order-1","subject":"/x","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`); code != 0 {
		t.Fatalf("publish: %d %s", code, out)
	}
	// The second request is the retry: the first attempt's record was queued before the retry
	// was even scheduled, so explain sees it.
	timeout := time.After(60 * time.Second)
	for n := 0; n < 2; {
		select {
		case n = <-got:
		case <-timeout:
			t.Fatalf("the endpoint saw %d requests within 60 s, want 2", calls.Load())
		}
	}

	code, out = cliRun(t, "explain", server, "--topic", "orders", "--subscription", "billing", "--event-id", "order-1")
	if code != 0 || !strings.Contains(out, "event order-1 on orders/billing") || !strings.Contains(out, "503: floor 50ms (over schedule step 1 = 16.666667ms)") {
		t.Fatalf("explain: exit %d, output:\n%s\nwant the 503's floor rule", code, out)
	}
	t.Logf("egrid explain:\n%s", out)
	if !strings.Contains(out, "response: ") || !strings.Contains(out, "503 Service Unavailable") {
		t.Errorf("explain shows no response excerpt of the 503:\n%s", out)
	}

	code, out = cliRun(t, "explain", server, "--topic", "orders", "--subscription", "billing", "--event-id", "order-1", "-o", "json")
	var ex struct {
		EventID  string `json:"eventId"`
		Attempts []struct {
			StatusCode int    `json:"statusCode"`
			Rule       string `json:"rule"`
		} `json:"attempts"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &ex) != nil || ex.EventID != "order-1" || len(ex.Attempts) == 0 ||
		ex.Attempts[0].StatusCode != 503 || ex.Attempts[0].Rule != "Floor" {
		t.Fatalf("explain -o json: exit %d, output:\n%s", code, out)
	}

	code, out = cliRun(t, "explain", server, "--topic", "orders", "--subscription", "billing", "--event-id", "nope-42")
	if code == 0 || !strings.Contains(out, "404") || !strings.Contains(out, "nope-42") {
		t.Fatalf("explain of an unknown event: exit %d, output %s; want a 404 naming nope-42", code, out)
	}
}
