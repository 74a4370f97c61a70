package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/sinks/blob"
)

// resolveWith runs resolveDeadLetters for serve's dead-letter flags given as args, an
// environment and a file section.
func resolveWith(t *testing.T, args []string, env map[string]string, fs serverConfig) (deadLetterSettings, error) {
	t.Helper()
	var got deadLetterSettings
	var errs []error
	app := &cli.App{
		Flags: deadLetterFlags(),
		Action: func(c *cli.Context) error {
			got, errs = resolveDeadLetters(c, func(k string) string { return env[k] }, fs)
			return nil
		},
	}
	if err := app.Run(append([]string{"egrid"}, args...)); err != nil {
		t.Fatal(err)
	}
	return got, errors.Join(errs...)
}

// Flag beats environment beats file beats default, for every dead-letter setting.
func TestResolveDeadLetters(t *testing.T) {
	no := false
	file := serverConfig{
		MinIO:           minioFileConfig{Endpoint: "file:9000", AccessKey: "file-key", SecretKey: "file-secret", Region: "eu", CreateBuckets: &no},
		DeadLetterDelay: 3 * time.Minute,
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		file    serverConfig
		want    deadLetterSettings
		wantErr string
	}{
		{name: "defaults: no MinIO, default delay", want: deadLetterSettings{MinIO: blob.Config{CreateBuckets: true}}},
		{
			name: "file", file: file,
			want: deadLetterSettings{MinIO: blob.Config{Endpoint: "file:9000", AccessKey: "file-key", SecretKey: "file-secret", Region: "eu"}, Delay: 3 * time.Minute},
		},
		{
			name: "environment beats file", file: file,
			env:  map[string]string{"EGRID_MINIO_ENDPOINT": "env:9000", "EGRID_MINIO_SECURE": "true", "EGRID_DEAD_LETTER_DELAY": "90s"},
			want: deadLetterSettings{MinIO: blob.Config{Endpoint: "env:9000", AccessKey: "file-key", SecretKey: "file-secret", Region: "eu", Secure: true}, Delay: 90 * time.Second},
		},
		{
			name: "flag beats environment", file: file,
			args: []string{"--minio-endpoint", "flag:9000", "--minio-secure=false", "--dead-letter-delay", "10s", "--minio-secret-key", "flag-secret"},
			env:  map[string]string{"EGRID_MINIO_ENDPOINT": "env:9000", "EGRID_MINIO_SECURE": "true", "EGRID_DEAD_LETTER_DELAY": "90s"},
			want: deadLetterSettings{MinIO: blob.Config{Endpoint: "flag:9000", AccessKey: "file-key", SecretKey: "flag-secret", Region: "eu"}, Delay: 10 * time.Second},
		},
		{
			name: "buckets are created unless the file says otherwise",
			args: []string{"--minio-endpoint", "m:9000", "--minio-access-key", "a", "--minio-secret-key", "b"},
			want: deadLetterSettings{MinIO: blob.Config{Endpoint: "m:9000", AccessKey: "a", SecretKey: "b", CreateBuckets: true}},
		},
		{
			name: "every problem at once", args: []string{"--minio-endpoint", "http://m:9000", "--dead-letter-delay", "-1s"},
			env:     map[string]string{"EGRID_MINIO_SECURE": "maybe"},
			wantErr: "EGRID_MINIO_SECURE|without a scheme|access key and secret key|dead-letter delay -1s",
		},
		{name: "keys without an endpoint", args: []string{"--minio-access-key", "a"}, wantErr: "without an endpoint"},
		{name: "bad delay in the environment", env: map[string]string{"EGRID_DEAD_LETTER_DELAY": "soon"}, wantErr: "EGRID_DEAD_LETTER_DELAY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveWith(t, tt.args, tt.env, tt.file)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("resolved %+v, want errors %s", got, tt.wantErr)
				}
				for _, w := range strings.Split(tt.wantErr, "|") {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("resolved\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestLoadConfigWithMinIO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "egrid.yaml")
	err := os.WriteFile(path, []byte(`server:
  minio: {endpoint: 127.0.0.1:9000, accessKey: a, secretKey: b, secure: true, createBuckets: false, readTimeout: 3m}
  deadLetterDelay: 2m
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Server.MinIO
	if m.Endpoint != "127.0.0.1:9000" || m.AccessKey != "a" || m.SecretKey != "b" || !m.Secure || m.CreateBuckets == nil || *m.CreateBuckets || m.ReadTimeout != 3*time.Minute || cfg.Server.DeadLetterDelay != 2*time.Minute {
		t.Errorf("server section %+v (delay %v), want the MinIO settings and a 2m delay", m, cfg.Server.DeadLetterDelay)
	}
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "2026-01-02T12:00:00Z", want: time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)},
		{in: "2h", want: now.Add(-2 * time.Hour)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "yesterday", bad: true},
		{in: "-1h", bad: true},
	}
	for _, tt := range tests {
		got, err := parseWhen(now, tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("parseWhen(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("parseWhen(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// deadletter show asks for --limit records (1000 by default) and, when the server's answer was
// full, says how many records and objects it left and how to see them; an answer within the
// limit prints as before.
func TestDeadLetterShowLimit(t *testing.T) {
	var queries []url.Values
	answer := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Query())
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	show := func(args ...string) (int, string) {
		return cliRun(t, append([]string{"deadletter", "show", "--server", srv.URL, "--topic", "orders", "--subscription", "billing"}, args...)...)
	}
	const rec = `{"object":"BILLING/2026/1/2/3/a.json","id":"e1","deadLetterReason":"MaxDeliveryAttemptsExceeded","deliveryAttempts":3}`

	answer = `{"objects":1,"value":[` + rec + `]}`
	code, out := show()
	if code != 0 || out != "ID  REASON                       ATTEMPTS  LAST OUTCOME  STATUS  OBJECT\ne1  MaxDeliveryAttemptsExceeded  3                       -       BILLING/2026/1/2/3/a.json\n1 records in 1 objects\n" {
		t.Errorf("show within the limit: %d\n%s", code, out)
	}
	if got := queries[0].Get("limit"); got != "1000" {
		t.Errorf("limit=%q asked for by default, want 1000", got)
	}

	answer = `{"objects":1,"value":[` + rec + `],"more":{"records":4,"objects":7,"since":"2026-01-02T03:04:05Z"}}`
	code, out = show("--limit", "1", "--since", "2026-01-01T00:00:00Z")
	if code != 0 || !strings.Contains(out, "1 records in 1 objects\n4 more records of the last object and 7 more objects not read; narrow the range") ||
		!strings.Contains(out, "raise --limit") || !strings.Contains(out, "--since 2026-01-02T03:04:05Z takes up") {
		t.Errorf("show of a full answer: %d\n%s", code, out)
	}
	if got := queries[1]; got.Get("limit") != "1" || got.Get("since") != "2026-01-01T00:00:00Z" {
		t.Errorf("query %v, want limit=1 and the since asked for", got)
	}
	code, out = show("--limit", "1", "-o", "json")
	if code != 0 || !strings.Contains(out, `"records": 4`) || !strings.Contains(out, `"id": "e1"`) {
		t.Errorf("show -o json of a full answer: %d\n%s", code, out)
	}

	if code, out := show("--limit", "0"); code != 2 || !strings.Contains(out, "--limit 0: use a positive number") {
		t.Errorf("show --limit 0: %d %s, want exit 2 saying what to use", code, out)
	}
}

// TestReplayTimeouts: a --dry-run or --no-wait replay, which answers once the objects are
// read, has the CLI's usual 2-minute bound; only a replay that waits for its events to settle
// has none (it had none in every mode): --idle-timeout bounds its silences instead
// (TestReplayGivesUpOnAQuietServer).
func TestReplayTimeouts(t *testing.T) {
	cl := &client{http: apiClient(2 * time.Minute)}
	for _, tt := range []struct {
		name         string
		dryRun, wait bool
		want         time.Duration
	}{
		{name: "dry run", dryRun: true, wait: true, want: 2 * time.Minute},
		{name: "dry run, no wait", dryRun: true, want: 2 * time.Minute},
		{name: "no wait", want: 2 * time.Minute},
		{name: "waits for the events", wait: true, want: 0},
	} {
		if got := replayClient(cl, tt.dryRun, tt.wait); got.Timeout != tt.want || got.CheckRedirect == nil {
			t.Errorf("%s: timeout %v (redirects checked: %t); want %v and no redirect followed", tt.name, got.Timeout, got.CheckRedirect != nil, tt.want)
		}
	}
}
