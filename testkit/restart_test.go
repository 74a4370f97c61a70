package testkit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// Issue 5: probation comes back after a restart. A 404 puts the endpoint on a 5-minute
// client-error probation (SPEC §2.2); after the restart the status shows the same probation
// and an event published meanwhile ends without an attempt.
func TestClientErrorProbationSurvivesRestart(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		hook := h.Endpoint("hook", testkit.Always(http.StatusNotFound))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("before")))
		h.Settle()
		hook.RequireAttempts(t, 1)
		before, err := h.Router().Status(ctx, "orders", "sub-1")
		if err != nil {
			t.Fatal(err)
		}
		if !before.Probation.Active || before.Probation.Cause != schemas.NotFound {
			t.Fatalf("before the restart: probation %+v, want active with cause NotFound", before.Probation)
		}

		h.Advance(time.Minute)
		h.Restart()
		h.Settle()
		after, err := h.Router().Status(ctx, "orders", "sub-1")
		if err != nil {
			t.Fatal(err)
		}
		p := after.Probation
		if !p.Active || p.State != retry.OnProbation || p.Cause != schemas.NotFound || !p.Until.Equal(before.Probation.Until) {
			t.Fatalf("after the restart: probation %+v, want active, cause NotFound, until %s", p, before.Probation.Until)
		}

		h.Publish("orders", h.EventGridEvent(testkit.ID("after")))
		h.Settle()
		hook.RequireAttempts(t, 1)
		var found bool
		for _, rec := range h.DeadLetters("sub-1").Records() {
			if rec.Event.ID != "after" {
				continue
			}
			found = true
			if rec.LastOutcome != schemas.Probation || rec.DeliveryAttempts != 0 {
				t.Errorf("dead letter of the event published after the restart: outcome %s, %d attempts; want Probation, 0",
					rec.LastOutcome, rec.DeliveryAttempts)
			}
		}
		if !found {
			t.Fatalf("the event published during the restored probation was not dead-lettered: %+v", h.DeadLetters("sub-1").Records())
		}
	})
}

// A Busy probation (10 s) restored after a restart holds events back until it ends; the
// probe then goes out.
func TestBusyProbationSurvivesRestart(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		hook := h.Endpoint("hook", testkit.FailFirst(1, http.StatusTooManyRequests))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Settle()
		hook.RequireAttempts(t, 1)
		st, err := h.Router().Status(ctx, "orders", "sub-1")
		if err != nil {
			t.Fatal(err)
		}
		until := st.Probation.Until
		if !st.Probation.Active || st.Probation.Cause != schemas.Busy {
			t.Fatalf("probation %+v, want active with cause Busy", st.Probation)
		}

		h.Restart()
		h.Publish("orders", h.EventGridEvent(testkit.ID("e2")))
		h.Advance(time.Until(until) - time.Millisecond)
		hook.RequireAttempts(t, 1)
		h.Advance(time.Minute)
		for _, a := range hook.Attempts()[1:] {
			if at := h.Offset(until); a.At < at {
				t.Errorf("attempt at +%s, before the restored probation ended at +%s", a.At, at)
			}
		}
		if got := hook.Delivered(); len(got) != 2 {
			t.Errorf("delivered %v, want both events once the probation is over", got)
		}
	})
}
