package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
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

// The time scale is a finite number >= 1 wherever it is given. NaN and ±Inf parse as numbers
// (strconv.ParseFloat, YAML's .nan and .inf) but the retry policy refuses them, so a server
// that took one started with every stored subscription Failed while publishes answered 200:
// each is refused with the setting's name and the range it takes.
func TestTimeScaleMustBeFinite(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		file    serverConfig
		setting string // named by the error; "" when the value is accepted
		want    float64
	}{
		{name: "default", want: 1},
		{name: "flag", args: []string{"--time-scale", "600"}, want: 600},
		{name: "env", env: map[string]string{"EGRID_TIME_SCALE": "60"}, want: 60},
		{name: "file", file: serverConfig{TimeScale: 10}, want: 10},
		{name: "flag NaN", args: []string{"--time-scale", "NaN"}, setting: "--time-scale"},
		{name: "flag Inf", args: []string{"--time-scale", "Inf"}, setting: "--time-scale"},
		{name: "flag +Inf", args: []string{"--time-scale", "+Inf"}, setting: "--time-scale"},
		{name: "flag -Inf", args: []string{"--time-scale", "-Inf"}, setting: "--time-scale"},
		{name: "flag below 1", args: []string{"--time-scale", "0.5"}, setting: "--time-scale"},
		{name: "env NaN", env: map[string]string{"EGRID_TIME_SCALE": "nan"}, setting: "EGRID_TIME_SCALE"},
		{name: "env infinity", env: map[string]string{"EGRID_TIME_SCALE": "infinity"}, setting: "EGRID_TIME_SCALE"},
		{name: "file NaN", file: serverConfig{TimeScale: math.NaN()}, setting: "server.timeScale"},
		{name: "file Inf", file: serverConfig{TimeScale: math.Inf(1)}, setting: "server.timeScale"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := resolveServe(t, append([]string{"--insecure-dev"}, tc.args...), tc.env, tc.file)
			if tc.setting == "" {
				if err != nil || s.TimeScale != tc.want {
					t.Fatalf("time scale %v, %v; want %v", s.TimeScale, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.setting) || !strings.Contains(err.Error(), "finite number >= 1") {
				t.Fatalf("time scale %v accepted (error %v); want an error naming %s and the range", s.TimeScale, err, tc.setting)
			}
		})
	}
}

// The config file's timeScale is checked when the file is validated (serve and
// `egrid config validate` both do), YAML's .nan and .inf included.
func TestConfigTimeScaleMustBeFinite(t *testing.T) {
	for _, v := range []string{".nan", ".inf", "-.inf", "0.5", "-1"} {
		cfg, err := decodeConfig([]byte("server:\n  timeScale: "+v+"\n"), func(string) string { return "" })
		if err != nil {
			t.Fatalf("timeScale %s: %v", v, err)
		}
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "server.timeScale") || !strings.Contains(err.Error(), "finite number >= 1") {
			t.Errorf("timeScale: %s: validate = %v; want an error naming server.timeScale and the range", v, err)
		}
	}
	for _, v := range []string{"0", "1", "600"} { // 0: not set
		cfg, err := decodeConfig([]byte("server:\n  timeScale: "+v+"\n"), func(string) string { return "" })
		if err != nil {
			t.Fatalf("timeScale %s: %v", v, err)
		}
		if err := cfg.validate(); err != nil {
			t.Errorf("timeScale: %s: validate = %v, want nil", v, err)
		}
	}
}

// TestValidateReportsABadTimeScaleOnce runs egrid validate on a config whose timeScale is
// NaN: the problem is reported once, not by each of the file's checks, the settings' and the
// router's.
func TestValidateReportsABadTimeScaleOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egrid.yaml")
	if err := os.WriteFile(path, []byte("server:\n  timeScale: .nan\ntopics:\n  - name: orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := cliRun(t, "validate", "--config", path)
	if code == 0 || strings.Count(out, "timeScale") != 1 {
		t.Fatalf("validate: exit %d\n%s\nwant the time scale reported once", code, out)
	}
}
