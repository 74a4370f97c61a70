package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/egridio/egrid/cmd/egrid/internal/bench"
)

// TestBenchRuns runs a short bench of every cheap scenario and checks the report's shape: every
// scenario produced a positive value, and ratio rows carry their same-run baseline.
func TestBenchRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("bench smoke test runs real servers on 127.0.0.1 for a few seconds; skipped with -short")
	}
	code, out := cliRun(t, "bench", "--scenario", "publish1", "--scenario", "e2e1", "--scenario", "e2e100", "--scenario", "idle",
		"--duration", "300ms", "--idle-subscriptions", "200", "--dir", t.TempDir(), "-o", "json")
	if code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, out)
	}
	var rs []bench.Result
	if err := json.Unmarshal([]byte(out[strings.Index(out, "["):]), &rs); err != nil {
		t.Fatalf("bench -o json printed no JSON array: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, r := range rs {
		seen[r.Scenario] = true
		// A run this short may fill no memtable, so the store may have written no table.
		if r.Value <= 0 && r.Scenario != "idle" && !(r.Unit == "bytes/event" && r.Value == 0) {
			t.Errorf("%s %s = %v, want a positive measurement", r.Scenario, r.Metric, r.Value)
		}
		if r.Ratio != 0 && r.Baseline <= 0 {
			t.Errorf("%s has a ratio without a baseline", r.Scenario)
		}
	}
	for _, s := range []string{"publish1", "e2e1", "e2e100", "idle"} {
		if !seen[s] {
			t.Errorf("scenario %s missing from the report", s)
		}
	}
	// The delivery scenarios report CPU per delivered event, from /proc and from the profile.
	cpu := map[string]int{}
	for _, r := range rs {
		if r.Unit == "µs/event" {
			cpu[r.Scenario]++
		}
	}
	// The publish and delivery scenarios report what the store wrote to its tables.
	tables := map[string]int{}
	for _, r := range rs {
		if r.Unit == "bytes/event" && strings.HasPrefix(r.Metric, "table bytes written per ") && strings.Contains(r.Note, "flushes") {
			tables[r.Scenario]++
		}
	}
	for _, s := range []string{"publish1", "e2e1", "e2e100"} {
		if tables[s] != 1 {
			t.Errorf("scenario %s has %d rows of table bytes written, want 1", s, tables[s])
		}
	}
	for _, s := range []string{"e2e1", "e2e100"} {
		if cpu[s] != 2 {
			t.Errorf("scenario %s has %d CPU-per-event rows, want 2 (process and profile)", s, cpu[s])
		}
	}
	// The publish scenarios hold egrid against the read+validate+fsync server too, which must
	// have taken the bench's bodies (it answers 400 to a body egrid's decoder refuses).
	if cpu["publish1"] != 4 {
		t.Errorf("publish1 has %d CPU-per-event rows, want 4 (process and profile, against each baseline)", cpu["publish1"])
	}
	validating := false
	for _, r := range rs {
		if r.Scenario == "publish1" && r.Metric == "durable publish, against read+validate+fsync" {
			validating = r.Baseline > 0 && r.Ratio > 0
		}
	}
	if !validating {
		t.Errorf("publish1 has no rate against the read+validate+fsync server: %+v", rs)
	}
}
