package schemas_test

import (
	"testing"

	"github.com/egridio/egrid/schemas"
)

// maxAllocsPerEvent bounds what decoding a publish allocates per event: the Event, its Raw
// and one string that all its string members share (measured 3.1 for Event Grid and CloudEvents on
// 2026-11-23, with the request's own slices; 7.1 and 10.1 when each member had a string of
// its own). Every allocation is garbage the ingest path's collector pays for.
const maxAllocsPerEvent = 3.2

// TestDecodeAllocsPerEvent is the regression guard of the decoders' allocations.
func TestDecodeAllocsPerEvent(t *testing.T) {
	const n = 100
	eg := benchEventGridBody(n)
	evs, err := schemas.DecodeEventGrid(eg, topicID, schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	ce, _, err := schemas.EncodeBatch(nil, schemas.EventGrid, schemas.CloudEvents, topicID, evs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func() error
	}{
		{"EventGrid", func() error { _, err := schemas.DecodeEventGrid(eg, topicID, schemas.ClassicLimits); return err }},
		{"CloudEvents", func() error { _, err := schemas.DecodeCloudEvents(ce, schemas.ClassicLimits); return err }},
	} {
		if err := c.decode(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := testing.AllocsPerRun(20, func() { _ = c.decode() }) / n; got > maxAllocsPerEvent {
			t.Errorf("%s: %.2f allocations per event, want at most %.1f", c.name, got, maxAllocsPerEvent)
		}
	}
}
