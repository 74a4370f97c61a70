package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A replay whose summary says it is incomplete (the store went down while it read the
// objects) prints the summary, says what it left and why, and exits 1, in a table and with
// -o json; a dry run likewise. Before, it exited 0 and the table said only what it delivered.
func TestIncompleteReplayExitsNonZero(t *testing.T) {
	const reason = "BILLING/2026/1/2/3/c.json: not read: connection refused; the selection read no further objects: 3 objects selected were not read, and their events not replayed; " +
		"once the dead-letter store answers, replay again with --until 2026-01-02T03:04:05.000000001Z to take them"
	summary := `{"dryRun":false,"objects":2,"found":4,"replayed":4,"skipped":0,"delivered":4,"deadLettered":0,"dropped":0,` +
		`"unreadObjects":3,"incomplete":true,"incompleteReason":` + strings.TrimSpace(mustJSON(t, reason)) + `,"completed":false,"problems":[` + mustJSON(t, reason) + `]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = w.Write([]byte(`{"progress":{"stage":"reading","done":2,"total":5}}` + "\n" + `{"summary":` + summary + "}\n"))
	}))
	defer srv.Close()
	replay := func(args ...string) (int, string) {
		return cliRun(t, append([]string{"deadletter", "replay", "--server", srv.URL, "--topic", "orders", "--subscription", "billing"}, args...)...)
	}
	code, out := replay()
	if code != 1 || !strings.Contains(out, "delivered 4") || !strings.Contains(out, "INCOMPLETE: 3 objects not read, 0 events not replayed: "+reason) ||
		!strings.Contains(out, "replay incomplete: 3 objects selected were not read") {
		t.Errorf("replay: exit %d\n%s\nwant exit 1, the summary and what it left", code, out)
	}
	code, out = replay("-o", "json")
	if code != 1 || !strings.Contains(out, `"incomplete": true`) || !strings.Contains(out, `"unreadObjects": 3`) || !strings.Contains(out, "replay incomplete: ") {
		t.Errorf("replay -o json: exit %d\n%s\nwant exit 1 and the summary saying it is incomplete", code, out)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
