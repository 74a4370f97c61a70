package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store/disk"
)

// TestSyncRow: the sync row counts each side's syncs over the stall bound and names the
// slowest, so a run whose ack tail came from the disk says so.
func TestSyncRow(t *testing.T) {
	ms := time.Millisecond
	eg := disk.SyncTimes{Count: 100, Buckets: []disk.SyncBucket{
		{UpperBound: ms, Count: 90}, {UpperBound: 2 * ms, Count: 99}, {UpperBound: stallOver, Count: 99}, {UpperBound: 150 * ms, Count: 100},
	}}
	base := []time.Duration{120 * ms, 300 * time.Microsecond, 400 * time.Microsecond, 6 * ms}
	r := syncRow("latency", "", eg, base)
	if r.Value != 2 {
		t.Errorf("egrid's p99 %v ms, want the 2 ms bucket's bound", r.Value)
	}
	if r.Baseline != 120 {
		t.Errorf("baseline p99 %v ms, want 120 (the slowest of four)", r.Baseline)
	}
	for _, want := range []string{"egrid: 100 syncs, 1 over 5 ms, slowest ≤ 150.0 ms", "baseline: 4 fsyncs, 2 over 5 ms, slowest 120.0 ms"} {
		if !strings.Contains(r.Note, want) {
			t.Errorf("note %q lacks %q", r.Note, want)
		}
	}
	if none := syncRow("ack", "", disk.SyncTimes{}, nil); none.Value != 0 || none.Ratio != 0 || !strings.Contains(none.Note, "egrid: 0 syncs, 0 over 5 ms, slowest none") {
		t.Errorf("no syncs: %+v", none)
	}
}

// TestAckRows: the acknowledgement rows against the read+fsync+deliver server carry the
// target, 1.5 times its p50 and p99 each, and those against another baseline name it and
// hold nothing.
func TestAckRows(t *testing.T) {
	// 99 requests at the median's time and one slower, which is the p99 of 100 (percentile
	// takes the one at index 0.99 × 100): egrid 2 and 9 ms, the baseline 1 and 10.
	times := func(median, slowest time.Duration) []time.Duration {
		out := make([]time.Duration, 100)
		for i := range out {
			out[i] = median
		}
		out[99] = slowest
		return out
	}
	egrid, base := times(2*time.Millisecond, 9*time.Millisecond), times(time.Millisecond, 10*time.Millisecond)
	rows := ackRows("latency", "", egrid, base, "n")
	if len(rows) != 2 || rows[0].Metric != "publish→durable ack p50" || rows[1].Metric != "publish→durable ack p99" {
		t.Fatalf("rows %+v", rows)
	}
	if r := rows[0]; r.Ratio != 2 || r.Met == nil || *r.Met {
		t.Errorf("p50 2 ms against 1: ratio %v, met %v; want 2, not met", r.Ratio, r.Met)
	}
	if r := rows[1]; r.Ratio != 0.9 || r.Met == nil || !*r.Met || r.Target != "≤ 1.5 × baseline" {
		t.Errorf("p99 9 ms against 10: ratio %v, met %v, target %q; want 0.9, met", r.Ratio, r.Met, r.Target)
	}
	other := ackRows("latency", "read+fsync", egrid, base, "n")
	for _, r := range other {
		if r.Met != nil || r.Target != "" || !strings.HasSuffix(r.Metric, ", against read+fsync") {
			t.Errorf("row against another baseline: %+v", r)
		}
	}
	if none := ackRows("latency", "", egrid, nil, ""); none[0].Met == nil || *none[0].Met {
		t.Errorf("no baseline: %+v, want not met", none[0])
	}
}
