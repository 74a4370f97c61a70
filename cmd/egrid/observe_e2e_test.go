package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/probes"
	"github.com/egridio/egrid/testkit"
)

// scrape GETs url and parses the Prometheus text exposition.
func scrape(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	var parser expfmt.TextParser
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// scrapeUntil scrapes url until settled holds of its families, for 10 s at most, and returns
// the last families it read.
func scrapeUntil(t *testing.T, url string, settled func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		fams := scrape(t, url, "")
		if settled(fams) || time.Now().After(deadline) {
			return fams
		}
		<-time.After(20 * time.Millisecond)
	}
}

// sample finds the sample of family name whose labels are exactly labels (name=value pairs),
// or nil.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	for _, m := range f.GetMetric() {
		if len(m.GetLabel())*2 != len(labels) {
			continue
		}
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i < len(labels); i += 2 {
			if v, ok := got[labels[i]]; !ok || v != labels[i+1] {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

// statusEndpoint answers the validation handshake, then every delivery with status.
func statusEndpoint(t *testing.T, status int) *endpoint {
	e := &endpoint{got: make(chan delivery, 1000)}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answerHandshake(w, r) {
			return
		}
		body, _ := io.ReadAll(r.Body)
		e.got <- delivery{header: r.Header.Clone(), body: body}
		w.WriteHeader(status)
	}))
	t.Cleanup(e.Close)
	return e
}

var metricsURLRE = regexp.MustCompile(`"url":"(http://[0-9.:]+/metrics)"`)

