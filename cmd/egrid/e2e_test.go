package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/messaging"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/eventgrid/azeventgrid"
)

// binary is the egrid binary built once for the end-to-end tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "egrid-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "egrid")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building egrid:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running egrid server.
type proc struct {
	cmd    *exec.Cmd
	url    string
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan error
}

var servingRE = regexp.MustCompile(`url"?[=:]"?(https?://[0-9.:]+)`) // text or JSON logs

// startServer runs `egrid serve args...` and waits (bounded) for its "serving" log line.
func startServer(t *testing.T, args ...string) *proc {
	t.Helper()
	return startLogged(t, nil, "", args...)
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("egrid serve exited with %v after SIGTERM:\n%s", err, p.log())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("egrid serve did not stop within 60 s of SIGTERM")
	}
}

// delivery is one request a test endpoint received.
type delivery struct {
	header http.Header
	body   []byte
}

// endpoint is a local webhook that records deliveries.
type endpoint struct {
	*httptest.Server
	got chan delivery
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{got: make(chan delivery, 1000)}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answerHandshake(w, r) { // as Event Grid handlers do (SPEC §2.5); not a delivery
			return
		}
		body, _ := io.ReadAll(r.Body)
		e.got <- delivery{header: r.Header.Clone(), body: body}
	}))
	t.Cleanup(e.Close)
	return e
}

// await collects n deliveries, failing after a bound.
func (e *endpoint) await(t *testing.T, n int) []delivery {
	t.Helper()
	var out []delivery
	timeout := time.After(60 * time.Second)
	for len(out) < n {
		select {
		case d := <-e.got:
			out = append(out, d)
		case <-timeout:
			t.Fatalf("received %d deliveries within 60 s, want %d", len(out), n)
		}
	}
	return out
}

