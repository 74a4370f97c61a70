package actors_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// status returns a subscription's delivery state through the router's Go API.
func status(t *testing.T, h *testkit.Harness, topic, sub string) *router.Status {
	t.Helper()
	st, err := h.Router().Status(t.Context(), topic, sub)
	if err != nil {
		t.Fatalf("status of %s/%s: %v", topic, sub, err)
	}
	return st
}

// Ten failed attempts in a row put the endpoint on probation for 1 minute (SPEC §2.2): an
// event published during it waits instead of going out at once, the retries due at +10s wait
// too, and when the probation ends one batch goes out as the probe; its success ends the
// probation and the backlog drains at once.
func TestConsecutiveFailuresDelayNewDeliveries(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.FailFirst(10, http.StatusInternalServerError))
		h.CreateSubscription(topicName, subName, hook, router.RetryPolicy{})
		var ids []string
		var events []any
		for i := range 10 {
			ids = append(ids, fmt.Sprintf("e%d", i))
			events = append(events, h.EventGridEvent(testkit.ID(ids[i])))
		}
		h.Publish(topicName, events...)
		h.Settle()
		hook.RequireAttempts(t, 10)
		st := status(t, h, topicName, subName).Probation
		if !st.Active || st.State != retry.OnProbation || st.Cause != schemas.GenericError || st.ConsecutiveFailures != 10 || time.Until(st.Until) != time.Minute {
			t.Fatalf("probation after 10 failures: %+v; want active for 1m, cause GenericError, 10 consecutive failures", st)
		}

		h.Advance(time.Second)
		h.Publish(topicName, h.EventGridEvent(testkit.ID("late")))
		h.Advance(58 * time.Second) // +59s: the probation still runs
		hook.RequireAttempts(t, 10)
		if st := status(t, h, topicName, subName); st.Backlog != 11 || !st.Probation.Active {
			t.Fatalf("at +59s: %+v; want 11 events waiting on probation", st)
		}

		h.Advance(time.Second) // +1m: probe, then the backlog
		att := hook.Attempts()
		if len(att) != 21 {
			t.Fatalf("%d attempts at +1m, want 21 (10 failures, the probe, 10 retries)", len(att))
		}
		if ids := att[10].EventIDs(); att[10].At != time.Minute || !slices.Equal(ids, []string{"late"}) {
			t.Errorf("attempt 11 at +%v with %v; want the probe at +1m with the event published during probation", att[10].At, ids)
		}
		for _, a := range att[10:] {
			if a.At != time.Minute || a.Status != http.StatusOK {
				t.Errorf("attempt of %v at +%v answered %d; want every waiting event delivered at +1m", a.EventIDs(), a.At, a.Status)
			}
		}
		recs := h.AttemptRecords(subName)
		probes := 0
		for _, r := range recs {
			if r.Probe {
				probes++
				if r.EventIDs[0] != "late" {
					t.Errorf("probe carried %v, want [late]", r.EventIDs)
				}
			}
		}
		if probes != 1 {
			t.Errorf("%d probes, want 1", probes)
		}
		requireEachOnce(t, hook.Delivered(), append(ids, "late"))
		if st := status(t, h, topicName, subName); st.Backlog != 0 || st.Probation.State != retry.Healthy || st.Probation.Active {
			t.Errorf("after the probe: %+v; want healthy with an empty backlog", st)
		}
		requireCounters(t, h, topicName, subName, map[string]int64{"DeliveryAttemptFailCount{GenericError}": 10, "DeliverySuccessCount": 11})
	}, testkit.WithoutJitter())
}

