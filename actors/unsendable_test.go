package actors_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// poisonKind is how a stored event is broken.
type poisonKind int

const (
	badHeader poisonKind = iota // its id holds a line feed: no aeg-output-event-id header
	badBody                     // its stored object has no data: it cannot be converted
)

// storeMixed appends to the topic's journal, bypassing publish validation (as events stored
// by an older version would), 30 good events (good-00..29) and before every third one a
// poison event (poison-0..9) of the given kinds, in turn, the first one first. It returns the
// good ids.
func storeMixed(t *testing.T, st store.Store, topicID string, kinds ...poisonKind) []string {
	t.Helper()
	var goodIDs []string
	var evs []*schemas.Event
	decode := func(id string) *schemas.Event {
		body := `[{"id":"` + id + `","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{"n":1},"dataVersion":"1"}]`
		got, err := schemas.DecodeEventGrid([]byte(body), topicID, schemas.ClassicLimits)
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	poison := 0
	for i := range 30 {
		id := fmt.Sprintf("good-%02d", i)
		goodIDs = append(goodIDs, id)
		if i%3 == 0 {
			ev := decode(fmt.Sprintf("poison-%d", poison))
			switch kinds[poison%len(kinds)] {
			case badHeader:
				ev.ID += "\nX-Injected: 1"
			case badBody:
				ev.Raw = []byte(`{"id":"` + ev.ID + `","subject":"/s","eventType":"T"}`)
			}
			evs = append(evs, ev)
			poison++
		}
		evs = append(evs, decode(id))
	}
	if _, err := st.Append(context.Background(), topicName, time.Now(), evs); err != nil {
		t.Fatal(err)
	}
	return goodIDs
}

// Events that can never be sent — a delivery header cannot be built from them, or they
// cannot be encoded — end alone, dead-lettered with UndeliverableDueToEventContent; every
// good event around them is delivered at once (no virtual time passes), the endpoint never
// sees a poison event and never enters probation (SPEC §8). Without this, ten poison events
// put the endpoint on probation and held the good events back for hours.
func TestUnsendableEventsEndAlone(t *testing.T) {
	tests := []struct {
		name      string
		delivery  schemas.Schema
		maxEvents int
		kinds     []poisonKind
	}{
		{name: "unbatched, bad headers", delivery: schemas.EventGrid, kinds: []poisonKind{badHeader}},
		{name: "batches of 4, bad headers", delivery: schemas.EventGrid, maxEvents: 4, kinds: []poisonKind{badHeader}},
		{name: "cloudevents unbatched, bad headers and bodies", delivery: schemas.CloudEvents, kinds: []poisonKind{badHeader, badBody}},
		{name: "cloudevents batches of 4, bad headers and bodies", delivery: schemas.CloudEvents, maxEvents: 4, kinds: []poisonKind{badHeader, badBody}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := store.NewMemory()
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				hook := h.Endpoint("hook")
				sp := spec(hook.URL(), router.RetryPolicy{}, true)
				sp.EventDeliverySchema = tt.delivery.DeliveryName()
				sp.Destination.Properties.MaxEventsPerBatch = tt.maxEvents
				h.Subscribe(topicName, subName, sp)
				h.Settle() // the subscription actor is up and idle
				good := storeMixed(t, st, h.Router().TopicID(topicName), tt.kinds...)
				h.Settle()
				if n := len(hook.Attempts()); n != 0 {
					t.Fatalf("%d attempts before the restart; the running subscription must not know of the stored events", n)
				}
				h.Restart() // the new subscription actor finds them in the journal
				h.Settle()

				if got := h.Elapsed(); got != 0 {
					t.Errorf("%s of virtual time passed; the good events must go at once", got)
				}
				requireEachOnce(t, hook.Delivered(), good)
				for _, a := range hook.Attempts() {
					if slices.ContainsFunc(a.EventIDs(), func(id string) bool { return strings.HasPrefix(id, "poison") }) {
						t.Errorf("the endpoint got a poison event: %v", a.EventIDs())
					}
				}
				dls := h.DeadLetters(subName).Records()
				if len(dls) != 10 {
					t.Fatalf("%d dead letters, want the 10 poison events", len(dls))
				}
				for _, d := range dls {
					if d.Reason != schemas.UndeliverableDueToEventContent || !strings.HasPrefix(d.Event.ID, "poison") || d.DeliveryAttempts != 1 {
						t.Errorf("dead letter %q: reason %s after %d attempts, want a poison event with UndeliverableDueToEventContent after 1",
							d.Event.ID, d.Reason, d.DeliveryAttempts)
					}
				}
				st := status(t, h, topicName, subName)
				if st.Probation.State != retry.Healthy || st.Probation.ConsecutiveFailures != 0 || st.Backlog != 0 {
					t.Errorf("status %+v, want a healthy endpoint with no failures counted and no backlog", st)
				}
				requireCounters(t, h, topicName, subName, map[string]int64{
					"DeliverySuccessCount": 30, "DeliveryAttemptFailCount{GenericError}": 10,
					"DeadLetteredCount{UndeliverableDueToEventContent}": 10,
				})
			}, testkit.WithStore(st))
		})
	}
}

// A poison event that is the probe of a probation does not end the probation or re-enter it:
// it ends alone and the next batch is the probe.
func TestUnsendableProbeIsNoProbe(t *testing.T) {
	st := store.NewMemory()
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.FailFirst(10, 500))
		h.Subscribe(topicName, subName, spec(hook.URL(), router.RetryPolicy{MaxDeliveryAttempts: 1}, true))
		for i := range 10 {
			h.Publish(topicName, h.EventGridEvent(testkit.ID(fmt.Sprintf("fail-%d", i))))
		}
		h.Settle()
		if s := status(t, h, topicName, subName); s.Probation.State != retry.OnProbation {
			t.Fatalf("probation %+v after 10 failures, want OnProbation", s.Probation)
		}
		good := storeMixed(t, st, h.Router().TopicID(topicName), badHeader)
		h.Restart()                // probation state is restored; the new actor finds the stored events
		h.Advance(2 * time.Minute) // the 1-minute probation ends; the first batch is a poison event
		requireEachOnce(t, hook.Delivered(), good)
		if s := status(t, h, topicName, subName); s.Probation.State != retry.Healthy {
			t.Errorf("probation %+v, want Healthy after the probe of good events", s.Probation)
		}
		n := 0
		for _, d := range h.DeadLetters(subName).Records() {
			if d.Reason == schemas.UndeliverableDueToEventContent {
				n++
			}
		}
		if n != 10 {
			t.Errorf("%d poison events dead-lettered as UndeliverableDueToEventContent, want 10", n)
		}
	}, testkit.WithStore(st))
}