// selfSigned writes a certificate and key for 127.0.0.1 and returns their paths and a pool
// trusting the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egrid test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestEndToEnd drives the real binary: topics and subscriptions from a YAML config, publishes
// with the official Azure SDK publisher client (shared key over TLS) and with raw CloudEvents
// HTTP, and checks every delivery's headers and body shape.
func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	egHook, ceHook := newEndpoint(t), newEndpoint(t)
	cfg := fmt.Sprintf(`server:
  adminToken: admin-secret
  allowHttpEndpoints: true    # the test endpoints are plain-http servers
  egress: {allow: [127.0.0.1]} # on loopback
topics:
  - name: orders
    properties: {inputSchema: EventGridSchema}
    eventSubscriptions:
      - name: billing
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: %q}}
          retryPolicy: {maxDeliveryAttempts: 5, eventTimeToLiveInMinutes: 60}
  - name: ce-orders
    properties: {inputSchema: CloudEventSchemaV1_0}
    eventSubscriptions:
      - name: ce-billing
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: %q}}
          eventDeliverySchema: CloudEventSchemaV1_0
`, egHook.URL+"/eg", ceHook.URL+"/ce")
	cfgFile := filepath.Join(dir, "egrid.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "validate", "--config", cfgFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "valid") {
		t.Fatalf("egrid validate: %v\n%s", err, out)
	}
	srv := startServer(t, "--config", cfgFile, "--data-dir", filepath.Join(dir, "data"), "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(srv.url, "https://") {
		t.Fatalf("server URL %s, want https", srv.url)
	}
	httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	keys := map[string]string{}
	for _, topic := range []string{"orders", "ce-orders"} {
		req, _ := http.NewRequest(http.MethodPost, srv.url+"/admin/topics/"+topic+"/listKeys", nil)
		req.Header.Set("Authorization", "Bearer admin-secret")
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var k map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&k)
		resp.Body.Close()
		if resp.StatusCode != 200 || k["key1"] == "" {
			t.Fatalf("listKeys %s: %d %v", topic, resp.StatusCode, k)
		}
		keys[topic] = k["key1"]
	}

	// The official Azure SDK publisher client, shared key credential, over TLS.
	client, err := azeventgrid.NewClientWithSharedKeyCredential(srv.url+"/topics/orders/api/events",
		azcore.NewKeyCredential(keys["orders"]), &azeventgrid.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: httpc}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	var sdkEvents []azeventgrid.Event
	for i := range 3 {
		sdkEvents = append(sdkEvents, azeventgrid.Event{
			ID: to.Ptr(fmt.Sprintf("sdk-%d", i)), Subject: to.Ptr("/orders/1"), EventType: to.Ptr("Order.Created"),
			EventTime: &now, DataVersion: to.Ptr("1.0"), Data: map[string]any{"n": i},
		})
	}
	if _, err := client.PublishEvents(context.Background(), sdkEvents, nil); err != nil {
		t.Fatalf("Azure SDK PublishEvents: %v", err)
	}

	// The SDK's CloudEvents publisher to the CloudEvents topic.
	ceClient, err := azeventgrid.NewClientWithSharedKeyCredential(srv.url+"/topics/ce-orders/api/events",
		azcore.NewKeyCredential(keys["ce-orders"]), &azeventgrid.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: httpc}})
	if err != nil {
		t.Fatal(err)
	}
	ce, err := messaging.NewCloudEvent("/orders", "Order.Shipped", map[string]any{"n": 1}, &messaging.CloudEventOptions{DataContentType: to.Ptr("application/json")})
	if err != nil {
		t.Fatal(err)
	}
	ce.ID = "sdk-ce-1"
	if _, err := ceClient.PublishCloudEvents(context.Background(), []messaging.CloudEvent{ce}, nil); err != nil {
		t.Fatalf("Azure SDK PublishCloudEvents: %v", err)
	}

	// curl-shaped raw HTTP: a CloudEvents batch, a single structured event, and binary mode.
	raw := []struct {
		path, ctype, body string
		header            map[string]string
	}{
		{"/topics/ce-orders/api/events", "application/cloudevents-batch+json; charset=utf-8", `[{"specversion":"1.0","id":"raw-1","source":"/orders","type":"Order.Shipped","data":{"n":2}}]`, nil},
		{"/topics/ce-orders:publish?api-version=2023-11-01", "application/cloudevents+json; charset=utf-8", `{"specversion":"1.0","id":"raw-2","source":"/orders","type":"Order.Shipped","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","data":{"n":3}}`, nil},
		{"/topics/ce-orders:publish?api-version=2023-11-01", "application/json", `{"n":4}`, map[string]string{"ce-specversion": "1.0", "ce-id": "raw-3", "ce-source": "/orders", "ce-type": "Order.Shipped"}},
	}
	for _, r := range raw {
		req, _ := http.NewRequest(http.MethodPost, srv.url+r.path, strings.NewReader(r.body))
		req.Header.Set("Content-Type", r.ctype)
		req.Header.Set("aeg-sas-key", keys["ce-orders"])
		for k, v := range r.header {
			req.Header.Set(k, v)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("raw publish to %s: %d %s", r.path, resp.StatusCode, body)
		}
	}

	// Event Grid schema deliveries: one event per request, a one-element array.
	seen := map[string]bool{}
	for _, d := range egHook.await(t, 3) {
		checkHeaders(t, d, "BILLING", "application/json; charset=utf-8", "1")
		if d.header.Get("aeg-data-version") != "1.0" {
			t.Errorf("aeg-data-version %q, want 1.0", d.header.Get("aeg-data-version"))
		}
		var evs []map[string]any
		if err := json.Unmarshal(d.body, &evs); err != nil || len(evs) != 1 {
			t.Fatalf("Event Grid delivery body %s: want a one-element array", d.body)
		}
		ev := evs[0]
		seen[ev["id"].(string)] = true
		if !strings.HasSuffix(ev["topic"].(string), "/topics/orders") || ev["metadataVersion"] != "1" || ev["eventType"] != "Order.Created" {
			t.Errorf("delivered event %v: want topic stamped, metadataVersion 1", ev)
		}
		if d.header.Get("aeg-output-event-id") != ev["id"] {
			t.Errorf("aeg-output-event-id %q, want %v", d.header.Get("aeg-output-event-id"), ev["id"])
		}
	}
	for i := range 3 {
		if !seen[fmt.Sprintf("sdk-%d", i)] {
			t.Errorf("sdk-%d was not delivered (got %v)", i, seen)
		}
	}
	// CloudEvents deliveries: a single structured object per request.
	ceSeen := map[string]map[string]any{}
	for _, d := range ceHook.await(t, 4) {
		checkHeaders(t, d, "CE-BILLING", "application/cloudevents+json; charset=utf-8", "1.0")
		var ev map[string]any
		if err := json.Unmarshal(d.body, &ev); err != nil {
			t.Fatalf("CloudEvents delivery body %s: want one JSON object", d.body)
		}
		ceSeen[ev["id"].(string)] = ev
		if ev["id"] == "raw-2" && d.header.Get("traceparent") == "" {
			t.Errorf("raw-2 carried a traceparent; the delivery has none")
		}
	}
	for _, id := range []string{"sdk-ce-1", "raw-1", "raw-2", "raw-3"} {
		if ceSeen[id] == nil {
			t.Errorf("%s was not delivered (got %d events)", id, len(ceSeen))
		}
	}
	if ev := ceSeen["raw-3"]; ev != nil && (ev["datacontenttype"] != "application/json" || ev["data"].(map[string]any)["n"] != float64(4)) {
		t.Errorf("binary-mode event delivered as %v, want structured with data {n:4}", ev)
	}

	srv.stop(t)
}

