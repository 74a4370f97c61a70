package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// publishStatus posts body to topic orders and returns the status and the error details.
func publishStatus(t *testing.T, client *http.Client, server string, body []byte) (int, []string) {
	t.Helper()
	resp, err := client.Post(server+"/topics/orders/api/events?api-version=2018-01-01", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("publishing: %v", err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Details []struct {
				Message string `json:"message"`
			} `json:"details"`
		} `json:"error"`
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &e)
	var details []string
	for _, d := range e.Error.Details {
		details = append(details, d.Message)
	}
	if len(details) == 0 && e.Error.Message != "" {
		details = append(details, e.Error.Message)
	}
	return resp.StatusCode, details
}

// poisonEvent is an Event Grid event whose id or dataVersion is given as raw JSON string
// content (escapes allowed).
func poisonEvent(id, dataVersion string) string {
	return `{"id":"` + id + `","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{},"dataVersion":"` + dataVersion + `"}`
}

// Through the binary: events egrid could never put into a delivery header are refused at
// publish with a 400 that names the event and the field, and nothing of the request is
// accepted; good events keep flowing.
func TestPoisonEventsRefusedAtPublish(t *testing.T) {
	hook, got := newHook(t, 10, func(int) bool { return false })
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"))
	createWebhookSubscription(t, srv.url, hook.URL+"/hook", 30)
	client := &http.Client{Timeout: 30 * time.Second}

	tests := []struct {
		name string
		body string
		want string // a detail must contain it
	}{
		{name: "line feed in id", body: "[" + poisonEvent("good-0", "1") + "," + poisonEvent(`bad\nid`, "1") + "]", want: `event 1: field "id": holds the control character U+000A`},
		{name: "carriage return in dataVersion", body: "[" + poisonEvent("bad-1", `1.0\r`) + "]", want: `event 0: field "dataVersion": holds the control character U+000D`},
		{name: "100 000-character id", body: "[" + poisonEvent(strings.Repeat("x", 100_000), "1") + "]", want: `event 0: field "id": is 100000 bytes, over the limit of 1024 bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, details := publishStatus(t, client, srv.url, []byte(tt.body))
			if status != http.StatusBadRequest {
				t.Fatalf("status %d (%v), want 400", status, details)
			}
			found := false
			for _, d := range details {
				found = found || strings.Contains(d, tt.want)
			}
			if !found {
				t.Errorf("details %q do not contain %q", details, tt.want)
			}
		})
	}

	if status, details := publishStatus(t, client, srv.url, eventsBody([]string{"after"})); status != http.StatusOK {
		t.Fatalf("good publish: %d %v", status, details)
	}
	select {
	case r := <-got:
		if len(r.ids) != 1 || r.ids[0] != "after" {
			t.Fatalf("endpoint got %v, want only the good event (the refused requests must leave nothing behind)", r.ids)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the good event was not delivered within 30 s")
	}
}

// hostileBodies are malformed and poison publishes, one kind per entry; a hostile run cycles
// through them.
var hostileBodies = []func(i int) []byte{
	func(i int) []byte { return []byte("[" + poisonEvent(fmt.Sprintf(`p%d\n`, i), "1") + "]") },
	func(i int) []byte { return []byte("[" + poisonEvent(fmt.Sprintf("p%d", i), `\u0000`) + "]") },
	func(i int) []byte { return []byte("[" + poisonEvent(strings.Repeat("x", 100_000), "1") + "]") },
	func(i int) []byte { return []byte(`[{"id":"p` + strconv.Itoa(i) + `","subject":`) }, // truncated JSON
	func(i int) []byte { return []byte(`{"id":"not an array"}`) },
	func(i int) []byte {
		return []byte(`[{"id":"p","eventType":"","eventTime":"yesterday","data":1,"subject":"s"}]`)
	},
	func(i int) []byte { return bytes.Repeat([]byte("["), 100_000) }, // deep nesting
	func(i int) []byte { // 5000 poison events in one request
		evs := make([]string, 5000)
		for j := range evs {
			evs[j] = poisonEvent(fmt.Sprintf(`p%d-%d\r`, i, j), "1")
		}
		return []byte("[" + strings.Join(evs, ",") + "]")
	},
	func(i int) []byte { return bytes.Repeat([]byte(" "), 2<<20) }, // over 1 MB
}

// rssKB reads a process's resident set size from /proc (Linux); 0 when unavailable.
func rssKB(pid int) int {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// A hostile-input run against the binary: malformed and poison publishes are all refused (400
// or 413), none is accepted, and afterwards the server still delivers a good event. It logs
// the status histogram and the server's RSS before and after. EGRID_HOSTILE_N sets the number
// of publishes (default 270; the README's figures use 5000).
func TestHostilePublishes(t *testing.T) {
	n := 270
	if v, err := strconv.Atoi(os.Getenv("EGRID_HOSTILE_N")); err == nil && v > 0 {
		n = v
	}
	hook, got := newHook(t, 10, func(int) bool { return false })
	srv := startServer(t, "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"))
	createWebhookSubscription(t, srv.url, hook.URL+"/hook", 30)
	client := &http.Client{Timeout: 30 * time.Second}
	pid := srv.cmd.Process.Pid
	before := rssKB(pid)

	hist := map[int]int{}
	for i := range n {
		status, details := publishStatus(t, client, srv.url, hostileBodies[i%len(hostileBodies)](i))
		hist[status]++
		if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge {
			t.Errorf("hostile publish %d (kind %d) answered %d %v, want 400 or 413", i, i%len(hostileBodies), status, details)
		}
	}
	after := rssKB(pid)

	if status, details := publishStatus(t, client, srv.url, eventsBody([]string{"after"})); status != http.StatusOK {
		t.Fatalf("good publish after the hostile run: %d %v", status, details)
	}
	select {
	case r := <-got:
		if len(r.ids) != 1 || r.ids[0] != "after" {
			t.Fatalf("endpoint got %v, want only the good event", r.ids)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the good event was not delivered within 30 s of the hostile run")
	}
	codes := make([]int, 0, len(hist))
	for c := range hist {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d×%d", hist[c], c))
	}
	t.Logf("%d hostile publishes (%s): %s; server RSS %d → %d KB (%s/%s)", n, fmt.Sprint(len(hostileBodies))+" kinds", strings.Join(parts, ", "), before, after, runtime.GOOS, runtime.GOARCH)
}
