package retry_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// status builds the failure an HTTP endpoint answering code reports.
func status(code int) retry.Failure {
	return retry.Failure{Outcome: schemas.OutcomeForStatus(code), StatusCode: code}
}

// delayAfter returns how long after now the policy schedules the next attempt, failing the
// test when it does not retry.
func delayAfter(t *testing.T, p *retry.Policy, f retry.Failure, attempts int) time.Duration {
	t.Helper()
	d := p.AfterFailure(f, attempts, "event-1", t0, t0)
	if d.Action != retry.Retry {
		t.Fatalf("AfterFailure(%+v, %d) = %v, want Retry", f, attempts, d)
	}
	return d.At.Sub(t0)
}

func TestAfterFailureEffectiveSchedule(t *testing.T) {
	// A 500 gets the schedule delay raised to the 10 s default floor: the effective delays a
	// failing endpoint sees, attempt by attempt, up to the last retry before the limit.
	tests := []struct {
		name    string
		profile *retry.Profile
		want    []time.Duration // after attempts 1..limit-1
	}{
		{"eventgrid", retry.EventGrid(), scheduleOf(29, 12*h, 10*s, 30*s, 1*m, 5*m, 10*m, 30*m, 1*h, 3*h, 6*h)},
		{"eventgrid-2019", retry.EventGrid2019(), scheduleOf(29, 1*h, 10*s, 30*s, 1*m, 5*m, 10*m, 30*m, 1*h)},
		// namespace: seed 002 lists "0 s (immediate retry)", 10 s, 30 s, 1 min, 5 min, then
		// every 5 min; the first retry has no floor.
		{"namespace", retry.Namespace(), scheduleOf(9, 5*m, 0, 10*s, 30*s, 1*m, 5*m)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &retry.Policy{Profile: tt.profile, NoJitter: true}
			for i, want := range tt.want {
				if got := delayAfter(t, p, status(500), i+1); got != want {
					t.Errorf("delay after attempt %d = %s, want %s", i+1, got, want)
				}
			}
		})
	}
}