// TestMetricsEndpoint scripts a run against the real binary — events published, one
// subscription delivering, one failing with 503, one whose filter matches nothing — and checks
// the counters, histograms and gauges on --metrics-listen with the Prometheus text parser, and
// that the JSON log lines about events carry topic, subscription and eventId.
func TestMetricsEndpoint(t *testing.T) {
	dir := t.TempDir()
	okHook, failHook := newEndpoint(t), statusEndpoint(t, http.StatusServiceUnavailable)
	cfg := fmt.Sprintf(`server:
  logFormat: json
topics:
  - name: orders
    properties: {inputSchema: EventGridSchema}
    eventSubscriptions:
      - name: delivers
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: %q}}
          filter: {includedEventTypes: [Order.Created]}
      - name: fails
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: %q}}
          filter: {includedEventTypes: [Order.Created]}
          retryPolicy: {maxDeliveryAttempts: 1, eventTimeToLiveInMinutes: 60}
      - name: filtered
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: %q}}
          filter:
            advancedFilters: [{operatorType: StringIn, key: data.color, values: [blue]}]
`, okHook.URL, failHook.URL, okHook.URL)
	cfgFile := filepath.Join(dir, "egrid.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 10000)
	srv := startLogged(t, lines, "", "--insecure-dev", "--config", cfgFile, "--data-dir", filepath.Join(dir, "data"),
		"--log-level", "debug", "--metrics-listen", "127.0.0.1:0")

	var events []map[string]any
	for i := range 5 {
		events = append(events, map[string]any{"id": fmt.Sprintf("ev-%d", i), "subject": "/orders/1", "eventType": "Order.Created",
			"eventTime": time.Now().UTC().Format(time.RFC3339), "dataVersion": "1.0", "data": map[string]any{"color": "red"}})
	}
	events = append(events, map[string]any{"id": "ev-other", "subject": "/orders/1", "eventType": "Order.Other",
		"eventTime": time.Now().UTC().Format(time.RFC3339), "dataVersion": "1.0", "data": map[string]any{"color": "red"}})
	body, _ := json.Marshal(events)
	resp, err := http.Post(srv.url+"/topics/orders/api/events?api-version=2018-01-01", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %d", resp.StatusCode)
	}

	// Every attempt's outcome is counted in the actor turn that logs its "delivery attempt"
	// line: once ten are out (five delivered, five failed), the counters are final.
	var metricsURL string
	attempts, dropped := 0, 0
	var logged []map[string]any
	deadline := time.After(60 * time.Second)
	for attempts < 10 || dropped < 5 || metricsURL == "" {
		select {
		case line := <-lines:
			if m := metricsURLRE.FindStringSubmatch(line); m != nil {
				metricsURL = m[1]
			}
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil {
				t.Fatalf("log line is not JSON: %s", line)
			}
			switch rec["msg"] {
			case "delivery attempt":
				attempts++
				logged = append(logged, rec)
			case "event dropped":
				dropped++
				logged = append(logged, rec)
			}
		case <-deadline:
			t.Fatalf("saw %d attempts and %d drops within 60 s, want 10 and 5 (metrics at %q)", attempts, dropped, metricsURL)
		}
	}
	for _, rec := range logged {
		if rec["topic"] != "orders" || (rec["subscription"] != "delivers" && rec["subscription"] != "fails") ||
			!strings.HasPrefix(fmt.Sprint(rec["eventId"]), "ev-") {
			t.Errorf("log line about an event without topic, subscription and eventId: %v", rec)
		}
	}

	fams := scrape(t, metricsURL, "")
	counters := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"egrid_publish_success_count", []string{"topic", "orders"}, 6},
		{"egrid_unmatched_event_count", []string{"topic", "orders"}, 1},
		{"egrid_matched_event_count", []string{"topic", "orders", "subscription", "delivers"}, 5},
		{"egrid_matched_event_count", []string{"topic", "orders", "subscription", "fails"}, 5},
		{"egrid_delivery_success_count", []string{"topic", "orders", "subscription", "delivers"}, 5},
		{"egrid_delivery_attempt_fail_count", []string{"topic", "orders", "subscription", "fails", "error", "Busy"}, 5},
		{"egrid_dropped_event_count", []string{"topic", "orders", "subscription", "fails", "reason", "MaxDeliveryAttemptsExceeded"}, 5},
		{"egrid_advanced_filter_evaluation_count", []string{"topic", "orders", "subscription", "filtered"}, 6},
	}
	for _, c := range counters {
		m := sample(fams, c.name, c.labels...)
		if m == nil {
			t.Errorf("%s%v: missing", c.name, c.labels)
			continue
		}
		if got := m.GetCounter().GetValue(); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, absent := range [][]string{
		{"egrid_matched_event_count", "topic", "orders", "subscription", "filtered"},
		{"egrid_delivery_success_count", "topic", "orders", "subscription", "fails"},
		{"egrid_dead_lettered_count", "topic", "orders", "subscription", "fails", "reason", "MaxDeliveryAttemptsExceeded"},
	} {
		if m := sample(fams, absent[0], absent[1:]...); m != nil {
			t.Errorf("%v = %v, want no sample", absent, m)
		}
	}
	hists := []struct {
		name   string
		labels []string
		count  uint64
	}{
		{"egrid_publish_success_latency_seconds", []string{"topic", "orders"}, 1},
		{"egrid_destination_processing_duration_seconds", []string{"topic", "orders", "subscription", "delivers"}, 5},
		{"egrid_destination_processing_duration_seconds", []string{"topic", "orders", "subscription", "fails"}, 5},
		{"egrid_delivery_latency_seconds", []string{"topic", "orders", "subscription", "delivers"}, 5},
	}
	for _, h := range hists {
		m := sample(fams, h.name, h.labels...)
		if m == nil {
			t.Errorf("%s%v: missing", h.name, h.labels)
			continue
		}
		hist := m.GetHistogram()
		if hist.GetSampleCount() != h.count {
			t.Errorf("%s%v count = %d, want %d", h.name, h.labels, hist.GetSampleCount(), h.count)
		}
		if b := hist.GetBucket(); len(b) == 0 || b[len(b)-1].GetCumulativeCount() > hist.GetSampleCount() {
			t.Errorf("%s%v buckets %v do not add up to count %d", h.name, h.labels, b, hist.GetSampleCount())
		}
	}
	// The publish's acknowledgement waited for a log sync, as did the definitions'.
	if m := sample(fams, "egrid_store_log_sync_seconds"); m == nil {
		t.Error("egrid_store_log_sync_seconds: missing")
	} else if h := m.GetHistogram(); h.GetSampleCount() < 2 || h.GetSampleSum() <= 0 ||
		len(h.GetBucket()) == 0 || h.GetBucket()[len(h.GetBucket())-1].GetCumulativeCount() > h.GetSampleCount() {
		t.Errorf("egrid_store_log_sync_seconds: %d syncs taking %v s in buckets %v, want the synced writes of the config and the publish", h.GetSampleCount(), h.GetSampleSum(), h.GetBucket())
	}
	// The table writes are exported by kind; nothing in this test fills a memtable, so their
	// counts are not checked here (disk's TestLevel0IsCompactedAtItsThreshold does).
	for _, by := range []string{"flush", "compaction"} {
		if m := sample(fams, "egrid_store_table_written_bytes_total", "by", by); m == nil || m.GetCounter() == nil {
			t.Errorf("egrid_store_table_written_bytes_total{by=%q}: missing", by)
		}
	}
	// A subscription publishes its gauges at the end of the actor turn that logged its last
	// attempt, so the scrape above may have come a moment before: scrape until they settle.
	fams = scrapeUntil(t, metricsURL, func(fams map[string]*dto.MetricFamily) bool {
		for _, sub := range []string{"delivers", "fails", "filtered"} {
			for _, g := range []string{"egrid_backlog_events", "egrid_in_flight_attempts", "egrid_oldest_undelivered_age_seconds"} {
				if m := sample(fams, g, "topic", "orders", "subscription", sub); m == nil || m.GetGauge().GetValue() != 0 {
					return false
				}
			}
		}
		return true
	})
	for _, sub := range []string{"delivers", "fails", "filtered"} {
		for _, g := range []string{"egrid_backlog_events", "egrid_in_flight_attempts", "egrid_oldest_undelivered_age_seconds", "egrid_probation_state"} {
			m := sample(fams, g, "topic", "orders", "subscription", sub)
			if m == nil {
				t.Errorf("%s{%s}: missing", g, sub)
				continue
			}
			v := m.GetGauge().GetValue()
			if g == "egrid_probation_state" && sub == "fails" {
				// A 503 puts the endpoint on probation (SPEC §2.2): OnProbation, or
				// AwaitingProbe once its period is over.
				if v != 1 && v != 2 {
					t.Errorf("%s{%s} = %v, want 1 (OnProbation) or 2 (AwaitingProbe)", g, sub, v)
				}
				continue
			}
			if v != 0 {
				t.Errorf("%s{%s} = %v, want 0 (every event settled)", g, sub, v)
			}
		}
	}
	if m := sample(fams, "egrid_dead_letter_outbox_events"); m == nil {
		t.Error("egrid_dead_letter_outbox_events: missing")
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("%s: missing (the Go and process collectors)", name)
		}
	}
	// With --metrics-listen, /metrics is not on --listen; the probes are on both.
	for _, c := range []struct {
		url  string
		want int
	}{
		{srv.url + "/metrics", http.StatusNotFound},
		{srv.url + "/healthz", http.StatusOK},
		{srv.url + "/readyz", http.StatusOK},
		{strings.TrimSuffix(metricsURL, "/metrics") + "/readyz", http.StatusOK},
	} {
		resp, err := http.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s: %d, want %d", c.url, resp.StatusCode, c.want)
		}
	}
	srv.stop(t)
}

