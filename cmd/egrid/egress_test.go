package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// resolveEgressWith runs resolveEgress for serve's egress flags given as args, an environment
// and a file section.
func resolveEgressWith(t *testing.T, args []string, env map[string]string, fs serverConfig, insecureDev bool) (egressSettings, error) {
	t.Helper()
	var got egressSettings
	var errs []error
	app := &cli.App{
		Flags: egressFlags(),
		Action: func(c *cli.Context) error {
			got, errs = resolveEgress(c, func(k string) string { return env[k] }, fs, insecureDev)
			return nil
		},
	}
	if err := app.Run(append([]string{"egrid"}, args...)); err != nil {
		t.Fatal(err)
	}
	return got, errors.Join(errs...)
}

// Flag beats environment beats file beats default, for every egress setting; loopback is
// denied unless --insecure-dev.
func TestResolveEgress(t *testing.T) {
	file := serverConfig{Egress: egressFileConfig{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.9.0.0/16"}}, AllowHTTPEndpoints: true}
	for _, c := range []struct {
		name        string
		args        []string
		env         map[string]string
		insecureDev bool
		allow, deny []string
		http        bool
		denyLoop    bool
	}{
		{name: "defaults", denyLoop: true},
		{name: "insecure dev allows loopback", insecureDev: true},
		{name: "file", allow: file.Egress.Allow, deny: file.Egress.Deny, http: true, denyLoop: true},
		{name: "env beats file", env: map[string]string{"EGRID_EGRESS_ALLOW": "127.0.0.1, fd00::/8", "EGRID_EGRESS_DENY": "*.internal", "EGRID_ALLOW_HTTP_ENDPOINTS": "false"},
			allow: []string{"127.0.0.1", "fd00::/8"}, deny: []string{"*.internal"}, denyLoop: true},
		{name: "flag beats env", args: []string{"--egress-allow", "192.168.0.0/16", "--egress-allow", "a.test,b.test", "--egress-deny", "192.168.9.9", "--allow-http-endpoints"},
			env:   map[string]string{"EGRID_EGRESS_ALLOW": "127.0.0.1", "EGRID_ALLOW_HTTP_ENDPOINTS": "false"},
			allow: []string{"192.168.0.0/16", "a.test", "b.test"}, deny: []string{"192.168.9.9"}, http: true, denyLoop: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := serverConfig{}
			if c.name != "defaults" && c.name != "insecure dev allows loopback" {
				fs = file
			}
			got, err := resolveEgressWith(t, c.args, c.env, fs, c.insecureDev)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Policy.Allow, c.allow) || !slices.Equal(got.Policy.Deny, c.deny) || got.AllowHTTPEndpoints != c.http || got.Policy.DenyLoopback != c.denyLoop {
				t.Fatalf("resolved %+v; want allow %v deny %v http %v denyLoopback %v", got, c.allow, c.deny, c.http, c.denyLoop)
			}
		})
	}
	_, err := resolveEgressWith(t, []string{"--egress-allow", "10.0.0.0/33"}, map[string]string{"EGRID_ALLOW_HTTP_ENDPOINTS": "maybe"}, serverConfig{}, false)
	if err == nil || !strings.Contains(err.Error(), `server.egress.allow[0] "10.0.0.0/33"`) || !strings.Contains(err.Error(), "EGRID_ALLOW_HTTP_ENDPOINTS") {
		t.Fatalf("bad settings: %v; want both problems", err)
	}
}

// TestEgressThroughTheBinary: even a --insecure-dev server (the quick start) refuses webhooks
// to the cloud metadata address and to its own admin API, naming the rule, and accepts a
// receiver on 127.0.0.1.
func TestEgressThroughTheBinary(t *testing.T) {
	hook := newEndpoint(t)
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"))
	server := "--server=" + srv.url
	if code, out := cliRun(t, "topic", "create", server, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}
	self := strings.TrimPrefix(srv.url, "http://")
	_, port, _ := strings.Cut(self, ":")
	for endpoint, want := range map[string]string{
		"http://169.254.169.254/latest/meta-data/": `endpoint 169.254.169.254:80 denied by egress rule "link-local addresses (169.254.0.0/16, fe80::/10: cloud metadata services, neighbours) are denied; allow with server.egress.allow: [169.254.169.254/32]"`,
		srv.url + "/admin/topics":                  fmt.Sprintf(`endpoint %s denied by egress rule "egrid's own address %s is always denied`, self, self),
		"http://localhost:" + port + "/admin":      "egrid's own address",
		"http://10.1.2.3:8080/hook":                `private ranges are denied; allow with server.egress.allow: [10.0.0.0/8]`,
	} {
		code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "probe", "--endpoint", endpoint)
		if code == 0 || !strings.Contains(out, want) || !strings.Contains(out, "400") {
			t.Errorf("create to %s: exit %d, output %s; want a 400 naming %q", endpoint, code, out, want)
		}
	}
	if code, out := cliRun(t, "event-subscription", "create", server, "--topic", "orders", "--name", "printer", "--endpoint", hook.URL+"/hook"); code != 0 {
		t.Fatalf("create to a 127.0.0.1 receiver with --insecure-dev: %d %s", code, out)
	}
	publishCLI(t, server, "orders", "e-1", "/orders/1", `{}`)
	if got := ids(t, hook.await(t, 1)[0]); !slices.Equal(got, []string{"e-1"}) {
		t.Fatalf("delivered %v, want e-1", got)
	}
	srv.stop(t)
}