func TestAfterFailureFloors(t *testing.T) {
	immediate, err := retry.CustomProfile(retry.Namespace(), []time.Duration{0}, 5*m)
	if err != nil {
		t.Fatal(err)
	}
	immediate.DefaultFloor = 0
	tests := []struct {
		name     string
		profile  *retry.Profile
		failure  retry.Failure
		attempts int
		want     time.Duration
	}{
		{"eventgrid 408 raised to 2m", retry.EventGrid(), status(408), 1, 2 * m},
		{"eventgrid 503 raised to 30s", retry.EventGrid(), status(503), 1, 30 * s},
		{"eventgrid 503 below the schedule", retry.EventGrid(), status(503), 4, 5 * m},
		{"eventgrid 408 below the schedule", retry.EventGrid(), status(408), 5, 10 * m},
		{"eventgrid 429 default floor", retry.EventGrid(), status(429), 1, 10 * s},
		{"eventgrid 500", retry.EventGrid(), status(500), 1, 10 * s},
		{"eventgrid 414 retried", retry.EventGrid(), status(414), 1, 10 * s},
		{"eventgrid socket error", retry.EventGrid(), retry.Failure{Outcome: schemas.SocketError}, 1, 10 * s},
		{"eventgrid timeout without response", retry.EventGrid(), retry.Failure{Outcome: schemas.TimedOut}, 1, 10 * s},
		{"eventgrid invalid destination retried", retry.EventGrid(), retry.Failure{Outcome: schemas.InvalidDestination}, 1, 10 * s},
		{"eventgrid-2019 400 without dead-letter 5m", retry.EventGrid2019(), status(400), 1, 5 * m},
		{"eventgrid-2019 401 5m", retry.EventGrid2019(), status(401), 1, 5 * m},
		{"eventgrid-2019 403 5m", retry.EventGrid2019(), status(403), 2, 5 * m},
		{"eventgrid-2019 404 5m", retry.EventGrid2019(), status(404), 1, 5 * m},
		{"eventgrid-2019 404 below the schedule", retry.EventGrid2019(), status(404), 6, 30 * m},
		{"eventgrid-2019 413 without dead-letter 10s", retry.EventGrid2019(), status(413), 1, 10 * s},
		{"eventgrid-2019 408 2m", retry.EventGrid2019(), status(408), 1, 2 * m},
		{"eventgrid-2019 503 30s", retry.EventGrid2019(), status(503), 1, 30 * s},
		// Seed 002: "0 s (immediate retry)" — no floor on the first retry, floors from the
		// second on.
		{"namespace first retry immediate", retry.Namespace(), status(500), 1, 0},
		{"namespace socket error first retry immediate", retry.Namespace(), retry.Failure{Outcome: schemas.SocketError}, 1, 0},
		{"namespace 408 first retry immediate", retry.Namespace(), status(408), 1, 0},
		{"namespace 408 second retry 2m", retry.Namespace(), status(408), 2, 2 * m},
		{"namespace 503 second retry 30s", retry.Namespace(), status(503), 2, 30 * s},
		{"custom namespace without default floor retries at once", immediate, status(500), 1, 0},
		{"custom namespace keeps the immediate first retry", immediate, status(503), 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &retry.Policy{Profile: tt.profile, NoJitter: true}
			if got := delayAfter(t, p, tt.failure, tt.attempts); got != tt.want {
				t.Fatalf("delay = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestAfterFailureNeverRetried(t *testing.T) {
	const (
		badRequest  = schemas.UndeliverableDueToHTTPBadRequest
		clientError = schemas.UndeliverableDueToClientError
	)
	tests := []struct {
		name       string
		profile    *retry.Profile
		deadLetter bool
		failure    retry.Failure
		want       retry.Action
		wantReason schemas.Reason
	}{
		{"eventgrid 400", retry.EventGrid(), true, status(400), retry.DeadLetter, badRequest},
		{"eventgrid 401", retry.EventGrid(), true, status(401), retry.DeadLetter, clientError},
		{"eventgrid 403", retry.EventGrid(), true, status(403), retry.DeadLetter, clientError},
		{"eventgrid 404", retry.EventGrid(), true, status(404), retry.DeadLetter, clientError},
		{"eventgrid 413", retry.EventGrid(), true, status(413), retry.DeadLetter, clientError},
		{"eventgrid 400 dropped without dead-letter", retry.EventGrid(), false, status(400), retry.Drop, badRequest},
		{"eventgrid 404 dropped without dead-letter", retry.EventGrid(), false, status(404), retry.Drop, clientError},
		{"eventgrid 414 retried", retry.EventGrid(), true, status(414), retry.Retry, ""},
		{"eventgrid 500 retried", retry.EventGrid(), true, status(500), retry.Retry, ""},
		{"eventgrid function sink NotFound without status", retry.EventGrid(), true, retry.Failure{Outcome: schemas.NotFound}, retry.DeadLetter, clientError},
		{"eventgrid function sink BadRequest without status", retry.EventGrid(), false, retry.Failure{Outcome: schemas.BadRequest}, retry.Drop, badRequest},

		{"eventgrid-2019 400 with dead-letter", retry.EventGrid2019(), true, status(400), retry.DeadLetter, badRequest},
		{"eventgrid-2019 413 with dead-letter", retry.EventGrid2019(), true, status(413), retry.DeadLetter, clientError},
		{"eventgrid-2019 400 without dead-letter retried", retry.EventGrid2019(), false, status(400), retry.Retry, ""},
		{"eventgrid-2019 413 without dead-letter retried", retry.EventGrid2019(), false, status(413), retry.Retry, ""},
		{"eventgrid-2019 401 retried", retry.EventGrid2019(), true, status(401), retry.Retry, ""},
		{"eventgrid-2019 403 retried", retry.EventGrid2019(), true, status(403), retry.Retry, ""},
		{"eventgrid-2019 404 retried", retry.EventGrid2019(), true, status(404), retry.Retry, ""},

		{"namespace 400", retry.Namespace(), true, status(400), retry.DeadLetter, badRequest},
		{"namespace 401", retry.Namespace(), true, status(401), retry.DeadLetter, clientError},
		{"namespace 403", retry.Namespace(), true, status(403), retry.DeadLetter, clientError},
		{"namespace 404", retry.Namespace(), true, status(404), retry.DeadLetter, clientError},
		{"namespace 413", retry.Namespace(), true, status(413), retry.DeadLetter, clientError},
		{"namespace 414", retry.Namespace(), false, status(414), retry.Drop, clientError},
		{"namespace invalid destination", retry.Namespace(), true, retry.Failure{Outcome: schemas.InvalidDestination}, retry.DeadLetter, clientError},
		{"namespace invalid destination dropped", retry.Namespace(), false, retry.Failure{Outcome: schemas.InvalidDestination}, retry.Drop, clientError},
		{"namespace socket error retried", retry.Namespace(), true, retry.Failure{Outcome: schemas.SocketError}, retry.Retry, ""},
		{"namespace 500 retried", retry.Namespace(), true, status(500), retry.Retry, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &retry.Policy{Profile: tt.profile, DeadLetter: tt.deadLetter, NoJitter: true}
			got := p.AfterFailure(tt.failure, 1, "event-1", t0, t0)
			if got.Action != tt.want || got.Reason != tt.wantReason {
				t.Fatalf("AfterFailure = %v, want %v (%s)", got, tt.want, tt.wantReason)
			}
			if got.Ends() != (tt.want != retry.Retry) {
				t.Fatalf("Ends() = %v for %v", got.Ends(), got)
			}
			if got.Ends() && !got.At.IsZero() {
				t.Fatalf("an ending decision carries At %s", got.At)
			}
		})
	}
}

func TestAfterFailureMaxAttempts(t *testing.T) {
	tests := []struct {
		name       string
		policy     retry.Policy
		failure    retry.Failure
		attempts   int
		want       retry.Action
		wantReason schemas.Reason
	}{
		{"below the set maximum", retry.Policy{MaxDeliveryAttempts: 3}, status(500), 2, retry.Retry, ""},
		{"at the set maximum", retry.Policy{MaxDeliveryAttempts: 3, DeadLetter: true}, status(500), 3, retry.DeadLetter, schemas.MaxDeliveryAttemptsExceeded},
		{"past the set maximum", retry.Policy{MaxDeliveryAttempts: 3}, status(500), 4, retry.Drop, schemas.MaxDeliveryAttemptsExceeded},
		{"one attempt allowed", retry.Policy{MaxDeliveryAttempts: 1}, status(503), 1, retry.Drop, schemas.MaxDeliveryAttemptsExceeded},
		{"eventgrid default 29", retry.Policy{}, status(500), 29, retry.Retry, ""},
		{"eventgrid default 30", retry.Policy{}, status(500), 30, retry.Drop, schemas.MaxDeliveryAttemptsExceeded},
		{"namespace default 9", retry.Policy{Profile: retry.Namespace()}, status(500), 9, retry.Retry, ""},
		{"namespace default 10", retry.Policy{Profile: retry.Namespace()}, status(500), 10, retry.Drop, schemas.MaxDeliveryAttemptsExceeded},
		{"never-retried status wins over the maximum", retry.Policy{MaxDeliveryAttempts: 2, DeadLetter: true}, status(400), 2, retry.DeadLetter, schemas.UndeliverableDueToHTTPBadRequest},
		{"attempts below 1 count as 1", retry.Policy{MaxDeliveryAttempts: 1}, status(500), 0, retry.Drop, schemas.MaxDeliveryAttemptsExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.policy.AfterFailure(tt.failure, tt.attempts, "event-1", t0, t0)
			if got.Action != tt.want || got.Reason != tt.wantReason {
				t.Fatalf("AfterFailure = %v, want %v (%s)", got, tt.want, tt.wantReason)
			}
		})
	}
}

func TestAfterFailureRetryAfter(t *testing.T) {
	httpDate := func(d time.Duration) string { return t0.Add(d).Format("Mon, 02 Jan 2006 15:04:05 GMT") }
	tests := []struct {
		name     string
		failure  retry.Failure
		attempts int
		ttl      time.Duration
		publish  time.Time
		want     time.Duration
	}{
		{"429 seconds", retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "120"}, 1, 0, t0, 120 * s},
		{"503 seconds", retry.Failure{Outcome: schemas.Busy, StatusCode: 503, RetryAfter: "120"}, 1, 0, t0, 120 * s},
		{"503 HTTP date", retry.Failure{Outcome: schemas.Busy, StatusCode: 503, RetryAfter: httpDate(3 * m)}, 1, 0, t0, 3 * m},
		{"429 HTTP date in the past", retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: httpDate(-3 * m)}, 1, 0, t0, 10 * s},
		{"503 shorter than its floor", retry.Failure{Outcome: schemas.Busy, StatusCode: 503, RetryAfter: "5"}, 1, 0, t0, 30 * s},
		{"429 shorter than the schedule", retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "60"}, 5, 0, t0, 10 * m},
		{"ignored on 500", retry.Failure{Outcome: schemas.GenericError, StatusCode: 500, RetryAfter: "120"}, 1, 0, t0, 10 * s},
		{"ignored on 408", retry.Failure{Outcome: schemas.TimedOut, StatusCode: 408, RetryAfter: "600"}, 1, 0, t0, 2 * m},
		{"ignored when unparseable", retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "soon"}, 1, 0, t0, 10 * s},
		{"busy function sink without status", retry.Failure{Outcome: schemas.Busy, RetryAfter: "90"}, 1, 0, t0, 90 * s},
		{"capped at the remaining TTL", retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "3600"}, 1, 30 * m, t0.Add(-25 * m), 5 * m},
		{"capped below the schedule keeps the schedule", retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "3600"}, 4, 30 * m, t0.Add(-29 * m), 5 * m},
		{"TTL already passed keeps the schedule", retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "3600"}, 1, 30 * m, t0.Add(-31 * m), 10 * s},
		{"capped at the default TTL", retry.Failure{Outcome: schemas.Busy, StatusCode: 503, RetryAfter: "999999999"}, 1, 0, t0.Add(-23 * h), 1 * h},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &retry.Policy{EventTimeToLive: tt.ttl, NoJitter: true, HonorRetryAfter: true}
			d := p.AfterFailure(tt.failure, tt.attempts, "event-1", tt.publish, t0)
			if d.Action != retry.Retry {
				t.Fatalf("AfterFailure = %v, want Retry", d)
			}
			if got := d.At.Sub(t0); got != tt.want {
				t.Fatalf("delay = %s, want %s", got, tt.want)
			}
		})
	}
}

