package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router/httpserver"
)

// resolveServe runs resolveSettings with serve's own flags given as args, an environment and
// a config file section.
func resolveServe(t *testing.T, args []string, env map[string]string, fs serverConfig) (serveSettings, error) {
	t.Helper()
	var got serveSettings
	var err error
	app := &cli.App{
		Flags: serveCommand(env2(env)).Flags,
		Action: func(c *cli.Context) error {
			got, err = resolveSettings(c, func(k string) string { return env[k] }, &fileConfig{Server: fs})
			return nil
		},
	}
	if runErr := app.Run(append([]string{"egrid"}, args...)); runErr != nil {
		t.Fatal(runErr)
	}
	return got, err
}

func env2(m map[string]string) env {
	return env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: func(k string) string { return m[k] }}
}

func writeSecret(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Secrets come from a flag, a file named by a flag, the environment, a file named by the
// environment, or the config file (value or file): flag > environment > file, and one level
// gives the value or the file, not both.
func TestResolveSecrets(t *testing.T) {
	flagFile := writeSecret(t, "from-flag-file\n")
	envFile := writeSecret(t, "from-env-file\r\n")
	cfgFile := writeSecret(t, "from-config-file")
	empty := writeSecret(t, "\n")
	tests := []struct {
		name        string
		args        []string
		env         map[string]string
		file        serverConfig
		token, mkey string
		wantErr     string
	}{
		{name: "none"},
		{name: "flag file", args: []string{"--admin-token-file", flagFile}, token: "from-flag-file"},
		{name: "environment file", env: map[string]string{"EGRID_ADMIN_TOKEN_FILE": envFile}, token: "from-env-file"},
		{name: "config file's file", file: serverConfig{AdminTokenFile: cfgFile}, token: "from-config-file"},
		{name: "config file's value", file: serverConfig{AdminToken: "v"}, token: "v"},
		{
			name: "flag beats environment beats config", args: []string{"--admin-token-file", flagFile},
			env: map[string]string{"EGRID_ADMIN_TOKEN": "env"}, file: serverConfig{AdminToken: "cfg"}, token: "from-flag-file",
		},
		{name: "environment beats config", env: map[string]string{"EGRID_ADMIN_TOKEN_FILE": envFile}, file: serverConfig{AdminToken: "cfg"}, token: "from-env-file"},
		{
			name: "MinIO secret key from a file", args: []string{"--minio-endpoint", "m:9000", "--minio-access-key", "a", "--minio-secret-key-file", flagFile},
			mkey: "from-flag-file",
		},
		{
			name: "MinIO secret key file in the config", args: []string{"--minio-endpoint", "m:9000", "--minio-access-key", "a"},
			file: serverConfig{MinIO: minioFileConfig{SecretKeyFile: cfgFile}}, mkey: "from-config-file",
		},
		{name: "value and file at one level", args: []string{"--admin-token", "x", "--admin-token-file", flagFile}, wantErr: "--admin-token and --admin-token-file are both set"},
		{name: "value and file in the environment", env: map[string]string{"EGRID_MINIO_SECRET_KEY": "x", "EGRID_MINIO_SECRET_KEY_FILE": envFile}, wantErr: "EGRID_MINIO_SECRET_KEY and EGRID_MINIO_SECRET_KEY_FILE"},
		{name: "empty file", args: []string{"--admin-token-file", empty}, wantErr: "--admin-token-file: the secret file " + empty + " is empty"},
		{name: "missing file", file: serverConfig{AdminTokenFile: "/nonexistent/egrid-token"}, wantErr: "server.adminTokenFile: reading the secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveServe(t, tt.args, tt.env, tt.file)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.AdminToken != tt.token || got.DeadLetters.MinIO.SecretKey != tt.mkey {
				t.Errorf("admin token %q, MinIO secret key %q; want %q, %q", got.AdminToken, got.DeadLetters.MinIO.SecretKey, tt.token, tt.mkey)
			}
		})
	}
}

