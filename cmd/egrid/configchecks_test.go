package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateRefusesTheRouterSettingsServeRefuses: `egrid validate` called these valid, and
// serve then opened its store and exited with "invalid router config: maxSubscriptionsPerTopic
// -5 ...", naming no config key. Both now refuse the file with router.New's own checks, each
// value named by its key, with its range.
func TestValidateRefusesTheRouterSettingsServeRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "egrid.yaml")
	cfg := "server:\n  maxInFlight: -1\n  maxSubscriptionsPerTopic: -5\n  history: {attempts: -1, retention: -1h}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"server.maxInFlight -1 is invalid: use a positive number (0 for the default, 16)",
		"server.maxSubscriptionsPerTopic -5 is invalid: use a positive number (0 for the default, 500)",
		"server.history.attempts -1 is invalid: use 1 to 1000 (0 for the default, 10)",
		"server.history.retention -1h0m0s is invalid: use a positive duration such as 24h (0 for the default)",
	}
	for _, args := range [][]string{
		{"validate", "--config", path},
		{"serve", "--config", path, "--insecure-dev", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")},
	} {
		code, out := cliRun(t, args...)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s", args[0], code, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output does not say %q:\n%s", args[0], w, out)
			}
		}
		if strings.Contains(out, "invalid router config") {
			t.Errorf("%s: the file's settings were refused by the router, not by the file's checks:\n%s", args[0], out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		t.Error("serve opened its store before it refused the config")
	}
}

// TestValidateDeclaresUnderTheFilesSubscriptionLimit: validate built the declared resources
// under the default limits, so a topic declaring more event subscriptions than the file's
// server.maxSubscriptionsPerTopic was valid and failed at start.
func TestValidateDeclaresUnderTheFilesSubscriptionLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egrid.yaml")
	cfg := `server:
  maxSubscriptionsPerTopic: 1
topics:
  - name: orders
    eventSubscriptions:
      - {name: billing, properties: {destination: {endpointType: GoChannel, properties: {topic: billing}}}}
      - {name: audit, properties: {destination: {endpointType: GoChannel, properties: {topic: audit}}}}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := cliRun(t, "validate", "--config", path)
	if code != 2 || !strings.Contains(out, "maxSubscriptionsPerTopic") {
		t.Fatalf("validate: exit %d, want 2 naming maxSubscriptionsPerTopic\n%s", code, out)
	}
}

// TestConfigWithASecondDocumentIsRefused: a second YAML document (after ---) was read by
// nothing, so validate called the file valid and serve started without its settings and
// topics. It is refused, naming the line where it starts; empty documents are no loss.
func TestConfigWithASecondDocumentIsRefused(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"a second document", "server:\n  listen: 127.0.0.1:9090\n---\ntopics:\n  - name: orders\n", "line 3: a second YAML document starts here"},
		{"after an end marker", "server: {}\n...\n---\ntopics: []\n", "line 3: a second YAML document starts here"},
		{"after an empty one", "---\n---\n# the topics\ntopics: []\n", "line 2: a second YAML document starts here"},
		{"a broken second document", "server: {}\n---\ntopics: [\n", "did not find expected node content"},
		{"a leading ---", "---\nserver: {}\n", ""},
		{"a trailing ---", "server: {}\n---\n", ""},
		{"a trailing --- and a comment", "server: {}\n---\n# nothing\n", ""},
	} {
		_, err := decodeConfig([]byte(c.yaml), func(string) string { return "" })
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v\nwant %q", c.name, err, c.want)
		}
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "egrid.yaml")
	if err := os.WriteFile(path, []byte("server: {}\n---\ntopics:\n  - name: orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// serve runs under a cancelled context: a serve that took the file stops at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, args := range [][]string{
		{"validate", "--config", path},
		{"serve", "--config", path, "--insecure-dev", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")},
	} {
		var out bytes.Buffer
		code := run(ctx, append([]string{"egrid"}, args...), env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }})
		if code != 2 || !strings.Contains(out.String(), "line 2: a second YAML document") {
			t.Errorf("%s: exit %d, want 2 naming the second document\n%s", args[0], code, out.String())
		}
	}
}