// TestMetricsBehindAdminToken: without --metrics-listen, /metrics is on --listen and needs the
// admin token; /healthz and /readyz never need credentials.
func TestMetricsBehindAdminToken(t *testing.T) {
	srv := startServer(t, "--admin-token", "admin-secret", "--data-dir", filepath.Join(t.TempDir(), "data"))
	for _, c := range []struct {
		path, token string
		want        int
		body        string
	}{
		{"/metrics", "", http.StatusUnauthorized, "--metrics-listen"},
		{"/metrics", "wrong", http.StatusUnauthorized, ""},
		{"/metrics", "admin-secret", http.StatusOK, "egrid_dead_letter_outbox_events"},
		{"/healthz", "", http.StatusOK, "ok"},
		{"/readyz", "", http.StatusOK, `"ready":true`},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.url+c.path, nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || !strings.Contains(string(body), c.body) {
			t.Errorf("GET %s (token %q): %d %q, want %d containing %q", c.path, c.token, resp.StatusCode, body, c.want, c.body)
		}
	}
	srv.stop(t)
}

// readyz GETs /readyz at base and returns the status and the report.
func readyz(t *testing.T, base string) (int, probes.Report) {
	t.Helper()
	resp, err := http.Get(base + probes.ReadinessPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep probes.Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	return resp.StatusCode, rep
}

// readyzUntil probes url's readiness until it answers want, for at most 20 pings' worth of
// router.PingInterval, and returns the last answer.
func readyzUntil(t *testing.T, url string, want int) (int, probes.Report) {
	t.Helper()
	deadline := time.Now().Add(20 * router.PingInterval)
	for {
		code, rep := readyz(t, url)
		if code == want || time.Now().After(deadline) {
			return code, rep
		}
		<-time.After(router.PingInterval / 10)
	}
}

// TestReadyzFollowsMinIO: with dead letters going to MinIO, the binary is ready while MinIO
// answers and answers 503 naming the deadLetterStore check once MinIO is gone; it is ready again
// when MinIO is back. /healthz stays 200 throughout: the process is alive.
func TestReadyzFollowsMinIO(t *testing.T) {
	m := testkit.StartMinIO(t)
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--minio-endpoint", m.Endpoint, "--minio-access-key", m.AccessKey, "--minio-secret-key", m.SecretKey)
	if code, rep := readyz(t, srv.url); code != http.StatusOK || !rep.Ready || len(rep.Checks) != 3 {
		t.Fatalf("with MinIO up: %d %+v, want 200 and ready with store, actors and deadLetterStore checks", code, rep)
	}
	m.Stop()
	// The server keeps a ping's result for router.PingInterval (so that probes cannot flood
	// MinIO): probes answer from the last ping until it runs out.
	code, rep := readyzUntil(t, srv.url, http.StatusServiceUnavailable)
	if code != http.StatusServiceUnavailable || rep.Ready {
		t.Fatalf("with MinIO down: %d %+v, want 503", code, rep)
	}
	for _, c := range rep.Checks {
		if c.OK == (c.Name == "deadLetterStore") {
			t.Errorf("check %+v: only deadLetterStore should fail", c)
		}
	}
	resp, err := http.Get(srv.url + probes.LivenessPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz with MinIO down: %d, want 200", resp.StatusCode)
	}
	m.Start()
	if code, rep := readyzUntil(t, srv.url, http.StatusOK); code != http.StatusOK || !rep.Ready {
		t.Errorf("with MinIO back: %d %+v, want 200", code, rep)
	}
	srv.stop(t)
}

// TestReadyzWhenTheStoreTakesNoPublishes: a store below its free-space floor refuses publishes
// (507), so the instance is not ready: /readyz answers 503 naming the store check, while
// /healthz stays 200.
func TestReadyzWhenTheStoreTakesNoPublishes(t *testing.T) {
	dir := t.TempDir()
	total, err := volumeBytes(dir)
	if err != nil {
		t.Skipf("reading the size of the volume: %v (egrid watches no free space on this platform)", err)
	}
	// One byte below the volume's size: the highest floor egrid accepts, above the free space
	// of any volume that holds a file.
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(dir, "data"), "--min-free-disk", strconv.FormatUint(total-1, 10))
	code, rep := readyz(t, srv.url)
	if code != http.StatusServiceUnavailable || rep.Ready {
		t.Fatalf("below the floor: %d %+v, want 503", code, rep)
	}
	for _, c := range rep.Checks {
		if c.OK == (c.Name == "store") {
			t.Errorf("check %+v: only the store should fail", c)
		}
		if c.Name == "store" && !strings.Contains(c.Error, "low-space") {
			t.Errorf("store check error %q, want it to say low-space", c.Error)
		}
	}
	resp, err := http.Get(srv.url + probes.LivenessPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %d, want 200", resp.StatusCode)
	}
	srv.stop(t)
}
