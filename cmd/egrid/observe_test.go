package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
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

// hostileLogText are strings a client controls that reach the log (a refused path, an endpoint's
// answer, an event id): a line break with a forged record after it, in both formats' shapes, a
// C1 NEL (a line break to readers that split on Unicode line breaks) and CSI, the line and
// paragraph separators, DEL, ESC and bytes that are not UTF-8.
var hostileLogText = []string{
	"a\nlevel=ERROR msg=forged",
	"b\r\ntime=2026-01-01T00:00:00Z level=ERROR msg=forged",
	`c"}` + "\n" + `{"level":"ERROR","msg":"forged"}`,
	"d\u0085e\u009b2J\u2028f\u2029g\x7fh\x1b[2Ji",
	"j\xc2\x85\xff\x9bk",
}

// TestLogLinesAreOneRecordEach: with --log-format json every record is one line holding one
// JSON object, UTF-8, with no C1 character or DEL a terminal showing the log would obey; with
// --log-format text one line of key=value pairs, the hostile values quoted. Strings a client
// controls (in the message, an attribute's key or value, an error, a group) cannot add a line
// or a record. slog's JSON handler escapes C0 and the line separators but wrote C1 and DEL as
// they were: the log's writer escapes them as -o json does.
func TestLogLinesAreOneRecordEach(t *testing.T) {
	logAll := func(l *slog.Logger) int {
		n := 0
		for _, s := range hostileLogText {
			l.Warn(s, s, s, "err", errors.New(s), slog.Group("g", s, s), "b", []byte(s))
			n++
		}
		return n
	}
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		n := logAll(slog.New(logSettings{Level: slog.LevelDebug, Format: format}.handler(&buf)))
		out := buf.Bytes()
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(lines) != n {
			t.Errorf("%s: %d records wrote %d lines:\n%s", format, n, len(lines), out)
		}
		requireNoC1(t, format+" log", out)
		if bytes.ContainsAny(out, "\x7f\x1b\r") || !utf8.Valid(out) {
			t.Errorf("%s log holds DEL, ESC, CR or bytes that are not UTF-8:\n%q", format, out)
		}
		for i, line := range lines {
			switch format {
			case "json":
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["level"] != "WARN" {
					t.Errorf("json line %d is not one WARN record (%v): %q", i, err, line)
					continue
				}
				want := string([]rune(hostileLogText[i])) // each byte that is not UTF-8 a U+FFFD
				g, _ := rec["g"].(map[string]any)
				if rec["msg"] != want || rec[want] != want || rec["err"] != want || g[want] != want {
					t.Errorf("json line %d: %q; want msg, the attribute and err %q", i, line, want)
				}
			case "text":
				if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=WARN msg=\"") {
					t.Errorf("text line %d is not one record: %q", i, line)
				}
			}
		}
	}
}
