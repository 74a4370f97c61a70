package testkit_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/testkit"
)

// The example of DESIGN.md §6: a destination that fails three times, then succeeds.
func TestRetriesUntilDelivered(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.FailFirst(3, http.StatusServiceUnavailable))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{MaxDeliveryAttempts: 5})
		h.Publish("orders", h.EventGridEvent(testkit.ID("order-1"), testkit.Subject("/orders/1")))
		h.Advance(5 * time.Minute)

		hook.RequireAttempts(t, 4)
		h.DeadLetters("sub-1").RequireNone(t)
		for i, a := range hook.Attempts() {
			if got, want := a.Header.Get("aeg-delivery-count"), []string{"0", "1", "2", "3"}[i]; got != want {
				t.Errorf("attempt %d: aeg-delivery-count %q, want %q", i, got, want)
			}
			if got := a.Header.Get("aeg-subscription-name"); got != "SUB-1" {
				t.Errorf("attempt %d: aeg-subscription-name %q, want SUB-1", i, got)
			}
			if ids := a.EventIDs(); len(ids) != 1 || ids[0] != "order-1" {
				t.Errorf("attempt %d: events %v, want [order-1]", i, ids)
			}
		}
		// 503 has a 30 s floor (SPEC §2.1): no retry comes sooner.
		att := hook.Attempts()
		for i := 1; i < len(att); i++ {
			if gap := att[i].At - att[i-1].At; gap < 30*time.Second {
				t.Errorf("attempt %d came %v after the previous one; a 503 waits at least 30 s", i, gap)
			}
		}
		if got := hook.Delivered(); len(got) != 1 || got[0] != "order-1" {
			t.Errorf("delivered %v, want [order-1]", got)
		}
	})
}

func TestExhaustedEventIsDeadLettered(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusInternalServerError))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{MaxDeliveryAttempts: 3})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(time.Hour)

		hook.RequireAttempts(t, 3)
		dl := h.DeadLetters("sub-1")
		dl.RequireCount(t, 1)
		rec := dl.Records()[0]
		if rec.Event.ID != "e1" || rec.Reason != "MaxDeliveryAttemptsExceeded" || rec.DeliveryAttempts != 3 || rec.LastHTTPStatus != 500 {
			t.Errorf("dead letter = %s %s attempts=%d status=%d, want e1 MaxDeliveryAttemptsExceeded 3 500",
				rec.Event.ID, rec.Reason, rec.DeliveryAttempts, rec.LastHTTPStatus)
		}
		timeline := h.Timeline("sub-1")
		if n := strings.Count(timeline, "\n"); n != 3 {
			t.Errorf("timeline has %d lines, want 3:\n%s", n, timeline)
		}
	})
}

func TestNothingHappensWithoutEvents(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook")
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		h.Advance(24 * time.Hour)
		hook.RequireAttempts(t, 0)
	})
}

func TestTimeoutIsAFailedAttempt(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Hang())
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{MaxDeliveryAttempts: 2})
		h.Publish("orders", h.EventGridEvent())
		h.Advance(10 * time.Minute)
		hook.RequireAttempts(t, 2)
		recs := h.DeadLetters("sub-1").Records()
		if len(recs) != 1 || recs[0].LastOutcome.String() != "TimedOut" {
			t.Fatalf("dead letters %+v, want one with last outcome TimedOut", recs)
		}
	})
}