// The HTTP limits resolve flag > environment > config file > default, like every setting.
func TestResolveServerLimits(t *testing.T) {
	file := serverConfig{HTTP: httpserver.Config{BodyTimeout: 3 * time.Second, MaxConnections: 30, IdleTimeout: time.Minute}}
	got, err := resolveServe(t, []string{"--body-timeout", "1s", "--log-fold-window", "0", "--max-receive-polls", "8"},
		map[string]string{"EGRID_BODY_TIMEOUT": "2s", "EGRID_MAX_CONNECTIONS": "20", "EGRID_MAX_RECEIVE_POLLS": "9"}, file)
	if err != nil {
		t.Fatal(err)
	}
	want := httpserver.Config{BodyTimeout: time.Second, MaxConnections: 20, IdleTimeout: time.Minute, MaxReceivePolls: 8}
	if got.HTTP != want || got.LogFoldWindow != 0 {
		t.Errorf("resolved %+v, fold %v; want %+v, no folding", got.HTTP, got.LogFoldWindow, want)
	}
	got, err = resolveServe(t, nil, nil, serverConfig{})
	if err != nil || got.HTTP != (httpserver.Config{}) || got.LogFoldWindow != defaultLogFoldWindow {
		t.Errorf("defaults: %+v, fold %v, %v", got.HTTP, got.LogFoldWindow, err)
	}
	_, err = resolveServe(t, []string{"--max-publish-bodies", "-1"}, map[string]string{"EGRID_IDLE_TIMEOUT": "forever"}, serverConfig{})
	if err == nil || !strings.Contains(err.Error(), "EGRID_IDLE_TIMEOUT") || !strings.Contains(err.Error(), "--max-publish-bodies -1") {
		t.Errorf("bad values: %v, want both reported", err)
	}
}

