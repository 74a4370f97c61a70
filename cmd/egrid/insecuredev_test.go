package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveExit runs `egrid serve args...`, which must exit by itself (a refused start), and
// returns its exit code and output.
func serveExit(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"serve", "--data-dir", filepath.Join(t.TempDir(), "data")}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("egrid serve %v did not exit within a minute (it should have refused to start):\n%s", args, out)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestInsecureDevListensOnlyOnLoopback: --insecure-dev with a --listen address that is not
// loopback refuses to start, saying what to do, whether the setting comes from a flag, the
// environment or the config file; --insecure-dev-any-address lets it through (here to a
// documentation address no interface has, so the start gets as far as listening and fails
// there, without opening anything).
func TestInsecureDevListensOnlyOnLoopback(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "egrid.yaml")
	if err := os.WriteFile(cfg, []byte("server:\n  insecureDev: true\n  listen: 0.0.0.0:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{name: "all interfaces", args: []string{"--insecure-dev", "--listen", "0.0.0.0:0"}},
		{name: "no host", args: []string{"--insecure-dev", "--listen", ":0"}},
		{name: "IPv6 any", args: []string{"--insecure-dev", "--listen", "[::]:0"}},
		{name: "a name", args: []string{"--insecure-dev", "--listen", "egrid.example.com:0"}},
		{name: "environment", env: []string{"EGRID_INSECURE_DEV=true", "EGRID_LISTEN=0.0.0.0:0"}},
		{name: "config file", args: []string{"--config", cfg}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := serveExit(t, c.env, c.args...)
			if code != 2 || !strings.Contains(out, "--insecure-dev-any-address") || !strings.Contains(out, "not one") {
				t.Fatalf("exit %d, want 2 with a message naming --insecure-dev-any-address:\n%s", code, out)
			}
		})
	}
	code, out := serveExit(t, nil, "--insecure-dev", "--insecure-dev-any-address", "--listen", "192.0.2.1:0")
	if code != 1 || !strings.Contains(out, "listening on 192.0.2.1:0") {
		t.Fatalf("with --insecure-dev-any-address: exit %d, want 1 from the listen itself:\n%s", code, out)
	}
}

// TestInsecureDevKeepsAConfiguredAdminToken: with --insecure-dev and an admin token, the admin
// API still requires the token, publishes without credentials are accepted, and the server
// warns at start that --insecure-dev is on.
func TestInsecureDevKeepsAConfiguredAdminToken(t *testing.T) {
	warnings := make(chan string, 4)
	srv := startLogged(t, warnings, "--insecure-dev is on", "--insecure-dev", "--admin-token", "s3cret", "--data-dir", filepath.Join(t.TempDir(), "data"))
	select {
	case line := <-warnings:
		if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "still requires the configured admin token") {
			t.Fatalf("the start warning is %q", line)
		}
	case <-time.After(time.Minute):
		t.Fatal("no warning that --insecure-dev is on")
	}
	admin := func(token string) int {
		req, _ := http.NewRequest(http.MethodPut, srv.url+"/admin/topics/orders", strings.NewReader(`{"properties":{}}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := oneShot.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := admin(""); code != http.StatusUnauthorized {
		t.Fatalf("an admin call without the token under --insecure-dev: %d, want 401", code)
	}
	if code := admin("wrong"); code != http.StatusUnauthorized {
		t.Fatalf("an admin call with a wrong token: %d, want 401", code)
	}
	if code := admin("s3cret"); code/100 != 2 {
		t.Fatalf("an admin call with the token: %d", code)
	}
	if code, _, msg := call(t, oneShot, http.MethodPost, srv.url+"/topics/orders/api/events?api-version=2018-01-01", string(eventsBody([]string{"e1"}))); code != http.StatusOK {
		t.Fatalf("a publish without credentials under --insecure-dev: %d %s", code, msg)
	}
}
