package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestResolveLogging: --log-level and --log-format come from the flag, then EGRID_LOG_LEVEL /
// EGRID_LOG_FORMAT, then server.logLevel / server.logFormat, then info and text; a bad value
// names where it came from and what to use.
func TestResolveLogging(t *testing.T) {
	for _, c := range []struct {
		name    string
		args    []string
		env     map[string]string
		fs      serverConfig
		level   slog.Level
		format  string
		wantErr string
	}{
		{name: "defaults", level: slog.LevelInfo, format: "text"},
		{name: "file", fs: serverConfig{LogLevel: "warn", LogFormat: "json"}, level: slog.LevelWarn, format: "json"},
		{name: "env over file", env: map[string]string{"EGRID_LOG_LEVEL": "debug", "EGRID_LOG_FORMAT": "text"},
			fs: serverConfig{LogLevel: "warn", LogFormat: "json"}, level: slog.LevelDebug, format: "text"},
		{name: "flag over env", args: []string{"--log-level", "error", "--log-format", "JSON"},
			env: map[string]string{"EGRID_LOG_LEVEL": "debug", "EGRID_LOG_FORMAT": "text"}, level: slog.LevelError, format: "json"},
		{name: "bad format", fs: serverConfig{LogFormat: "xml"}, wantErr: `server.logFormat "xml": use text or json`},
		{name: "bad level", env: map[string]string{"EGRID_LOG_LEVEL": "loud"}, wantErr: `EGRID_LOG_LEVEL "loud": use debug, info, warn or error`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := resolveServe(t, c.args, c.env, c.fs)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Log.Level != c.level || got.Log.Format != c.format {
				t.Errorf("level %v format %q, want %v %q", got.Log.Level, got.Log.Format, c.level, c.format)
			}
		})
	}
}

func TestLogHandlerFormats(t *testing.T) {
	var buf bytes.Buffer
	slog.New(logSettings{Level: slog.LevelInfo, Format: "json"}.handler(&buf)).Info("event dropped", "topic", "orders")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "event dropped" || rec["topic"] != "orders" {
		t.Errorf("json handler wrote %q (%v)", buf.String(), err)
	}
	buf.Reset()
	slog.New(logSettings{Level: slog.LevelWarn, Format: "text"}.handler(&buf)).Info("hidden")
	slog.New(logSettings{Level: slog.LevelWarn, Format: "text"}.handler(&buf)).Warn("shown", "topic", "orders")
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, "msg=shown topic=orders") {
		t.Errorf("text handler at warn wrote %q", s)
	}
}

// TestMetricsGuardUnderInsecureDev: /metrics on --listen without an admin token is open under
// --insecure-dev to this machine's programs, not to a web page that pointed a name of its own
// at the server (DNS rebinding; router/devguard).
func TestMetricsGuardUnderInsecureDev(t *testing.T) {
	h := guardMetrics(serveSettings{InsecureDev: true}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("metrics"))
	}))
	for _, tt := range []struct {
		host string
		want int
	}{
		{"localhost:8080", http.StatusOK},
		{"127.0.0.1:8080", http.StatusOK},
		{"rebind.attacker.example:8080", http.StatusForbidden},
	} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Host = tt.host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("Host %s: %d %s; want %d", tt.host, rec.Code, rec.Body, tt.want)
		}
	}
}

// TestMetricsBearerSchemeIgnoresCase: /metrics on --listen takes "bearer <token>" as the
// admin API does (RFC 9110 §11.1: schemes match ignoring case).
func TestMetricsBearerSchemeIgnoresCase(t *testing.T) {
	h := guardMetrics(serveSettings{AdminToken: "tok"}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for authz, want := range map[string]int{"Bearer tok": 200, "bearer tok": 200, "bearer nope": 401} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", authz)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Authorization %q: %d; want %d", authz, rec.Code, want)
		}
	}
}
