package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// An explicit 0 in a subscription flag was dropped from the ARM body (0 is "not set" there), so
// the default applied silently; the admin API refuses a 0 it is sent
// (router/httpapi's TestExplicitZeroSettingsAreRefused). The CLI refuses it as a usage error
// naming the flag and its range, and sends nothing.
func TestExplicitZeroFlagsAreRefused(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte(`{"name":"billing","properties":{}}`))
	}))
	defer srv.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-delivery-attempts", "0"}, "--max-delivery-attempts 0 is out of range: use 1-30"},
		{[]string{"--event-ttl", "0"}, "--event-ttl 0 is out of range: use 1-1440 minutes"},
		{[]string{"--event-ttl", "0", "--delivery-mode", "queue"}, "--event-ttl 0 is out of range"},
		{[]string{"--max-events-per-batch", "0"}, "--max-events-per-batch 0 is out of range: use 1-5000"},
		{[]string{"--preferred-batch-size-in-kilobytes", "0"}, "--preferred-batch-size-in-kilobytes 0 is out of range: use 1-1024"},
		{[]string{"--receive-lock-duration", "0", "--delivery-mode", "queue"}, "--receive-lock-duration 0 is out of range: use 60-300 seconds"},
		{[]string{"--max-delivery-count", "0", "--delivery-mode", "queue"}, "--max-delivery-count 0 is out of range: use 1-10"},
	} {
		for _, verb := range []string{"create", "update"} {
			args := append([]string{"event-subscription", verb, "--server", srv.URL, "--topic", "orders", "--name", "billing", "--endpoint", "https://example.com/"}, c.args...)
			before := calls.Load()
			if code, out := cliRun(t, args...); code != 2 || !strings.Contains(out, c.want) {
				t.Errorf("%s %q: exit %d, %s; want exit 2 saying %q", verb, c.args, code, out, c.want)
			}
			if verb == "create" && calls.Load() != before {
				t.Errorf("create %q sent a request; want none", c.args)
			}
		}
	}
	if code, out := cliRun(t, "event-subscription", "create", "--server", srv.URL, "--topic", "orders", "--name", "billing", "--endpoint", "https://example.com/",
		"--max-delivery-attempts", "1", "--event-ttl", "1", "--max-events-per-batch", "1", "--preferred-batch-size-in-kilobytes", "1"); code != 0 {
		t.Errorf("the smallest values: exit %d, %s; want 0", code, out)
	}
}

// The same 0s in a config file's event subscriptions were decoded as "not set" and took the
// default. serve and validate refuse them, naming each one's place in the file and its range.
func TestExplicitZerosInTheConfigAreRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egrid.yaml")
	cfg := `topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: "https://example.com/hook", maxEventsPerBatch: 0, preferredBatchSizeInKilobytes: 0.0}}
          retryPolicy:
            maxDeliveryAttempts: 0
            eventTimeToLiveInMinutes: 0
      - name: audit
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: "https://example.com/audit"}}
          retryPolicy: {maxDeliveryAttempts: 5, eventTimeToLiveInMinutes: null}
  - name: ns-orders
    properties: {kind: namespace}
    eventSubscriptions:
      - name: workers
        properties:
          deliveryConfiguration: {deliveryMode: Queue, queue: {receiveLockDurationInSeconds: 0, maxDeliveryCount: 0}}
      - name: push
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: "https://example.com/ns"}}
          retryPolicy: {maxDeliveryAttempts: 0}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`topics[0].eventSubscriptions[0] ("billing"): properties.destination.properties.maxEventsPerBatch: line 6: 0 is out of range: use 1-5000`,
		`topics[0].eventSubscriptions[0] ("billing"): properties.destination.properties.preferredBatchSizeInKilobytes: line 6: 0 is out of range: use 1-1024`,
		`topics[0].eventSubscriptions[0] ("billing"): properties.retryPolicy.maxDeliveryAttempts: line 8: 0 is out of range: use 1-30 for the eventgrid retry profile, or leave it out for the default, 30`,
		`topics[0].eventSubscriptions[0] ("billing"): properties.retryPolicy.eventTimeToLiveInMinutes: line 9: 0 is out of range: use 1-1440`,
		`topics[1].eventSubscriptions[0] ("workers"): properties.deliveryConfiguration.queue.receiveLockDurationInSeconds: line 19: 0 is out of range: use 60-300 seconds`,
		`topics[1].eventSubscriptions[0] ("workers"): properties.deliveryConfiguration.queue.maxDeliveryCount: line 19: 0 is out of range: use 1-10`,
		`topics[1].eventSubscriptions[1] ("push"): properties.retryPolicy.maxDeliveryAttempts: line 23: 0 is out of range: use 1-10 for the namespace retry profile`,
	}
	for _, cmd := range []string{"validate", "serve"} {
		args := []string{cmd, "--config", path}
		if cmd == "serve" {
			dir := filepath.Join(t.TempDir(), "data")
			args = append(args, "--data-dir", dir)
		}
		code, out := cliRun(t, args...)
		if code != 2 || !strings.Contains(out, "config "+path) {
			t.Fatalf("%s: exit %d, %s; want exit 2 naming the config", cmd, code, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the output does not say %q:\n%s", cmd, w, out)
			}
		}
		if strings.Contains(out, `"audit"`) {
			t.Errorf("%s: a setting that is not 0, or null, is refused:\n%s", cmd, out)
		}
	}
}

// A 0 given through an alias (maxDeliveryAttempts: *zero, of an anchor &zero 0) decodes to the
// same 0, and was taken silently as "not set": the probe saw an alias, not a number.
func TestExplicitZerosThroughAnAliasAreRefused(t *testing.T) {
	cfg := `server:
  maxInFlight: &zero 0
topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          destination: {endpointType: GoChannel, properties: {topic: billing}}
          retryPolicy: {maxDeliveryAttempts: *zero}
      - name: audit
        properties:
          destination: {endpointType: GoChannel, properties: {topic: audit, maxEventsPerBatch: &one 1}}
          retryPolicy: &rp {maxDeliveryAttempts: *one, eventTimeToLiveInMinutes: *zero}
      - name: copy
        properties:
          destination: {endpointType: GoChannel, properties: {topic: copy}}
          retryPolicy: *rp
`
	cfgv, err := decodeConfig([]byte(cfg), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range explicitZeros([]byte(cfg), cfgv) {
		got = append(got, e.Error())
	}
	want := []string{
		`topics[0].eventSubscriptions[0] ("billing"): properties.retryPolicy.maxDeliveryAttempts: line 9: 0 is out of range`,
		`topics[0].eventSubscriptions[1] ("audit"): properties.retryPolicy.eventTimeToLiveInMinutes: line 13: 0 is out of range`,
		`topics[0].eventSubscriptions[2] ("copy"): properties.retryPolicy.eventTimeToLiveInMinutes: line 13: 0 is out of range`,
	}
	if len(got) != len(want) {
		t.Fatalf("refused %d settings, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("refusal %d = %q, want it to start %q", i, got[i], w)
		}
	}
}