// Azure documents no Retry-After handling (learn.microsoft.com/azure/event-grid/delivery-and-retry
// lists the schedule and the per-status floors only), so by default the built-in profiles
// retry a 429 or 503 on their schedule and floors whatever Retry-After says; HonorRetryAfter
// is egrid's opt-in extension.
func TestAfterFailureIgnoresRetryAfterByDefault(t *testing.T) {
	for name, prof := range map[string]*retry.Profile{"eventgrid": retry.EventGrid(), "eventgrid-2019": retry.EventGrid2019(), "namespace": retry.Namespace()} {
		t.Run(name, func(t *testing.T) {
			p := &retry.Policy{Profile: prof, NoJitter: true}
			for _, f := range []retry.Failure{
				{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "3600"},
				{Outcome: schemas.Busy, StatusCode: 503, RetryAfter: "3600"},
			} {
				want := max(prof.ScheduleDelay(2), prof.Floor(f.StatusCode))
				if got := p.AfterFailure(f, 2, "event-1", t0, t0).At.Sub(t0); got != want {
					t.Errorf("%d with Retry-After 3600: delay %s, want %s (schedule and floor)", f.StatusCode, got, want)
				}
				p.HonorRetryAfter = true
				if got := p.AfterFailure(f, 2, "event-1", t0, t0).At.Sub(t0); got != time.Hour {
					t.Errorf("%d with HonorRetryAfter: delay %s, want 1h", f.StatusCode, got)
				}
				p.HonorRetryAfter = false
			}
		})
	}
}

