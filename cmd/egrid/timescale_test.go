package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// arrival is one delivery attempt a flaky endpoint received.
type arrival struct {
	at    time.Time
	count string // aeg-delivery-count
	ids   []string
}

// newFlakyEndpoint is a local webhook that answers the first fail notifications with 500 and
// later ones with 200, recording when each arrived. It answers a subscription validation
// handshake (SPEC §2.5) without counting it.
func newFlakyEndpoint(t *testing.T, fail int) (*httptest.Server, <-chan arrival) {
	got := make(chan arrival, 100)
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		var events []struct {
			ID   string `json:"id"`
			Data struct {
				ValidationCode string `json:"validationCode"`
			} `json:"data"`
		}
		_ = json.Unmarshal(body, &events)
		if r.Header.Get("aeg-event-type") == "SubscriptionValidation" && len(events) == 1 {
			_ = json.NewEncoder(w).Encode(map[string]string{"validationResponse": events[0].Data.ValidationCode})
			return
		}
		a := arrival{at: at, count: r.Header.Get("aeg-delivery-count")}
		for _, e := range events {
			a.ids = append(a.ids, e.ID)
		}
		mu.Lock()
		n++
		failing := n <= fail
		mu.Unlock()
		got <- a
		if failing {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// TestTimeScaleRunsTheScheduleFaster drives the real binary with --time-scale 600 against a
// local endpoint that fails twice, then succeeds: the three attempts arrive in order, and the
// gaps between them follow the schedule's 10 s then 30 s, 600 times faster (about 17 ms and
// 50 ms plus jitter and HTTP latency). Only the order and the ratio are asserted, never
// absolute times.
func TestTimeScaleRunsTheScheduleFaster(t *testing.T) {
	hook, got := newFlakyEndpoint(t, 2)
	srv := startServer(t, "--insecure-dev", "--time-scale", "600", "--data-dir", filepath.Join(t.TempDir(), "data"))
	server := "--server=" + srv.url
	if code, out := cliRun(t, "topic", "create", server, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}
	if code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "flaky",
		"--endpoint", hook.URL+"/api/events", "--max-delivery-attempts", "5"); code != 0 {
		t.Fatalf("event-subscription create: %d %s", code, out)
	}
	body := `[{"id":"ts-1","subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{},"dataVersion":"1.0"}]`
	resp, err := http.Post(srv.url+"/topics/orders/api/events?api-version=2018-01-01", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %d", resp.StatusCode)
	}

	var arrivals []arrival
	timeout := time.After(60 * time.Second)
	for len(arrivals) < 3 {
		select {
		case a := <-got:
			arrivals = append(arrivals, a)
		case <-timeout:
			t.Fatalf("received %d attempts within 60 s, want 3", len(arrivals))
		}
	}
	for i, a := range arrivals {
		if want := []string{"0", "1", "2"}[i]; a.count != want || len(a.ids) != 1 || a.ids[0] != "ts-1" {
			t.Errorf("attempt %d: aeg-delivery-count %q with events %v; want %s with [ts-1]", i+1, a.count, a.ids, want)
		}
	}
	first, second := arrivals[1].at.Sub(arrivals[0].at), arrivals[2].at.Sub(arrivals[1].at)
	t.Logf("gaps at --time-scale 600: %v after the first 500 (10 s scaled: 16.7 ms), %v after the second (30 s scaled: 50 ms)", first, second)
	if second <= first {
		t.Errorf("the second gap (%v) is not longer than the first (%v); the schedule waits 10 s, then 30 s", second, first)
	}
	srv.stop(t)
}
