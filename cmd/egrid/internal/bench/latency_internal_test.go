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
	r := syncRow("latency", eg, base)
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
	if none := syncRow("ack", disk.SyncTimes{}, nil); none.Value != 0 || none.Ratio != 0 || !strings.Contains(none.Note, "egrid: 0 syncs, 0 over 5 ms, slowest none") {
		t.Errorf("no syncs: %+v", none)
	}
}