func TestAfterFailureRetryAfterJitter(t *testing.T) {
	// Jitter still applies when Retry-After decides the delay...
	p := &retry.Policy{JitterSeed: 7, HonorRetryAfter: true}
	f := retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "120"}
	sawJitter := false
	for i := range 50 {
		d := p.AfterFailure(f, 1, fmt.Sprintf("event-%d", i), t0, t0).At.Sub(t0)
		if d < 120*s || d >= 132*s {
			t.Fatalf("delay %s outside [120s, 132s)", d)
		}
		sawJitter = sawJitter || d > 120*s
	}
	if !sawJitter {
		t.Fatal("no jitter on any Retry-After-driven delay")
	}
	// ...but not when the Retry-After was capped at the time to live: that retry is due
	// exactly at the deadline.
	p.EventTimeToLive = 30 * m
	publish := t0.Add(-25 * m)
	for i := range 50 {
		d := p.AfterFailure(retry.Failure{Outcome: schemas.Busy, StatusCode: 503, RetryAfter: "3600"}, 1, fmt.Sprintf("event-%d", i), publish, t0)
		if !d.At.Equal(p.Deadline(publish)) {
			t.Fatalf("capped retry at %s, want the deadline %s", d.At, p.Deadline(publish))
		}
		if _, ended := p.AtDue(publish, d.At); !ended {
			t.Fatal("the capped retry's due time is not past the time to live")
		}
	}
}

