package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPullFromTheTerminal declares a queue subscription in the YAML config, creates another
// with the CLI's az-style flags, publishes CloudEvents with egrid publish and consumes them
// with `egrid receive --pull` run as the real binary, authenticated by the topic key.
func TestPullFromTheTerminal(t *testing.T) {
	dir := t.TempDir()
	const key = "cHVsbC1lMmUtdGVzdC1rZXktb2YtdGhpcnR5LXR3byE=" // base64 of 32 bytes
	cfgPath := filepath.Join(dir, "egrid.yaml")
	cfg := `server:
  adminToken: tok
topics:
  - name: ns-orders
    properties: {kind: namespace, key1: "` + key + `"}
    eventSubscriptions:
      - name: workers
        properties:
          deliveryConfiguration:
            deliveryMode: Queue
            queue: {receiveLockDurationInSeconds: 60, maxDeliveryCount: 5, eventTimeToLive: PT1H}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := cliRun(t, "validate", "--config", cfgPath); code != 0 {
		t.Fatalf("validate: %d %s", code, out)
	}
	srv := startServer(t, "--config", cfgPath, "--data-dir", filepath.Join(dir, "data"))
	server, token := "--server="+srv.url, "--admin-token=tok"

	// The CLI creates a queue subscription with az-style flags.
	code, out := cliRun(t, "event-subscription", "create", server, token, "--topic", "ns-orders", "--name", "auditors",
		"--delivery-mode", "queue", "--receive-lock-duration", "120", "--max-delivery-count", "3", "--event-ttl", "PT2H")
	if code != 0 || !strings.Contains(out, "Queue") {
		t.Fatalf("create a queue subscription: %d %s", code, out)
	}
	code, out = cliRun(t, "event-subscription", "show", server, token, "--topic", "ns-orders", "--name", "auditors", "-o", "json")
	var shown armSubscription
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil {
		t.Fatalf("show: %d %s", code, out)
	}
	dc, _ := json.Marshal(shown.Properties.DeliveryConfiguration)
	if want := `{"deliveryMode":"Queue","queue":{"receiveLockDurationInSeconds":120,"maxDeliveryCount":3,"eventTimeToLive":"PT2H"}}`; string(dc) != want {
		t.Errorf("deliveryConfiguration %s, want %s", dc, want)
	}
	// Bad values are refused by the server naming the property; queue flags without the
	// queue mode are refused by the CLI.
	if code, out := cliRun(t, "event-subscription", "create", server, token, "--topic", "ns-orders", "--name", "bad",
		"--delivery-mode", "queue", "--max-delivery-count", "11", "--event-ttl", "P8D"); code == 0 || !strings.Contains(out, "maxDeliveryCount") || !strings.Contains(out, "eventTimeToLive") {
		t.Errorf("out-of-range queue settings: %d %s", code, out)
	}
	if code, out := cliRun(t, "event-subscription", "create", server, token, "--topic", "ns-orders", "--name", "bad",
		"--endpoint", "https://example.com/", "--max-delivery-count", "3"); code != 2 || !strings.Contains(out, "--delivery-mode queue") {
		t.Errorf("--max-delivery-count on a push subscription: %d %s", code, out)
	}

	events := `[{"specversion":"1.0","id":"o-1","source":"/orders","type":"Order.Created","data":{"n":1}},` +
		`{"specversion":"1.0","id":"o-2","source":"/orders","type":"Order.Created","data":{"n":2}},` +
		`{"specversion":"1.0","id":"o-3","source":"/orders","type":"Order.Created","data":{"n":3}}]`
	if code, out := cliRun(t, "publish", server, "--topic", "ns-orders", "--key", key, "--data", events); code != 0 {
		t.Fatalf("publish: %d %s", code, out)
	}

	pull := func(sub string, env ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, "receive", "--pull", "--server", srv.url, "--topic", "ns-orders",
			"--subscription", sub, "--max-events", "2", "--count", "3", "--max-wait-time", "10")
		cmd.Env = append(os.Environ(), env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	eventLine := regexp.MustCompile(`(?m)^--- \+\S+ event (\d) deliveryCount=(\d+) lockToken=\S+\n(\{.*\})$`)
	for _, sub := range []string{"workers", "auditors"} {
		stdout, stderr, err := pull(sub, "EGRID_TOPIC_KEY="+key)
		if err != nil {
			t.Fatalf("receive --pull %s: %v\nstdout:\n%s\nstderr:\n%s", sub, err, stdout, stderr)
		}
		var got []string
		for _, m := range eventLine.FindAllStringSubmatch(stdout, -1) {
			var ev struct{ ID string }
			if err := json.Unmarshal([]byte(m[3]), &ev); err != nil {
				t.Fatalf("%s: printed event %s: %v", sub, m[3], err)
			}
			if m[2] != "1" {
				t.Errorf("%s: %s printed with deliveryCount %s, want 1", sub, ev.ID, m[2])
			}
			got = append(got, ev.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"o-1", "o-2", "o-3"}) {
			t.Errorf("%s: printed %q, want o-1, o-2, o-3:\n%s", sub, got, stdout)
		}
		// Two receives of at most 2 events, each acknowledged whole.
		if !strings.Contains(stderr, "acknowledged 2 of 2") || !strings.Contains(stderr, "acknowledged 1 of 1") || strings.Contains(stderr, "not acknowledged") {
			t.Errorf("%s: acknowledgements:\n%s", sub, stderr)
		}
	}

	// A wrong key is refused with the server's reason; missing flags are named.
	stdout, stderr, err := pull("workers", "EGRID_TOPIC_KEY=d3Jvbmc=")
	if err == nil || !strings.Contains(stderr, "401") || !strings.Contains(stderr, "aeg-sas-key") {
		t.Errorf("a wrong key: %v\n%s%s", err, stdout, stderr)
	}
	if code, out := cliRun(t, "receive", "--pull", server, "--topic", "ns-orders"); code != 2 || !strings.Contains(out, "--subscription") {
		t.Errorf("receive --pull without --subscription: %d %s", code, out)
	}
	if code, out := cliRun(t, "receive", "--pull", server, "--topic", "ns-orders", "--subscription", "workers", "--max-events", "101"); code != 2 || !strings.Contains(out, "--max-events 101") {
		t.Errorf("receive --pull --max-events 101: %d %s", code, out)
	}
}

// TestQueueFlagsBuildTheARMBody checks the body create and update send for the queue flags,
// against a server that records it and answers GETs with a stored subscription.
func TestQueueFlagsBuildTheARMBody(t *testing.T) {
	var got string
	stored := `{"name":"s","properties":{}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = w.Write([]byte(stored))
			return
		}
		body, _ := io.ReadAll(r.Body)
		got = string(body)
		_, _ = w.Write([]byte(`{"name":"s","properties":{}}`))
	}))
	defer srv.Close()
	base := []string{"--server", srv.URL, "--topic", "ns-orders", "--name", "s"}
	tests := []struct {
		name   string
		stored string // the subscription update reads first
		args   []string
		want   string // the PUT body; "" when the CLI refuses (exit 2)
	}{
		{name: "create queue", args: []string{"create", "--delivery-mode", "queue", "--receive-lock-duration", "60", "--max-delivery-count", "10", "--event-ttl", "PT1H"},
			want: `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"receiveLockDurationInSeconds":60,"maxDeliveryCount":10,"eventTimeToLive":"PT1H"}}}}`},
		{name: "queue ttl in minutes", args: []string{"create", "--delivery-mode", "Queue", "--event-ttl", "90"},
			want: `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"eventTimeToLive":"PT90M"}}}}`},
		{name: "queue defaults", args: []string{"create", "--delivery-mode", "queue"},
			want: `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue"}}}`},
		{name: "push ttl in ISO 8601", args: []string{"create", "--endpoint", "https://example.com/", "--event-ttl", "PT1H"}},
		{name: "unknown mode", args: []string{"create", "--endpoint", "https://example.com/", "--delivery-mode", "pull"}},
		{name: "lock duration on push", args: []string{"create", "--endpoint", "https://example.com/", "--receive-lock-duration", "60"}},
		{name: "update push to queue drops the destination",
			stored: `{"name":"s","properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://example.com/"}}}}`,
			args:   []string{"update", "--delivery-mode", "queue", "--max-delivery-count", "4"},
			want:   `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"maxDeliveryCount":4}}}}`},
		{name: "update a queue's ttl keeps its other settings",
			stored: `{"name":"s","properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"receiveLockDurationInSeconds":120,"maxDeliveryCount":3}}}}`,
			args:   []string{"update", "--event-ttl", "P1D"},
			want:   `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"receiveLockDurationInSeconds":120,"maxDeliveryCount":3,"eventTimeToLive":"P1D"}}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, stored = "", tt.stored
			args := append([]string{"event-subscription", tt.args[0]}, append(slices.Clone(base), tt.args[1:]...)...)
			code, out := cliRun(t, args...)
			if tt.want == "" {
				if code != 2 || got != "" {
					t.Fatalf("exit %d (body %s): %s; want exit 2 and no request", code, got, out)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, out)
			}
			var g, w any
			_ = json.Unmarshal([]byte(got), &g)
			_ = json.Unmarshal([]byte(tt.want), &w)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("PUT body\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestQueueFlagsAreInTheHelp checks that the help of create and update lists the queue flags
// and shows a queue example.
func TestQueueFlagsAreInTheHelp(t *testing.T) {
	for _, sub := range []string{"create", "update"} {
		_, out := cliRun(t, "event-subscription", sub, "--help")
		for _, flag := range []string{"--delivery-mode", "--receive-lock-duration", "--max-delivery-count", "--event-ttl"} {
			if !strings.Contains(out, flag+" ") {
				t.Errorf("%s --help does not list %s", sub, flag)
			}
		}
	}
	if _, out := cliRun(t, "event-subscription", "create", "--help"); !strings.Contains(out, "--delivery-mode queue --receive-lock-duration 60 --max-delivery-count 10 --event-ttl PT1H") {
		t.Errorf("create --help has no queue example:\n%s", out)
	}
	if _, out := cliRun(t, "receive", "--help"); !strings.Contains(out, "egrid receive --pull --topic") {
		t.Errorf("receive --help has no --pull example:\n%s", out)
	}
}

// TestNamespaceTopicFromTheCLI creates a namespace topic without --input-schema: it takes
// CloudEvents (the only schema a namespace topic takes), and the table says so.
func TestNamespaceTopicFromTheCLI(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = string(body)
		_, _ = w.Write([]byte(`{"name":"ns-orders","properties":{"kind":"namespace"}}`))
	}))
	defer srv.Close()
	code, out := cliRun(t, "topic", "create", "--server", srv.URL, "--name", "ns-orders", "--kind", "namespace")
	if code != 0 || got != `{"properties":{"kind":"namespace"}}` {
		t.Fatalf("topic create --kind namespace: %d %s; sent %s", code, out, got)
	}
	if !strings.Contains(out, "CloudEventSchemaV1_0") {
		t.Errorf("the table does not show the namespace topic's schema:\n%s", out)
	}
}