// A 404 puts the endpoint on a 5-minute NotFound probation, a client error (SPEC §2.2): an
// event that comes due during it is dead-lettered without an attempt, with
// lastDeliveryOutcome Probation and reason UndeliverableDueToProbationCausedByClientError.
// After the probation the next event is the probe; it succeeds and deliveries resume.
func TestClientErrorProbationDeadLettersDueEvents(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Sequence(http.StatusNotFound, http.StatusOK))
		h.CreateSubscription(topicName, subName, hook, router.RetryPolicy{})
		h.Publish(topicName, h.EventGridEvent(testkit.ID("e1")))
		h.Advance(time.Minute)
		h.Publish(topicName, h.EventGridEvent(testkit.ID("e2")))
		h.Settle()
		st := status(t, h, topicName, subName).Probation
		if !st.Active || st.Cause != schemas.NotFound || time.Until(st.Until) != 4*time.Minute {
			t.Fatalf("probation at +1m: %+v; want NotFound until +5m", st)
		}
		h.Advance(4 * time.Minute)
		h.Publish(topicName, h.EventGridEvent(testkit.ID("e3")))
		h.Settle()

		testkit.Golden(t, "timeline-probation-404", report(h, "404 puts the endpoint on a 5 min client-error probation; e2 comes due during it, e3 after it", topicName, subName))
		hook.RequireAttempts(t, 2)
		requireEachOnce(t, hook.Delivered(), []string{"e3"})
		recs := h.DeadLetters(subName).Records()
		if len(recs) != 2 {
			t.Fatalf("%d dead letters, want 2", len(recs))
		}
		if r := recs[0]; r.Event.ID != "e1" || r.Reason != schemas.UndeliverableDueToClientError || r.LastOutcome != schemas.NotFound || r.LastHTTPStatus != 404 || r.DeliveryAttempts != 1 {
			t.Errorf("first dead letter %s %s outcome=%s status=%d attempts=%d; want e1 UndeliverableDueToClientError NotFound 404 after 1 attempt",
				r.Event.ID, r.Reason, r.LastOutcome, r.LastHTTPStatus, r.DeliveryAttempts)
		}
		if r := recs[1]; r.Event.ID != "e2" || r.Reason != schemas.UndeliverableDueToProbationCausedByClientError || r.LastOutcome != schemas.Probation || r.DeliveryAttempts != 0 || !r.LastAttemptTime.IsZero() {
			t.Errorf("second dead letter %s %s outcome=%s attempts=%d; want e2 UndeliverableDueToProbationCausedByClientError, lastDeliveryOutcome Probation, no attempt",
				r.Event.ID, r.Reason, r.LastOutcome, r.DeliveryAttempts)
		}
		if st := status(t, h, topicName, subName).Probation; st.State != retry.Healthy {
			t.Errorf("after the successful probe: %+v; want healthy", st)
		}
		requireCounters(t, h, topicName, subName, map[string]int64{
			"DeliveryAttemptFailCount{NotFound}": 1, "DeliverySuccessCount": 1,
			"DeadLetteredCount{UndeliverableDueToClientError}": 1, "DeadLetteredCount{UndeliverableDueToProbationCausedByClientError}": 1,
		})
	}, testkit.WithoutJitter())
}

// A failed probe re-enters probation and the ten-failures probation doubles with each failed
// probe; waiting does not use up attempts. After ten 500s the endpoint answers 200 only from
// the 13th request: probes at +1m (fails, 2 min), +3m (fails, 4 min), +7m (succeeds).
func TestFailedProbeDoublesProbation(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.FailFirst(12, http.StatusInternalServerError))
		h.CreateSubscription(topicName, subName, hook, router.RetryPolicy{})
		var events []any
		for i := range 10 {
			events = append(events, h.EventGridEvent(testkit.ID(fmt.Sprintf("e%d", i))))
		}
		h.Publish(topicName, events...)
		h.Advance(30 * time.Minute)

		var probes []string
		for _, r := range h.AttemptRecords(subName) {
			if r.Probe {
				probes = append(probes, fmt.Sprintf("+%v %s", h.Offset(r.Time), r.Outcome))
			}
		}
		if want := []string{"+1m0s GenericError", "+3m0s GenericError", "+7m0s Delivered"}; !slices.Equal(probes, want) {
			t.Errorf("probes %q, want %q", probes, want)
		}
		h.DeadLetters(subName).RequireNone(t)
		if got := len(hook.Delivered()); got != 10 {
			t.Errorf("%d events delivered, want 10", got)
		}
		requireCounters(t, h, topicName, subName, map[string]int64{"DeliveryAttemptFailCount{GenericError}": 12, "DeliverySuccessCount": 10})
	}, testkit.WithoutJitter())
}