func checkHeaders(t *testing.T, d delivery, sub, contentType, metadataVersion string) {
	t.Helper()
	for k, want := range map[string]string{
		"aeg-event-type": "Notification", "aeg-subscription-name": sub, "aeg-delivery-count": "0",
		"Content-Type": contentType, "aeg-metadata-version": metadataVersion,
	} {
		if got := d.header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
}

// cliRun runs the CLI in-process and returns its exit code and output.
func cliRun(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(context.Background(), append([]string{"egrid"}, args...), env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }})
	return code, out.String()
}

// TestCLIAgainstServer drives a running server with the CLI: topics, event subscriptions, keys
// and publish, the way a person would.
func TestCLIAgainstServer(t *testing.T) {
	dir := t.TempDir()
	hook := newEndpoint(t)
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(dir, "data"))
	server := "--server=" + srv.url

	if code, out := cliRun(t, "topic", "create", server, "--name", "orders"); code != 0 || !strings.Contains(out, "orders") {
		t.Fatalf("topic create: %d %s", code, out)
	}
	code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "billing",
		"--endpoint", hook.URL+"/hook", "--max-delivery-attempts", "3", "--event-ttl", "30")
	if code != 0 || !strings.Contains(out, "billing") {
		t.Fatalf("event-subscription create: %d %s", code, out)
	}
	if code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "bad",
		"--endpoint", "ftp://nowhere", "--max-delivery-attempts", "99"); code == 0 || !strings.Contains(out, "endpointUrl") || !strings.Contains(out, "maxDeliveryAttempts") {
		t.Errorf("a bad subscription: exit %d, output %s; want an error naming both problems", code, out)
	}
	code, out = cliRun(t, "topic", "key", "list", server, "--name", "orders", "-o", "json")
	var keys map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &keys) != nil || keys["key1"] == "" {
		t.Fatalf("topic key list: %d %s", code, out)
	}
	if code, out := cliRun(t, "publish", server, "--topic", "orders", "--key", keys["key1"], "--data",
		`{"id":"cli-1","subject":"/x","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`); code != 0 {
		t.Fatalf("publish: %d %s", code, out)
	}
	if code, out := cliRun(t, "publish", server, "--topic", "orders", "--key", "d3Jvbmc=", "--data", `{}`); code == 0 || !strings.Contains(out, "401") {
		t.Errorf("publish with a wrong key: %d %s, want a 401 error", code, out)
	}
	d := hook.await(t, 1)[0]
	if !strings.Contains(string(d.body), "cli-1") {
		t.Errorf("delivered %s, want cli-1", d.body)
	}
	if code, out := cliRun(t, "event-subscription", "show", server, "--topic", "orders", "--name", "billing"); code != 0 || !strings.Contains(out, "billing") || !strings.Contains(out, "backlog=") {
		t.Errorf("event-subscription show: %d %s", code, out)
	}
	if code, out := cliRun(t, "event-subscription", "delete", server, "--topic", "orders", "--name", "billing"); code != 0 {
		t.Errorf("event-subscription delete: %d %s", code, out)
	}
	if code, out := cliRun(t, "topic", "list", server); code != 0 || !strings.Contains(out, "orders") {
		t.Errorf("topic list: %d %s", code, out)
	}
	if code, out := cliRun(t, "topic", "delete", server, "--name", "orders"); code != 0 {
		t.Errorf("topic delete: %d %s", code, out)
	}
	if code, out := cliRun(t, "topic", "show", server, "--name", "orders"); code == 0 || !strings.Contains(out, "404") {
		t.Errorf("topic show after delete: %d %s, want 404", code, out)
	}
	srv.stop(t)
}