// TestHTTPSEndpointsThroughTheBinary: without --insecure-dev, http:// endpoints are refused
// with the way to allow them, and loopback needs an allow entry; with allowHttpEndpoints and
// server.egress.allow in the config, the same endpoint validates and receives deliveries.
func TestHTTPSEndpointsThroughTheBinary(t *testing.T) {
	dir := t.TempDir()
	hook := newEndpoint(t)
	tlsHook := httptest.NewTLSServer(hook.Config.Handler)
	defer tlsHook.Close()
	srv := startServer(t, "--admin-token", "admin", "--data-dir", filepath.Join(dir, "strict"))
	server, token := "--server="+srv.url, "--admin-token=admin"
	if code, out := cliRun(t, "topic", "create", server, token, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}
	code, out := cliRun(t, "event-subscription", "create", server, token, "--topic", "orders", "--name", "plain", "--endpoint", hook.URL+"/hook")
	if code == 0 || !strings.Contains(out, "http:// endpoints are refused") || !strings.Contains(out, "server.allowHttpEndpoints: true or --allow-http-endpoints") {
		t.Errorf("create to an http endpoint: exit %d, output %s; want the refusal saying how to allow http", code, out)
	}
	code, out = cliRun(t, "event-subscription", "create", server, token, "--topic", "orders", "--name", "secure", "--endpoint", tlsHook.URL+"/hook", "--skip-validation")
	if code == 0 || !strings.Contains(out, `loopback is denied; allow with server.egress.allow: [127.0.0.0/8]`) || strings.Contains(out, "http:// endpoints") {
		t.Errorf("create to an https loopback endpoint: exit %d, output %s; want only the loopback rule", code, out)
	}
	srv.stop(t)

	cfg := writeConfig(t, `server:
  adminToken: admin
  allowHttpEndpoints: true
  egress:
    allow: [127.0.0.1]
`)
	open := startServer(t, "--config", cfg, "--data-dir", filepath.Join(dir, "open"))
	server = "--server=" + open.url
	if code, out := cliRun(t, "topic", "create", server, token, "--name", "orders"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}
	if code, out := cliRun(t, "event-subscription", "create", server, token, "--topic", "orders", "--name", "plain", "--endpoint", hook.URL+"/hook"); code != 0 || !strings.Contains(out, "Succeeded") {
		t.Fatalf("create to an http endpoint with allowHttpEndpoints: %d %s", code, out)
	}
	code, out = cliRun(t, "topic", "key", "list", server, token, "--name", "orders", "-o", "json")
	var keys map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &keys) != nil || keys["key1"] == "" {
		t.Fatalf("topic key list: %d %s", code, out)
	}
	if code, out := cliRun(t, "publish", server, "--topic", "orders", "--key", keys["key1"], "--data",
		`{"id":"e-1","subject":"/o/1","eventType":"T","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1","data":{}}`); code != 0 {
		t.Fatalf("publish: %d %s", code, out)
	}
	if got := ids(t, hook.await(t, 1)[0]); !slices.Equal(got, []string{"e-1"}) {
		t.Fatalf("delivered %v, want e-1", got)
	}
	open.stop(t)
}

// TestValidateAppliesEgress: `egrid validate` refuses what serve would, http:// and denied
// addresses alike (host names resolved), without calling any endpoint.
func TestValidateAppliesEgress(t *testing.T) {
	cfg := writeConfig(t, `server:
  egress: {deny: ["*.blocked.test"]}
topics:
  - name: orders
    eventSubscriptions:
      - name: plain
        properties: {destination: {endpointType: WebHook, properties: {endpointUrl: "http://127.0.0.1:9/hook"}}}
      - name: metadata
        properties: {destination: {endpointType: WebHook, properties: {endpointUrl: "https://169.254.169.254/"}}}
      - name: blocked
        properties: {destination: {endpointType: WebHook, properties: {endpointUrl: "https://hooks.blocked.test/"}}}
      - name: local
        properties: {destination: {endpointType: WebHook, properties: {endpointUrl: "https://localhost:9/hook"}}}
`)
	code, out := cliRun(t, "validate", "--config", cfg)
	for _, want := range []string{
		`"plain": destination.properties.endpointUrl: http:// endpoints are refused`,
		`"metadata": destination.properties.endpointUrl: endpoint 169.254.169.254:443 denied by egress rule "link-local`,
		`"blocked": destination.properties.endpointUrl: endpoint hooks.blocked.test:443 denied by egress rule "server.egress.deny: *.blocked.test"`,
		`"local": destination.properties.endpointUrl: endpoint localhost:9 (`, // resolved, as serve resolves it
	} {
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("validate: exit %d, output %s; want %q", code, out, want)
		}
	}
}
