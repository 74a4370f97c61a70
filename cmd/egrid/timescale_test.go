package main

import (
	"encoding/json"
	"fmt"
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
	count string // aeg-delivery-count
	ids   []string
}

// newFlakyEndpoint is a local webhook that answers the first fail notifications with 500 and
// later ones with 200, passing each on in the order it arrived. It answers a subscription
// validation handshake (SPEC §2.5) without counting it.
func newFlakyEndpoint(t *testing.T, fail int) (*httptest.Server, <-chan arrival) {
	got := make(chan arrival, 100)
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		a := arrival{count: r.Header.Get("aeg-delivery-count")}
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
// local endpoint that fails four times, then succeeds: five attempts arrive, in order
// (aeg-delivery-count 0 to 4), each with the one event, and no other attempt by the time the
// server stops. The schedule's first four delays add up to 6 min 40 s (10 s, 30 s, 1 min,
// 5 min), so the fifth attempt can only come within the test's 60 s bound when the delays run
// 600 times faster (0.67 s); nothing else is timed.
func TestTimeScaleRunsTheScheduleFaster(t *testing.T) {
	const fail = 4
	hook, got := newFlakyEndpoint(t, fail)
	srv := startServer(t, "--insecure-dev", "--time-scale", "600", "--data-dir", filepath.Join(t.TempDir(), "data"))
	server := "--server=" + srv.url
	if code, out := cliRun(t, "topic", "create", server, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}
	if code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "flaky",
		"--endpoint", hook.URL+"/api/events", "--max-delivery-attempts", "10"); code != 0 {
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
	for len(arrivals) < fail+1 {
		select {
		case a := <-got:
			arrivals = append(arrivals, a)
		case <-timeout:
			t.Fatalf("received %d attempts within 60 s, want %d: the 6 min 40 s of retry delays did not run 600 times faster", len(arrivals), fail+1)
		}
	}
	srv.stop(t)
	for more := true; more; {
		select {
		case a := <-got:
			arrivals = append(arrivals, a)
		default:
			more = false
		}
	}
	if len(arrivals) != fail+1 {
		t.Errorf("%d attempts by the time the server stopped; want %d (%d failures, then one success)", len(arrivals), fail+1, fail)
	}
	for i, a := range arrivals {
		if want := fmt.Sprint(i); a.count != want || len(a.ids) != 1 || a.ids[0] != "ts-1" {
			t.Errorf("attempt %d: aeg-delivery-count %q with events %v; want %s with [ts-1]", i+1, a.count, a.ids, want)
		}
	}
}
