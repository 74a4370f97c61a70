package bench

import (
	"testing"
	"time"
)

func TestPublishRounds(t *testing.T) {
	var r rounds
	if r.mean() != 0 || r.spread() != "none" {
		t.Errorf("no rounds: mean %v, spread %q; want 0 and none", r.mean(), r.spread())
	}
	// 300 requests of 100 events in 1 s, 500 in 2 s, 100 in 0.5 s: 30 000, 25 000, 20 000 events/s.
	r.add(loaded{ok: 300, elapsed: time.Second}, 100)
	r.add(loaded{ok: 500, elapsed: 2 * time.Second}, 100)
	r.add(loaded{ok: 100, elapsed: time.Second / 2}, 100)
	if r.mean() != 25000 {
		t.Errorf("mean = %v, want 25000 (the rounds' rates averaged)", r.mean())
	}
	if r.events != 90000 {
		t.Errorf("events = %d, want 90000", r.events)
	}
	if got := r.spread(); got != "20000–30000" {
		t.Errorf("spread = %q, want 20000–30000", got)
	}
}
