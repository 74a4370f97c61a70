package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A public URL that is not an absolute http or https URL is refused naming the setting it came
// from (--public-url, EGRID_PUBLIC_URL or server.publicUrl), what is wrong and what to use.
// It was refused only by the router, once the store was open, as "publicUrl … is invalid",
// which named the config key to a user who had given the flag.
func TestPublicURLIsCheckedWhereItIsGiven(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		file    serverConfig
		setting string // named by the error; "" when the value is accepted
		want    string
	}{
		{name: "flag", args: []string{"--public-url", "https://egrid.example.com"}, want: "https://egrid.example.com"},
		{name: "env", env: map[string]string{"EGRID_PUBLIC_URL": "http://h:8080"}, want: "http://h:8080"},
		{name: "file", file: serverConfig{PublicURL: "https://f.example.com/base"}, want: "https://f.example.com/base"},
		{name: "flag scheme", args: []string{"--public-url", "ftp://nowhere"}, setting: "--public-url"},
		{name: "flag no scheme", args: []string{"--public-url", "egrid.example.com"}, setting: "--public-url"},
		{name: "flag query", args: []string{"--public-url", "https://h/?x=1"}, setting: "--public-url"},
		{name: "flag over file", args: []string{"--public-url", "ftp://nowhere"}, file: serverConfig{PublicURL: "https://f"}, setting: "--public-url"},
		{name: "env bad", env: map[string]string{"EGRID_PUBLIC_URL": "://x"}, setting: "EGRID_PUBLIC_URL"},
		{name: "file bad", file: serverConfig{PublicURL: "ftp://nowhere"}, setting: "server.publicUrl"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := resolveServe(t, tc.args, tc.env, tc.file)
			if tc.setting == "" {
				if err != nil || s.PublicURL != tc.want {
					t.Fatalf("public URL %q, %v; want %q", s.PublicURL, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("public URL %q accepted; want an error naming %s", s.PublicURL, tc.setting)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, tc.setting+" ") || !strings.Contains(msg, "absolute http or https URL") {
				t.Fatalf("error %q; want it to start with %s and say to use an absolute http or https URL", msg, tc.setting)
			}
		})
	}
}

// egrid serve refuses a bad --public-url with the other settings, before it opens the store.
func TestServeRefusesABadPublicURLFlag(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	code, out := cliRun(t, "serve", "--insecure-dev", "--listen", "127.0.0.1:0", "--data-dir", data, "--public-url", "ftp://nowhere")
	if code != 2 || !strings.Contains(out, `--public-url "ftp://nowhere" is invalid`) {
		t.Fatalf("serve --public-url ftp://nowhere: exit %d\n%s\nwant exit 2 naming --public-url", code, out)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("serve made its data directory (%v) before refusing the flag", err)
	}
}

// egrid validate reports a bad server.publicUrl once, by its key, although the file's checks
// and the settings' resolution both judge it.
func TestValidateReportsABadPublicURLOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egrid.yaml")
	if err := os.WriteFile(path, []byte("server:\n  publicUrl: ftp://nowhere\ntopics:\n  - name: orders\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := cliRun(t, "validate", "--config", path)
	if code == 0 || strings.Count(out, "publicUrl") != 1 || !strings.Contains(out, "server.publicUrl") {
		t.Fatalf("validate: exit %d\n%s\nwant server.publicUrl reported once", code, out)
	}
}