func TestAfterFailureJitter(t *testing.T) {
	const n = 2000
	p := &retry.Policy{JitterSeed: 42}
	base := 10 * time.Minute // eventgrid, after attempt 5
	var lo, hi time.Duration = math.MaxInt64, 0
	distinct := map[time.Duration]bool{}
	for i := range n {
		id := fmt.Sprintf("event-%d", i)
		d := p.AfterFailure(status(500), 5, id, t0, t0)
		j := d.At.Sub(t0) - base
		if j < 0 || j >= base/10 {
			t.Fatalf("%s: jitter %s outside [0, 10%% of %s)", id, j, base)
		}
		lo, hi = min(lo, j), max(hi, j)
		distinct[j] = true
		// Deterministic: the same inputs give the same instant.
		if again := p.AfterFailure(status(500), 5, id, t0, t0); !again.At.Equal(d.At) {
			t.Fatalf("%s: %s then %s for the same inputs", id, d.At, again.At)
		}
	}
	// Spread over the whole range, not stuck at one value.
	if lo > base/100 || hi < base/10-base/100 || len(distinct) < n*9/10 {
		t.Fatalf("jitter not spread: min %s, max %s, %d distinct of %d", lo, hi, len(distinct), n)
	}

	// Every input takes part: seed, event id and attempt number.
	at := func(p *retry.Policy, id string, attempts int) time.Time {
		return p.AfterFailure(status(500), attempts, id, t0, t0).At
	}
	other := &retry.Policy{JitterSeed: 43}
	differs := func(f func(i int) bool) bool {
		for i := range 20 {
			if f(i) {
				return true
			}
		}
		return false
	}
	if !differs(func(i int) bool { id := fmt.Sprint(i); return !at(p, id, 12).Equal(at(other, id, 12)) }) {
		t.Error("the seed does not change the jitter")
	}
	if !differs(func(i int) bool { return !at(p, fmt.Sprint(i), 12).Equal(at(p, fmt.Sprint(i), 13)) }) {
		t.Error("the attempt number does not change the jitter (both after the 12 h tail)")
	}

	// NoJitter gives exact delays.
	exact := &retry.Policy{JitterSeed: 42, NoJitter: true}
	if got := exact.AfterFailure(status(500), 5, "event-1", t0, t0).At.Sub(t0); got != base {
		t.Fatalf("NoJitter delay = %s, want %s", got, base)
	}
}

func TestAfterFailureTimeScale(t *testing.T) {
	tests := []struct {
		name     string
		scale    float64
		failure  retry.Failure
		attempts int
		want     time.Duration
	}{
		{"0 is real time", 0, status(500), 1, 10 * s},
		{"1 is real time", 1, status(500), 1, 10 * s},
		{"schedule", 60, status(500), 10, 12 * m},
		{"floor", 60, status(408), 1, 2 * s},
		{"Retry-After", 60, retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "3600"}, 1, 1 * m},
		{"slower than real time", 0.5, status(500), 1, 20 * s},
		{"huge scale rounds to nothing", 1e12, status(500), 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &retry.Policy{TimeScale: tt.scale, NoJitter: true, HonorRetryAfter: true}
			if got := delayAfter(t, p, tt.failure, tt.attempts); got != tt.want {
				t.Fatalf("delay = %s, want %s", got, tt.want)
			}
		})
	}

	// The time to live is scaled too, and a scaled Retry-After is capped at the scaled TTL.
	p := &retry.Policy{TimeScale: 60, EventTimeToLive: 30 * m, NoJitter: true, HonorRetryAfter: true}
	if got := p.Deadline(t0); !got.Equal(t0.Add(30 * s)) {
		t.Fatalf("scaled deadline = %s, want +30s", got.Sub(t0))
	}
	d := p.AfterFailure(retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "3600"}, 1, "e", t0, t0.Add(20*s))
	if got := d.At.Sub(t0); got != 30*s {
		t.Fatalf("scaled capped retry at +%s, want +30s", got)
	}
}

func TestAtDue(t *testing.T) {
	tests := []struct {
		name       string
		policy     retry.Policy
		elapsed    time.Duration
		wantEnd    bool
		wantAction retry.Action
	}{
		{"fresh", retry.Policy{EventTimeToLive: 30 * m}, 0, false, 0},
		{"just before the TTL", retry.Policy{EventTimeToLive: 30 * m}, 30*m - time.Nanosecond, false, 0},
		{"at the TTL", retry.Policy{EventTimeToLive: 30 * m, DeadLetter: true}, 30 * m, true, retry.DeadLetter},
		{"long after the TTL", retry.Policy{EventTimeToLive: 30 * m}, 12 * h, true, retry.Drop},
		{"default TTL 1440m not yet", retry.Policy{}, 1439 * m, false, 0},
		{"default TTL 1440m", retry.Policy{}, 1440 * m, true, retry.Drop},
		{"namespace default P1D", retry.Policy{Profile: retry.Namespace()}, 24 * h, true, retry.Drop},
		{"namespace P7D", retry.Policy{Profile: retry.Namespace(), EventTimeToLive: 7 * 24 * h}, 6 * 24 * h, false, 0},
		{"scaled", retry.Policy{EventTimeToLive: 30 * m, TimeScale: 60}, 30 * s, true, retry.Drop},
		{"scaled not yet", retry.Policy{EventTimeToLive: 30 * m, TimeScale: 60}, 29 * s, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ended := tt.policy.AtDue(t0, t0.Add(tt.elapsed))
			if ended != tt.wantEnd {
				t.Fatalf("ended = %v, want %v", ended, tt.wantEnd)
			}
			if !ended {
				return
			}
			if d.Action != tt.wantAction || d.Reason != schemas.TimeToLiveExceeded {
				t.Fatalf("decision = %v, want %v (TimeToLiveExceeded)", d, tt.wantAction)
			}
		})
	}
}

