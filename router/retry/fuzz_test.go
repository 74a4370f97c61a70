package retry_test

import (
	"testing"
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
)

// FuzzAfterFailure checks the invariants of every decision, whatever the failure, counters,
// times and policy: a retry is never due before now, the decision is deterministic, and an
// ending decision dead-letters exactly when a dead-letter destination is configured and
// always carries a reason.
func FuzzAfterFailure(f *testing.F) {
	f.Add(uint8(schemas.Busy), 429, "120", 1, "event-1", int64(0), int64(0), uint8(0), 1.0, uint64(0), false, true, 0, int64(30))
	f.Add(uint8(schemas.Busy), 503, "Wed, 01 May 2024 12:02:00 GMT", 3, "e", int64(-1500), int64(17), uint8(1), 60.0, uint64(9), false, false, 10, int64(0))
	f.Add(uint8(schemas.GenericError), 500, "", 31, "", int64(-86400*3), int64(-5), uint8(2), 0.0, uint64(1), true, true, 10, int64(10080))
	f.Add(uint8(schemas.InvalidDestination), 0, "99999999999999999999", -4, "x", int64(100), int64(1<<40), uint8(2), 1e-9, uint64(1<<63), false, false, -1, int64(-1))
	f.Add(uint8(schemas.BadRequest), 400, "-1", 2, "y", int64(0), int64(0), uint8(1), -3.0, uint64(2), false, true, 40, int64(5))

	f.Fuzz(func(t *testing.T, outcome uint8, code int, retryAfter string, attempts int, eventID string,
		publishOffset, nowSec int64, profile uint8, scale float64, seed uint64, noJitter, deadLetter bool,
		maxAttempts int, ttlMinutes int64) {
		profiles := []func() *retry.Profile{retry.EventGrid, retry.EventGrid2019, retry.Namespace}
		// Keep times within a few thousand years of 2024, where time.Time arithmetic is exact.
		now := t0.Add(time.Duration(nowSec%(1<<33)) * time.Second)
		publish := now.Add(time.Duration(publishOffset%(1<<33)) * time.Second)
		p := &retry.Policy{
			Profile:             profiles[int(profile)%len(profiles)](),
			MaxDeliveryAttempts: maxAttempts,
			EventTimeToLive:     time.Duration(ttlMinutes%(1<<20)) * time.Minute,
			DeadLetter:          deadLetter,
			JitterSeed:          seed,
			NoJitter:            noJitter,
			TimeScale:           scale,
		}
		fail := retry.Failure{Outcome: schemas.Outcome(outcome), StatusCode: code, RetryAfter: retryAfter}

		d := p.AfterFailure(fail, attempts, eventID, publish, now)
		switch d.Action {
		case retry.Retry:
			if d.At.Before(now) {
				t.Fatalf("retry at %s, before now %s (%+v, attempts %d, policy %+v)", d.At, now, fail, attempts, p)
			}
			if d.Reason != "" {
				t.Fatalf("retry carries reason %q", d.Reason)
			}
		case retry.DeadLetter, retry.Drop:
			if (d.Action == retry.DeadLetter) != deadLetter {
				t.Fatalf("%v with DeadLetter=%v", d.Action, deadLetter)
			}
			if d.Reason == "" || !d.At.IsZero() {
				t.Fatalf("ending decision %+v without a reason or with a time", d)
			}
		default:
			t.Fatalf("unknown action %v", d.Action)
		}
		if again := p.AfterFailure(fail, attempts, eventID, publish, now); again != d {
			t.Fatalf("not deterministic: %+v then %+v", d, again)
		}
		if ra, ok := retry.ParseRetryAfter(retryAfter, now); ok && ra < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %s, negative", retryAfter, ra)
		}
	})
}
