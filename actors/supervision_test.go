package actors_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// recorder is a Go sink that records deliveries; it panics on the calls listed in panicOn.
type recorder struct {
	mu      sync.Mutex
	calls   int
	panicOn map[int]bool
	got     []delivery
}

type delivery struct {
	id    string
	count int
	at    time.Time
}

func (r *recorder) Deliver(_ context.Context, b *sinks.Batch) error {
	r.mu.Lock()
	r.calls++
	n := r.calls
	r.mu.Unlock()
	if r.panicOn[n] {
		panic("sink bug")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range b.Events {
		r.got = append(r.got, delivery{id: ev.ID, count: b.DeliveryCount, at: time.Now()})
	}
	return nil
}

func (r *recorder) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// A sink that panics mid-delivery restarts its subscription actor; the event is still
// delivered after the restart, and a second subscription on the same topic never notices.
func TestSinkPanicRestartsOnlyItsSubscription(t *testing.T) {
	panicky := &recorder{panicOn: map[int]bool{1: true}}
	calm := &recorder{}
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.Subscribe("orders", "panicky", router.SubscriptionSpec{Destination: router.SinkDestination("panicky")})
		h.Subscribe("orders", "calm", router.SubscriptionSpec{Destination: router.SinkDestination("calm")})
		start := time.Now()
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Settle()
		h.Publish("orders", h.EventGridEvent(testkit.ID("e2")))
		h.Advance(time.Minute)

		got := panicky.deliveries()
		ids := map[string]int{}
		for _, d := range got {
			ids[d.id]++
		}
		if ids["e1"] != 1 || ids["e2"] != 1 {
			t.Fatalf("panicky subscription delivered %v, want e1 and e2 once each after the restart", got)
		}
		for _, d := range got {
			if d.id == "e1" && d.count != 1 {
				t.Errorf("e1 redelivered with aeg-delivery-count %d, want 1 (the panicked attempt counts)", d.count)
			}
		}
		cg := calm.deliveries()
		if len(cg) != 2 || cg[0].id != "e1" || cg[1].id != "e2" {
			t.Fatalf("calm subscription delivered %v, want e1 then e2", cg)
		}
		for _, d := range cg {
			if d.count != 0 || !d.at.Equal(start) {
				t.Errorf("calm delivery %s: count %d at +%v, want first attempts at +0s: it must not notice its sibling's crash", d.id, d.count, d.at.Sub(start))
			}
		}
		st, err := h.Router().Status(context.Background(), "orders", "panicky")
		if err != nil {
			t.Fatal(err)
		}
		if st.Backlog != 0 {
			t.Errorf("panicky backlog %d after the restart, want 0", st.Backlog)
		}
	}, testkit.WithSink("panicky", panicky), testkit.WithSink("calm", calm))
}