// References in the YAML config expand to environment variables and files, in string values
// only, and keep the file's line numbers in errors.
func TestConfigReferences(t *testing.T) {
	keyFile := writeSecret(t, "a2V5LWZyb20tZmlsZQ==\n")
	env := map[string]string{"RABBIT_PASSWORD": "p@ss: #word", "TOKEN": "t0ken"}
	getenv := func(k string) string { return env[k] }
	raw := `server:
  adminToken: ${TOKEN}
  brokers:
    rabbitmq: {url: "amqp://egrid:${RABBIT_PASSWORD}@127.0.0.1:5672/"}
topics:
  - name: orders
    properties: {key1: "${file:` + keyFile + `}", key2: "plain$${NOT_A_REF}"}
`
	cfg, err := decodeConfig([]byte(raw), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.AdminToken != "t0ken" || cfg.Server.Brokers.RabbitMQ == nil || cfg.Server.Brokers.RabbitMQ.URL != "amqp://egrid:p@ss: #word@127.0.0.1:5672/" {
		t.Errorf("server section %+v", cfg.Server)
	}
	if p := cfg.Topics[0].Properties; p.Key1 != "a2V5LWZyb20tZmlsZQ==" || p.Key2 != "plain${NOT_A_REF}" {
		t.Errorf("topic keys %q, %q", p.Key1, p.Key2)
	}

	for _, c := range []struct{ name, yaml, want string }{
		{"unset variable", "server:\n  listen: 127.0.0.1:8080\n  adminToken: ${NOPE}\n", "line 3: ${NOPE}: the environment variable NOPE is not set"},
		{"missing file", "server:\n  adminToken: ${file:/nonexistent/x}\n", "line 2: ${file:/nonexistent/x}: reading the secret"},
		{"unclosed", "server:\n  adminToken: ${TOKEN\n", "without its closing }"},
		{"not a name", "server:\n  adminToken: ${TO KEN}\n", "${TO KEN} is not a reference"},
		{"unknown key keeps its line", "server:\n  adminToken: ${TOKEN}\n  adminTokn: x\n", `line 3: "server.adminTokn" is not a member of server`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeConfig([]byte(c.yaml), getenv)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// A secret file is read up to 64 KiB: a path naming something else (a log file, a disk image)
// is an error saying so, where it was read into memory whole.
func TestSecretFileOverTheLimit(t *testing.T) {
	const limit = 64 << 10
	big := writeSecret(t, strings.Repeat("k", limit+1))
	atLimit := writeSecret(t, strings.Repeat("k", limit-1)+"\n")
	if v, _, err := readSecretFile(atLimit); err != nil || len(v) != limit-1 {
		t.Fatalf("a secret of 64 KiB with its line end: %d bytes, %v", len(v), err)
	}
	if _, _, err := readSecretFile(big); err == nil || !strings.Contains(err.Error(), "the secret file "+big+" is over 64 KiB (65537 bytes): it must hold the secret alone") {
		t.Fatalf("a file over 64 KiB: %v, want an error saying it is over the limit", err)
	}
	_, err := decodeConfig([]byte("server:\n  adminToken: ${file:"+big+"}\n"), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "line 2: ${file:"+big+"}: the secret file "+big+" is over 64 KiB") {
		t.Fatalf("a ${file:} reference to a file over 64 KiB: %v", err)
	}
}

// A config file is read up to 64 MiB: a --config naming something else is an error saying
// so, where it was read into memory whole (without end, for /dev/zero).
func TestConfigFileOverTheLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64<<20 + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	if _, err := loadConfig(path); err == nil || !strings.Contains(err.Error(), "is over 64 MiB: check that --config names the YAML config file") {
		t.Fatalf("a config file over 64 MiB: %v", err)
	}
}

// TestSecretsFromFilesAndEnvironment runs the server with its admin token in a file and a
// topic key referenced from the environment in its config: neither is on the command line,
// and both work.
func TestSecretsFromFilesAndEnvironment(t *testing.T) {
	const token, key = "admin-from-a-file", "dG9waWMta2V5LWZyb20tZW52"
	tokenFile := writeSecret(t, token+"\n")
	t.Setenv("EGRID_TEST_ORDERS_KEY", key)
	cfg := filepath.Join(t.TempDir(), "egrid.yaml")
	if err := os.WriteFile(cfg, []byte("topics:\n  - name: orders\n    properties: {key1: \"${EGRID_TEST_ORDERS_KEY}\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, "--admin-token-file", tokenFile, "--config", cfg, "--data-dir", filepath.Join(t.TempDir(), "data"))
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(srv.cmd.Process.Pid), "cmdline"))
	if err == nil && (strings.Contains(string(cmdline), token) || strings.Contains(string(cmdline), key)) {
		t.Errorf("a secret is on the command line: %q", cmdline)
	}

	admin := func(tok string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.url+"/admin/topics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := oneShot.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := admin(token); code != http.StatusOK {
		t.Errorf("admin call with the token from the file: %d", code)
	}
	if code := admin(""); code != http.StatusUnauthorized {
		t.Errorf("admin call without a token: %d, want 401", code)
	}
	publish := func(k string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.url+"/topics/orders/api/events?api-version=2018-01-01", strings.NewReader(string(eventsBody([]string{"e1"}))))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("aeg-sas-key", k)
		resp, err := oneShot.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := publish(key); code != http.StatusOK {
		t.Errorf("publish with the key from the environment: %d", code)
	}
	if code := publish("d3Jvbmc="); code != http.StatusUnauthorized {
		t.Errorf("publish with another key: %d, want 401", code)
	}
}

// The HTTP limits and the fold window are server.* keys of the config file.
func TestServerLimitKeys(t *testing.T) {
	cfg, err := decodeConfig([]byte("server:\n  readHeaderTimeout: 5s\n  bodyTimeout: 1m\n  idleTimeout: 30s\n  maxHeaderBytes: 8192\n  maxConnections: 100\n  maxPublishBodies: 8\n  publishWait: 250ms\n  maxReceivePolls: 64\n  logFoldWindow: 0s\n"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	want := httpserver.Config{ReadHeaderTimeout: 5 * time.Second, BodyTimeout: time.Minute, IdleTimeout: 30 * time.Second,
		MaxHeaderBytes: 8192, MaxConnections: 100, MaxPublishBodies: 8, PublishWait: 250 * time.Millisecond, MaxReceivePolls: 64}
	if cfg.Server.HTTP != want || cfg.Server.LogFoldWindow == nil || *cfg.Server.LogFoldWindow != 0 {
		t.Errorf("server section %+v, fold %v; want %+v and folding off", cfg.Server.HTTP, cfg.Server.LogFoldWindow, want)
	}
	bad := &fileConfig{Server: serverConfig{HTTP: httpserver.Config{MaxHeaderBytes: 100, IdleTimeout: -time.Second}}}
	if err := bad.validate(); err == nil || !strings.Contains(err.Error(), "maxHeaderBytes 100") || !strings.Contains(err.Error(), "idleTimeout -1s") {
		t.Errorf("validate: %v, want both problems", err)
	}
}

// TestServeWarnsOfReadableSecretFiles: a secret file group or others can read (here the admin
// token file, 0644) gets a warning at start naming the file and the remedy; serve goes on and
// uses it.
func TestServeWarnsOfReadableSecretFiles(t *testing.T) {
	token := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(token, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	warnings := make(chan string, 4)
	srv := startLogged(t, warnings, "the secret file", "--admin-token-file", token, "--data-dir", filepath.Join(t.TempDir(), "data"))
	select {
	case line := <-warnings:
		if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "chmod 600 "+token) || !strings.Contains(line, "mode=0644") {
			t.Fatalf("the start warning is %q; want a WARN naming the file, its mode and chmod 600", line)
		}
	default: // the start warnings are written before "egrid serving"
		t.Fatalf("no warning about the admin token file readable by others:\n%s", srv.log())
	}
	req, _ := http.NewRequest(http.MethodGet, srv.url+"/admin/topics", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := oneShot.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("an admin call with the file's token: %d, want 200", resp.StatusCode)
	}
}

// TestServeWarnsOfReadableFileReferences: a file a ${file:PATH} reference of the config
// names is a secret file like the admin token file: readable by group or others (here 0644,
// as Kubernetes mounts secrets), it gets the same warning at start, naming the file, its mode
// and the remedy; serve goes on and uses it.
func TestServeWarnsOfReadableFileReferences(t *testing.T) {
	keyFile, cfg := readableKeyConfig(t)
	warnings := make(chan string, 4)
	srv := startLogged(t, warnings, "the secret file", "--admin-token-file", writeSecret(t, "s3cret"), "--config", cfg,
		"--data-dir", filepath.Join(t.TempDir(), "data"))
	select {
	case line := <-warnings:
		wantReadableWarning(t, line, keyFile)
	default: // the start warnings are written before "egrid serving"
		t.Fatalf("no warning about the ${file:} reference to a file readable by others:\n%s", srv.log())
	}
	req, _ := http.NewRequest(http.MethodPost, srv.url+"/topics/orders/api/events?api-version=2018-01-01", strings.NewReader(string(eventsBody([]string{"e1"}))))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("aeg-sas-key", readableKey)
	resp, err := oneShot.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a publish with the key from the referenced file: %d, want 200", resp.StatusCode)
	}
}

// A secret file must be a regular file: a directory, named by a -file setting or a ${file:}
// reference, is an error saying so, where its read failed with "is a directory".
func TestSecretFileIsADirectory(t *testing.T) {
	dir := t.TempDir()
	want := "the secret file " + dir + " is a directory, not a regular file: name the file that holds the secret"
	if _, err := resolveServe(t, []string{"--admin-token-file", dir}, nil, serverConfig{}); err == nil || !strings.Contains(err.Error(), "--admin-token-file: "+want) {
		t.Errorf("--admin-token-file naming a directory: %v, want an error saying %q", err, want)
	}
	_, err := decodeConfig([]byte("server:\n  adminToken: ${file:"+dir+"}\n"), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "line 2: ${file:"+dir+"}: "+want) {
		t.Errorf("a ${file:} reference to a directory: %v, want an error saying %q", err, want)
	}
}

// The TLS private key is a secret file like the others: readable by group or others it gets
// the start warning, and a path naming something other than a regular file stops serve
// before it opens anything, with exit status 2 and an error saying what the path names,
// where the read failed only once the server was serving.
func TestServeReadsTheTLSKeyAsASecretFile(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := selfSigned(t, dir)
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	warnings := make(chan string, 4)
	srv := startLogged(t, warnings, "the secret file", "--insecure-dev", "--data-dir", filepath.Join(dir, "data"), "--tls-cert", certFile, "--tls-key", keyFile)
	select {
	case line := <-warnings:
		if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "chmod 600 "+keyFile) || !strings.Contains(line, "mode=0644") {
			t.Fatalf("the start warning is %q; want a WARN naming the TLS key, its mode and chmod 600", line)
		}
	default: // the start warnings are written before "egrid serving"
		t.Fatalf("no warning about the TLS key readable by others:\n%s", srv.log())
	}

	notAFile := t.TempDir()
	var out bytes.Buffer
	code := run(t.Context(), []string{"egrid", "serve", "--listen", "127.0.0.1:0", "--insecure-dev", "--data-dir", filepath.Join(notAFile, "data"),
		"--tls-cert", certFile, "--tls-key", notAFile}, env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }})
	want := "--tls-key: the secret file " + notAFile + " is a directory, not a regular file"
	if code != 2 || !strings.Contains(out.String(), want) {
		t.Fatalf("serve with a directory as --tls-key: exit %d, want 2 and an error saying %q:\n%s", code, want, out.String())
	}
}

// egrid validate warns of a ${file:} reference to a file others can read, as serve does at
// start: on stderr, naming the file, its mode and chmod 600, and the config is still valid.
func TestValidateWarnsOfReadableFileReferences(t *testing.T) {
	keyFile, cfg := readableKeyConfig(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"egrid", "validate", "--config", cfg}, env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
	if code != 0 || !strings.Contains(stdout.String(), "is valid") {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q; want valid", code, stdout.String(), stderr.String())
	}
	wantReadableWarning(t, stderr.String(), keyFile)
	if err := os.Chmod(keyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"egrid", "validate", "--config", cfg}, env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}); code != 0 || stderr.Len() != 0 {
		t.Fatalf("validate with the file private: exit %d, stderr %q; want 0 and nothing", code, stderr.String())
	}
}