// One subscription's probation does not slow another subscription of the same topic: while
// "sick" is on probation (its endpoint always answers 500), every event reaches "healthy" at
// the instant it is published, in virtual time.
func TestProbationDoesNotSlowOtherSubscriptions(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		sick, healthy := h.Endpoint("sick", testkit.Always(http.StatusInternalServerError)), h.Endpoint("healthy")
		h.CreateSubscription(topicName, "sick", sick, router.RetryPolicy{})
		h.CreateSubscription(topicName, "healthy", healthy, router.RetryPolicy{})
		var ids []string
		var published []time.Duration
		publish := func(n int) {
			for range n {
				id := fmt.Sprintf("e%03d", len(ids))
				ids = append(ids, id)
				published = append(published, h.Elapsed())
				h.Publish(topicName, h.EventGridEvent(testkit.ID(id)))
			}
		}
		publish(20)
		h.Settle()
		if st := status(t, h, topicName, "sick").Probation; !st.Active {
			t.Fatalf("sick after 20 failures: %+v; want on probation", st)
		}
		for range 60 {
			h.Advance(10 * time.Second)
			publish(1)
		}
		h.Settle()

		att := healthy.Attempts()
		if len(att) != len(ids) {
			t.Fatalf("healthy received %d requests, want %d", len(att), len(ids))
		}
		at := map[string]time.Duration{}
		for _, a := range att {
			for _, id := range a.EventIDs() {
				at[id] = a.At
			}
		}
		for i, id := range ids {
			if got, ok := at[id]; !ok || got != published[i] {
				t.Errorf("healthy received %s at +%v (received: %v); want it at +%v, when it was published", id, got, ok, published[i])
			}
		}
		if n := len(sick.Attempts()); n >= 20+60 {
			t.Errorf("sick received %d requests in 10 minutes; probation should have held most back", n)
		}
		requireCounters(t, h, topicName, "healthy", map[string]int64{"DeliverySuccessCount": int64(len(ids))})
	}, testkit.WithoutJitter())
}

// An operator ends a probation through the router (SPEC §2.2); the next event goes out at once,
// as an ordinary attempt rather than a probe.
func TestEndProbationThroughTheRouter(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Sequence(http.StatusNotFound, http.StatusOK))
		h.CreateSubscription(topicName, subName, hook, router.RetryPolicy{})
		h.Publish(topicName, h.EventGridEvent(testkit.ID("e1")))
		h.Advance(time.Minute)
		if st := status(t, h, topicName, subName).Probation; !st.Active || st.Cause != schemas.NotFound {
			t.Fatalf("probation at +1m: %+v; want active, NotFound", st)
		}

		st, err := h.Router().EndProbation(t.Context(), topicName, subName)
		if err != nil {
			t.Fatal(err)
		}
		if st.Probation.Active || st.Probation.State != retry.Healthy || !st.Probation.Until.IsZero() {
			t.Errorf("EndProbation answered %+v; want healthy", st.Probation)
		}
		h.Publish(topicName, h.EventGridEvent(testkit.ID("e2")))
		h.Settle()
		att := hook.Attempts()
		if len(att) != 2 || att[1].At != time.Minute || att[1].Status != http.StatusOK {
			t.Fatalf("attempts %+v; want e2 delivered at +1m", att)
		}
		if recs := h.AttemptRecords(subName); recs[len(recs)-1].Probe {
			t.Errorf("e2 went out as a probe; after an operator ends probation deliveries are ordinary")
		}
		h.DeadLetters(subName).RequireCount(t, 1) // e1, the 404
	}, testkit.WithoutJitter())
}

