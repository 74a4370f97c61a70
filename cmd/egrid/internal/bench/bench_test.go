package bench_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/egridio/egrid/cmd/egrid/internal/bench"
)

// TestScenarioTable checks the tables the CLI is built from (the default one and the one
// --cluster runs): unique names across both, each row complete.
func TestScenarioTable(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range append(append([]bench.Scenario(nil), bench.Scenarios...), bench.ClusterScenarios...) {
		if s.Name == "" || s.Description == "" || s.Run == nil {
			t.Errorf("scenario %+v: name, description and run are required", s)
		}
		if seen[s.Name] {
			t.Errorf("scenario %s is declared twice", s.Name)
		}
		seen[s.Name] = true
		if got, ok := bench.Lookup(s.Name); !ok || got.Name != s.Name {
			t.Errorf("Lookup(%q) = %v, %v", s.Name, got.Name, ok)
		}
	}
	if _, ok := bench.Lookup("nope"); ok {
		t.Error("Lookup found a scenario that is not in the table")
	}
}

// TestWriteTableAligns prints rows whose names are longer than any fixed column width and
// checks that every column still starts at the same offset on every line.
func TestWriteTableAligns(t *testing.T) {
	yes, no := true, false
	rs := []bench.Result{
		{Scenario: "publish100", Metric: "durable publish", Value: 123456, Unit: "events/s", Baseline: 200000, Ratio: 0.62, Target: "≥ 100000 events/s", Met: &yes},
		{Scenario: "a-scenario-with-a-much-longer-name", Metric: "a metric whose name is longer than the old thirty-eight columns", Value: 1.5, Unit: "ms", Met: &no, Note: "a note"},
		{Scenario: "idle", Metric: "heap", Value: 42, Unit: "bytes"},
	}
	var buf bytes.Buffer
	if err := bench.WriteTable(&buf, rs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 1+len(rs) {
		t.Fatalf("got %d lines, want a header and %d rows:\n%s", len(lines), len(rs), buf.String())
	}
	// Each row's cells, as they must appear under each header column.
	cells := [][]string{
		{"publish100", "durable publish", "123456", "events/s", "200000", "0.62", "≥ 100000 events/s", "yes"},
		{"a-scenario-with-a-much-longer-name", "a metric whose name", "1.50", "ms", "", "", "", "NO  (a note)"},
		{"idle", "heap", "42", "bytes", "", "", "", ""},
	}
	header, from := lines[0], 0
	for c, col := range []string{"SCENARIO", "METRIC", "VALUE", "UNIT", "BASELINE", "RATIO", "TARGET", "MET"} {
		at := strings.Index(header[from:], col)
		if at < 0 {
			t.Fatalf("header %q has no %s after byte %d", header, col, from)
		}
		from += at + len(col)
		at = len([]rune(header[:from-len(col)]))
		for i, line := range lines[1:] {
			want := cells[i][c]
			if want == "" {
				continue
			}
			if r := []rune(line); len(r) < at || !strings.HasPrefix(string(r[at:]), want) {
				t.Errorf("row %d: %q does not start under %s (rune %d):\n%s", i+1, want, col, at, buf.String())
			}
		}
	}
	for _, want := range []string{"1.50", "NO  (a note)", "123456", "200000", "0.62"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}