// walk simulates an endpoint that always answers f, attempting at publish time and whenever
// the policy says, and returns the attempt offsets and the final decision with its offset.
// This is the subscription actor's loop, without probation.
func walk(t *testing.T, p *retry.Policy, f retry.Failure, eventID string) ([]time.Duration, retry.Decision, time.Duration) {
	t.Helper()
	now := t0
	var offsets []time.Duration
	for attempts := 1; attempts <= 100; attempts++ {
		if d, ended := p.AtDue(t0, now); ended {
			return offsets, d, now.Sub(t0)
		}
		offsets = append(offsets, now.Sub(t0))
		d := p.AfterFailure(f, attempts, eventID, t0, now)
		if d.Ends() {
			return offsets, d, now.Sub(t0)
		}
		if d.At.Before(now) {
			t.Fatalf("retry at %s before now %s", d.At, now)
		}
		now = d.At
	}
	t.Fatal("no end after 100 attempts")
	return nil, retry.Decision{}, 0
}

func TestTimelines(t *testing.T) {
	tests := []struct {
		name        string
		policy      retry.Policy
		failure     retry.Failure
		wantOffsets []time.Duration
		wantReason  schemas.Reason
		wantEndAt   time.Duration
	}{
		{
			// eventgrid-behaviour.md §6.2: "with TTL 30 min and max attempts 10, only ~6
			// attempts fit in 30 minutes". The 7th would be at 46m40s; the TTL is checked
			// then, so the event ends later than its TTL (SPEC §2.1).
			name:        "eventgrid TTL 30m max 10",
			policy:      retry.Policy{EventTimeToLive: 30 * m, MaxDeliveryAttempts: 10, DeadLetter: true, NoJitter: true},
			failure:     status(500),
			wantOffsets: []time.Duration{0, 10 * s, 40 * s, 1*m + 40*s, 6*m + 40*s, 16*m + 40*s},
			wantReason:  schemas.TimeToLiveExceeded,
			wantEndAt:   46*m + 40*s,
		},
		{
			name:    "eventgrid defaults: the 24h TTL ends it after 11 attempts",
			policy:  retry.Policy{NoJitter: true},
			failure: status(500),
			wantOffsets: []time.Duration{
				0, 10 * s, 40 * s, 1*m + 40*s, 6*m + 40*s, 16*m + 40*s, 46*m + 40*s,
				1*h + 46*m + 40*s, 4*h + 46*m + 40*s, 10*h + 46*m + 40*s, 22*h + 46*m + 40*s,
			},
			wantReason: schemas.TimeToLiveExceeded,
			wantEndAt:  34*h + 46*m + 40*s,
		},
		{
			name:        "eventgrid max attempts first",
			policy:      retry.Policy{MaxDeliveryAttempts: 4, NoJitter: true},
			failure:     status(500),
			wantOffsets: []time.Duration{0, 10 * s, 40 * s, 1*m + 40*s},
			wantReason:  schemas.MaxDeliveryAttemptsExceeded,
			wantEndAt:   1*m + 40*s,
		},
		{
			// Seed 002's example (retention 20 min, max 10), with the schedule read as delays
			// after each failure: the first retry goes at once; 8 attempts fit.
			name:    "namespace retention 20m max 10",
			policy:  retry.Policy{Profile: retry.Namespace(), EventTimeToLive: 20 * m, NoJitter: true},
			failure: status(500),
			wantOffsets: []time.Duration{
				0, 0, 10 * s, 40 * s, 1*m + 40*s, 6*m + 40*s, 11*m + 40*s, 16*m + 40*s,
			},
			wantReason: schemas.TimeToLiveExceeded,
			wantEndAt:  21*m + 40*s,
		},
		{
			name:        "eventgrid-2019 hourly tail",
			policy:      retry.Policy{Profile: retry.EventGrid2019(), EventTimeToLive: 4 * h, NoJitter: true},
			failure:     status(502),
			wantOffsets: []time.Duration{0, 10 * s, 40 * s, 1*m + 40*s, 6*m + 40*s, 16*m + 40*s, 46*m + 40*s, 1*h + 46*m + 40*s, 2*h + 46*m + 40*s, 3*h + 46*m + 40*s},
			wantReason:  schemas.TimeToLiveExceeded,
			wantEndAt:   4*h + 46*m + 40*s,
		},
		{
			name:        "eventgrid 404 ends at the first attempt",
			policy:      retry.Policy{DeadLetter: true, NoJitter: true},
			failure:     status(404),
			wantOffsets: []time.Duration{0},
			wantReason:  schemas.UndeliverableDueToClientError,
			wantEndAt:   0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offsets, end, endAt := walk(t, &tt.policy, tt.failure, "event-1")
			if !slices.Equal(offsets, tt.wantOffsets) {
				t.Errorf("attempts at %v, want %v", offsets, tt.wantOffsets)
			}
			if end.Reason != tt.wantReason || endAt != tt.wantEndAt {
				t.Errorf("ended %v at +%s, want %s at +%s", end, endAt, tt.wantReason, tt.wantEndAt)
			}
		})
	}
}