// The time to live and probation together (SPEC §2.1, §2.2), one attempt at a time so the
// order is exact; TTL 1 minute, every attempt answered 500. evt-1 fails at +0s, +10s and
// +40s. At +1m35s a burst of ten events arrives; b1-b7 fail, which makes ten failures in a
// row: probation until +2m35s, and b8-b10 wait. evt-1's next attempt comes due at +1m40s,
// after its TTL, so it ends then, without an attempt, although the endpoint is on probation.
// b1-b7's retries come due at +1m45s, inside their TTL, and wait for the probation too; when
// it ends at +2m35s, the TTL of every waiting event has passed (it is checked at what would
// have been their next attempt), so they all end then and no probe is sent.
func TestTTLPassesDuringProbation(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusInternalServerError))
		h.CreateSubscription(topicName, subName, hook, router.RetryPolicy{EventTimeToLiveInMinutes: 1})
		h.Publish(topicName, h.EventGridEvent(testkit.ID("evt-1")))
		h.Advance(95 * time.Second)
		var burst []any
		for i := range 10 {
			burst = append(burst, h.EventGridEvent(testkit.ID(fmt.Sprintf("b%d", i+1))))
		}
		h.Publish(topicName, burst...)
		h.Advance(5 * time.Minute)

		testkit.Golden(t, "timeline-ttl-during-probation", report(h, "TTL 1 min; ten failures in a row put the endpoint on probation from +1m35s to +2m35s", topicName, subName))
		hook.RequireAttempts(t, 10)
		ended := map[string]time.Duration{}
		for _, r := range h.AttemptRecords(subName) {
			if r.NoAttempt {
				ended[r.EventIDs[0]] = h.Offset(r.Time)
			}
		}
		if got := ended["evt-1"]; got != 100*time.Second {
			t.Errorf("evt-1 ended at +%v; want +1m40s, when its next attempt came due", got)
		}
		for i := range 10 {
			if id := fmt.Sprintf("b%d", i+1); ended[id] != 155*time.Second {
				t.Errorf("%s ended at +%v; want +2m35s, when the probation ended", id, ended[id])
			}
		}
		requireCounters(t, h, topicName, subName, map[string]int64{
			"DeliveryAttemptFailCount{GenericError}": 10, "DeadLetteredCount{TimeToLiveExceeded}": 11,
		})
	}, testkit.WithoutJitter(), testkit.WithConfig(router.Config{MaxInFlight: 1}))
}