// readableKey is the topic key readableKeyConfig's file holds.
const readableKey = "a2V5LWZyb20tYS1yZWFkYWJsZS1maWxl"

// readableKeyConfig writes a topic key to a file group and others can read (0644, as
// Kubernetes mounts secrets) and a config whose topic orders takes it by ${file:}.
func readableKeyConfig(t *testing.T) (keyFile, cfg string) {
	t.Helper()
	keyFile = filepath.Join(t.TempDir(), "orders-key1")
	if err := os.WriteFile(keyFile, []byte(readableKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keyFile, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	cfg = filepath.Join(t.TempDir(), "egrid.yaml")
	if err := os.WriteFile(cfg, []byte("topics:\n  - name: orders\n    properties: {key1: \"${file:"+keyFile+"}\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile, cfg
}

// wantReadableWarning fails t unless text warns of keyFile: a WARN naming it, its mode and
// chmod 600.
func wantReadableWarning(t *testing.T, text, keyFile string) {
	t.Helper()
	if !strings.Contains(text, "level=WARN") || !strings.Contains(text, "the secret file "+keyFile+" ") ||
		!strings.Contains(text, "chmod 600 "+keyFile) || !strings.Contains(text, "mode=0644") {
		t.Fatalf("the warning is %q; want a WARN naming the referenced file, its mode and chmod 600", text)
	}
}