func TestTimelineTTL30mWithJitter(t *testing.T) {
	// With the 0-10 % jitter the documented example still gives 6 attempts, whatever the
	// seed and event.
	for seed := range uint64(200) {
		p := &retry.Policy{EventTimeToLive: 30 * m, MaxDeliveryAttempts: 10, JitterSeed: seed}
		offsets, end, _ := walk(t, p, status(500), fmt.Sprintf("event-%d", seed))
		if len(offsets) != 6 || end.Reason != schemas.TimeToLiveExceeded {
			t.Fatalf("seed %d: %d attempts, ended %v; want 6 attempts, TimeToLiveExceeded", seed, len(offsets), end)
		}
	}
}

func TestEnd(t *testing.T) {
	withDL := retry.Policy{DeadLetter: true}
	without := retry.Policy{}
	r := schemas.UndeliverableDueToProbationCausedByClientError
	if d := withDL.End(r); d.Action != retry.DeadLetter || d.Reason != r {
		t.Errorf("End with dead-letter = %v", d)
	}
	if d := without.End(r); d.Action != retry.Drop || d.Reason != r {
		t.Errorf("End without dead-letter = %v", d)
	}
}

func TestPolicyDefaults(t *testing.T) {
	tests := []struct {
		name         string
		policy       retry.Policy
		wantAttempts int
		wantTTL      time.Duration
	}{
		{"zero", retry.Policy{}, 30, 1440 * m},
		{"set", retry.Policy{MaxDeliveryAttempts: 5, EventTimeToLive: 60 * m}, 5, 60 * m},
		{"namespace", retry.Policy{Profile: retry.Namespace()}, 10, 24 * h},
		{"eventgrid-2019", retry.Policy{Profile: retry.EventGrid2019()}, 30, 1440 * m},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.policy.MaxAttempts(); got != tt.wantAttempts {
				t.Errorf("MaxAttempts = %d, want %d", got, tt.wantAttempts)
			}
			if got := tt.policy.TTL(); got != tt.wantTTL {
				t.Errorf("TTL = %s, want %s", got, tt.wantTTL)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	ns := retry.Namespace()
	tests := []struct {
		name       string
		policy     retry.Policy
		wantFields []string // nil: valid
	}{
		{name: "zero", policy: retry.Policy{}},
		{name: "eventgrid bounds", policy: retry.Policy{MaxDeliveryAttempts: 30, EventTimeToLive: 1440 * m}},
		{name: "eventgrid lower bounds", policy: retry.Policy{MaxDeliveryAttempts: 1, EventTimeToLive: 1 * m}},
		{name: "eventgrid 31 attempts", policy: retry.Policy{MaxDeliveryAttempts: 31}, wantFields: []string{"maxDeliveryAttempts"}},
		{name: "negative attempts", policy: retry.Policy{MaxDeliveryAttempts: -1}, wantFields: []string{"maxDeliveryAttempts"}},
		{name: "eventgrid TTL 1441m", policy: retry.Policy{EventTimeToLive: 1441 * m}, wantFields: []string{"eventTimeToLive"}},
		{name: "eventgrid TTL 59s", policy: retry.Policy{EventTimeToLive: 59 * s}, wantFields: []string{"eventTimeToLive"}},
		{name: "TTL not whole minutes", policy: retry.Policy{EventTimeToLive: 90 * s}, wantFields: []string{"eventTimeToLive"}},
		{name: "negative TTL", policy: retry.Policy{EventTimeToLive: -m}, wantFields: []string{"eventTimeToLive"}},
		{name: "namespace bounds", policy: retry.Policy{Profile: ns, MaxDeliveryAttempts: 10, EventTimeToLive: 7 * 24 * h}},
		{name: "namespace 11 attempts", policy: retry.Policy{Profile: ns, MaxDeliveryAttempts: 11}, wantFields: []string{"maxDeliveryAttempts"}},
		{name: "namespace over P7D", policy: retry.Policy{Profile: ns, EventTimeToLive: 7*24*h + m}, wantFields: []string{"eventTimeToLive"}},
		{name: "time scale 60", policy: retry.Policy{TimeScale: 60}},
		{name: "negative time scale", policy: retry.Policy{TimeScale: -1}, wantFields: []string{"timeScale"}},
		{name: "NaN time scale", policy: retry.Policy{TimeScale: math.NaN()}, wantFields: []string{"timeScale"}},
		{name: "infinite time scale", policy: retry.Policy{TimeScale: math.Inf(1)}, wantFields: []string{"timeScale"}},
		{
			name:       "every problem at once",
			policy:     retry.Policy{Profile: ns, MaxDeliveryAttempts: 30, EventTimeToLive: 8 * 24 * h, TimeScale: -2},
			wantFields: []string{"maxDeliveryAttempts", "eventTimeToLive", "timeScale"},
		},
		{
			name:       "invalid hand-built profile",
			policy:     retry.Policy{Profile: &retry.Profile{Name: "mine", Tail: m, MaxAttemptsLimit: 5, DefaultMaxAttempts: 5, MinTTL: m, MaxTTL: h, DefaultTTL: 2 * h}},
			wantFields: []string{"defaultTTL"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			if tt.wantFields == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if got := fieldsOf(err); !slices.Equal(got, tt.wantFields) {
				t.Fatalf("fields = %v, want %v (error: %v)", got, tt.wantFields, err)
			}
		})
	}
}

func TestActionAndDecisionString(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{retry.Retry.String(), "Retry"},
		{retry.DeadLetter.String(), "DeadLetter"},
		{retry.Drop.String(), "Drop"},
		{retry.Action(0).String(), "Action(0)"},
		{retry.Decision{Action: retry.Retry, At: t0.Add(10 * s)}.String(), "Retry at 2024-05-01T12:00:10Z"},
		{retry.Decision{Action: retry.DeadLetter, Reason: schemas.MaxDeliveryAttemptsExceeded}.String(), "DeadLetter (MaxDeliveryAttemptsExceeded)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func BenchmarkAfterFailure(b *testing.B) {
	benchmarks := []struct {
		name    string
		failure retry.Failure
	}{
		{"500", status(500)},
		{"429 Retry-After seconds", retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "120"}},
		{"503 Retry-After date", retry.Failure{Outcome: schemas.Busy, StatusCode: 503, RetryAfter: "Wed, 01 May 2024 12:02:00 GMT"}},
		{"404 never retried", status(404)},
	}
	p := &retry.Policy{JitterSeed: 1, DeadLetter: true}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_ = p.AfterFailure(bm.failure, i%29+1, "2d1781af-3a4c-4d7c-bd0c-e34b19da4e66", t0, t0)
			}
		})
	}
}

// An event that can never be sent ends at its first attempt, whatever the profile, attempt
// count and dead-letter setting, with egrid's UndeliverableDueToEventContent.
func TestAfterFailureUnsendable(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, p := range []*retry.Policy{
		{}, {DeadLetter: true}, {Profile: retry.EventGrid2019(), DeadLetter: true}, {MaxDeliveryAttempts: 30},
	} {
		got := p.AfterFailure(retry.Failure{Outcome: schemas.GenericError, Unsendable: true}, 1, "e", now, now)
		want := retry.DeadLetter
		if !p.DeadLetter {
			want = retry.Drop
		}
		if got.Action != want || got.Reason != schemas.UndeliverableDueToEventContent {
			t.Errorf("policy %+v: %v, want %v (UndeliverableDueToEventContent)", p, got, want)
		}
		if plain := p.AfterFailure(retry.Failure{Outcome: schemas.GenericError}, 1, "e", now, now); plain.Action != retry.Retry {
			t.Errorf("policy %+v: a plain GenericError gives %v, want a retry", p, plain)
		}
	}
}
