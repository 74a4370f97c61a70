package main

import (
	"errors"
	"fmt"
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
	file := serverConfig{Egress: egressFileConfig{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.9.0.0/16"}}}
	for _, c := range []struct {
		name        string
		args        []string
		env         map[string]string
		insecureDev bool
		allow, deny []string
		denyLoop    bool
	}{
		{name: "defaults", denyLoop: true},
		{name: "insecure dev allows loopback", insecureDev: true},
		{name: "file", allow: file.Egress.Allow, deny: file.Egress.Deny, denyLoop: true},
		{name: "env beats file", env: map[string]string{"EGRID_EGRESS_ALLOW": "127.0.0.1, fd00::/8", "EGRID_EGRESS_DENY": "*.internal"},
			allow: []string{"127.0.0.1", "fd00::/8"}, deny: []string{"*.internal"}, denyLoop: true},
		{name: "flag beats env", args: []string{"--egress-allow", "192.168.0.0/16", "--egress-allow", "a.test,b.test", "--egress-deny", "192.168.9.9"},
			env:   map[string]string{"EGRID_EGRESS_ALLOW": "127.0.0.1"},
			allow: []string{"192.168.0.0/16", "a.test", "b.test"}, deny: []string{"192.168.9.9"}, denyLoop: true},
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
			if !slices.Equal(got.Policy.Allow, c.allow) || !slices.Equal(got.Policy.Deny, c.deny) || got.Policy.DenyLoopback != c.denyLoop {
				t.Fatalf("resolved %+v; want allow %v deny %v denyLoopback %v", got, c.allow, c.deny, c.denyLoop)
			}
		})
	}
	_, err := resolveEgressWith(t, []string{"--egress-allow", "10.0.0.0/33"}, nil, serverConfig{}, false)
	if err == nil || !strings.Contains(err.Error(), `server.egress.allow[0] "10.0.0.0/33"`) {
		t.Fatalf("bad settings: %v; want the bad entry named", err)
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