// An endpoint that refuses events with 400 or 413 refuses them for their own fault (SPEC §8):
// they end at once (dead-lettered), and however many there are in a row they never put the
// endpoint on probation, so a good event published after them goes out at once; and a probe
// refused so shows the endpoint answering: the probation ends and the backlog drains, where a
// failed probe would have doubled it.
func TestEventsRefusedForTheirOwnFaultLeaveProbationAlone(t *testing.T) {
	t.Run("no probation", func(t *testing.T) {
		testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
			var bad []string
			var events []any
			for i := range 2 * retry.ConsecutiveFailureThreshold {
				bad = append(bad, fmt.Sprintf("bad%d", i))
				events = append(events, h.EventGridEvent(testkit.ID(bad[i])))
			}
			status413 := testkit.RejectEvents(http.StatusRequestEntityTooLarge, bad[retry.ConsecutiveFailureThreshold:]...)
			status400 := testkit.RejectEvents(http.StatusBadRequest, bad[:retry.ConsecutiveFailureThreshold]...)
			hook := h.Endpoint("hook", func(n int, r *http.Request) testkit.Response {
				if res := status400(n, r); res.Status != http.StatusOK {
					return res
				}
				return status413(n, r)
			})
			h.Subscribe(topicName, subName, spec(hook.URL(), router.RetryPolicy{}, true))
			h.Publish(topicName, events...)
			h.Settle()
			hook.RequireAttempts(t, len(bad))
			if st := status(t, h, topicName, subName).Probation; st.Active || st.State != retry.Healthy || st.ConsecutiveFailures != 0 {
				t.Fatalf("probation after %d events refused with 400 and 413: %+v; want healthy, no failure counted", len(bad), st)
			}
			h.Advance(time.Second)
			h.Publish(topicName, h.EventGridEvent(testkit.ID("good")))
			h.Settle()
			att := hook.Attempts()
			if len(att) != len(bad)+1 || att[len(bad)].Status != http.StatusOK || att[len(bad)].At != time.Second {
				t.Fatalf("%d attempts; want the good event delivered at once at +1s after the %d refused ones", len(att), len(bad))
			}
		})
	})
	t.Run("probe refused", func(t *testing.T) {
		testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
			// 503 puts the endpoint on a 10 s probation (Busy); the probe then is the bad event.
			busyFirst := testkit.FailFirst(1, http.StatusServiceUnavailable)
			refuse := testkit.RejectEvents(http.StatusBadRequest, "bad")
			hook := h.Endpoint("hook", func(n int, r *http.Request) testkit.Response {
				if res := busyFirst(n, r); res.Status != http.StatusOK {
					return res
				}
				return refuse(n, r)
			})
			h.Subscribe(topicName, subName, spec(hook.URL(), router.RetryPolicy{}, true))
			h.Publish(topicName, h.EventGridEvent(testkit.ID("first")))
			h.Settle()
			if st := status(t, h, topicName, subName).Probation; st.State != retry.OnProbation {
				t.Fatalf("after a 503: %+v; want on probation", st)
			}
			h.Publish(topicName, h.EventGridEvent(testkit.ID("bad")))
			h.Advance(time.Second)
			h.Publish(topicName, h.EventGridEvent(testkit.ID("good")))
			h.Advance(10 * time.Second) // the probation ends: the probe ("bad", the oldest ready), then the rest
			recs := h.AttemptRecords(subName)
			var probe *router.AttemptRecord
			for _, r := range recs {
				if r.Probe {
					probe = r
				}
			}
			if probe == nil || !slices.Equal(probe.EventIDs, []string{"bad"}) {
				t.Fatalf("probe %+v; want the bad event as the probe", probe)
			}
			if st := status(t, h, topicName, subName).Probation; st.State != retry.Healthy {
				t.Fatalf("after the probe was refused with 400: %+v; want healthy", st)
			}
			delivered := map[string]bool{}
			for _, a := range hook.Attempts() {
				if a.Status == http.StatusOK {
					for _, id := range a.EventIDs() {
						delivered[id] = true
					}
				}
			}
			if !delivered["good"] {
				t.Fatalf("delivered %v by +11s; want good delivered once the probe was answered", delivered)
			}
		})
	})
}

// TestProfile2019WaitsOutAClientErrorProbation is the 404 timeline above under the
// eventgrid-2019 profile, whose documents retry 401, 403 and 404 after 5 minutes: an event
// that comes due during the probation waits for it to end and is delivered, with the event
// that met the 404, rather than ending without an attempt.
func TestProfile2019WaitsOutAClientErrorProbation(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Sequence(http.StatusNotFound, http.StatusOK))
		h.CreateSubscription(topicName, subName, hook, router.RetryPolicy{Profile: "eventgrid-2019"})
		h.Publish(topicName, h.EventGridEvent(testkit.ID("e1")))
		h.Advance(time.Minute)
		h.Publish(topicName, h.EventGridEvent(testkit.ID("e2")))
		h.Settle()
		if st := status(t, h, topicName, subName).Probation; !st.Active || st.Cause != schemas.NotFound {
			t.Fatalf("probation at +1m: %+v; want NotFound", st)
		}
		h.Advance(10 * time.Minute)
		requireEachOnce(t, hook.Delivered(), []string{"e1", "e2"})
		if n := len(h.DeadLetters(subName).Records()); n != 0 {
			t.Fatalf("%d dead letters; want none", n)
		}
		for name, n := range counters(h, topicName, subName) {
			if strings.Contains(name, "ProbationCausedByClientError") {
				t.Errorf("%s = %d; want no event ended by the probation", name, n)
			}
		}
	}, testkit.WithoutJitter())
}
