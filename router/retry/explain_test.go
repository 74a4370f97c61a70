package retry_test

import (
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
)

func TestDecisionExplains(t *testing.T) {
	exact := &retry.Policy{NoJitter: true}
	jittered := &retry.Policy{JitterSeed: 7}
	honour := &retry.Policy{NoJitter: true, HonorRetryAfter: true}
	short := &retry.Policy{NoJitter: true, MaxDeliveryAttempts: 2}
	tests := []struct {
		name     string
		policy   *retry.Policy
		failure  retry.Failure
		attempts int
		rule     retry.Rule
		want     string // the exact explanation, or a prefix when jittered
	}{
		{"503 floor beats the first step", exact, status(503), 1, retry.RuleFloor,
			"503: floor 30s (over schedule step 1 = 10s), due 12:00:30"},
		{"503 third step beats the floor", exact, status(503), 3, retry.RuleSchedule,
			"503: schedule step 3 = 1m0s (over floor 30s), due 12:01:00"},
		{"500 default floor", exact, status(500), 2, retry.RuleSchedule,
			"500: schedule step 2 = 30s (over floor 10s), due 12:00:30"},
		{"Retry-After wins", honour, retry.Failure{Outcome: schemas.Busy, StatusCode: 429, RetryAfter: "90"}, 1, retry.RuleRetryAfter,
			"429: Retry-After 1m30s (over floor 10s, schedule step 1 = 10s), due 12:01:30"},
		{"never retried", exact, status(404), 1, retry.RuleNeverRetried,
			"404: never retried → Drop (UndeliverableDueToClientError)"},
		{"max attempts", short, status(500), 2, retry.RuleMaxAttempts,
			"500: attempt 2 of maxDeliveryAttempts 2 → Drop (MaxDeliveryAttemptsExceeded)"},
		{"unsendable", exact, retry.Failure{Outcome: schemas.GenericError, Unsendable: true}, 1, retry.RuleUnsendable,
			"GenericError: the event cannot be sent → Drop (UndeliverableDueToEventContent)"},
		{"jitter is named", jittered, status(503), 1, retry.RuleFloor,
			"503: floor 30s (over schedule step 1 = 10s), jitter +"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.policy.AfterFailure(tt.failure, tt.attempts, "event-1", t0, t0)
			if d.Why.Rule != tt.rule {
				t.Errorf("rule = %s, want %s", d.Why.Rule, tt.rule)
			}
			got := d.Explain()
			if tt.policy == jittered {
				if !strings.HasPrefix(got, tt.want) || !strings.Contains(got, "%, due 12:00:3") {
					t.Errorf("Explain() = %q, want %q…%%, due 12:00:3x", got, tt.want)
				}
				return
			}
			if got != tt.want {
				t.Errorf("Explain() = %q\nwant        %q", got, tt.want)
			}
		})
	}
}

func TestExplanationNumbers(t *testing.T) {
	p := &retry.Policy{JitterSeed: 3}
	d := p.AfterFailure(status(503), 1, "event-1", t0, t0)
	e := d.Why
	if e.Step != 1 || e.Schedule != 10*time.Second || e.Floor != 30*time.Second || e.Delay != 30*time.Second {
		t.Fatalf("explanation %+v: want step 1, schedule 10s, floor 30s, delay 30s", e)
	}
	// The explanation accounts for the due time exactly: delay plus jitter.
	if got := d.At.Sub(t0); got != e.Delay+e.Jitter || e.Jitter <= 0 || e.Jitter >= e.Delay/10 {
		t.Fatalf("due after %s, explanation says %s + %s", got, e.Delay, e.Jitter)
	}
	// The time scale shows in the explained durations.
	fast := &retry.Policy{NoJitter: true, TimeScale: 10}
	if e := fast.AfterFailure(status(503), 1, "event-1", t0, t0).Why; e.Floor != 3*time.Second || e.Schedule != time.Second {
		t.Fatalf("scaled explanation %+v: want floor 3s, schedule 1s", e)
	}
}

func TestEndingsExplain(t *testing.T) {
	p := &retry.Policy{DeadLetter: true, EventTimeToLive: time.Hour}
	dec, ended := p.AtDue(t0, t0.Add(time.Hour))
	if !ended || dec.Why.Rule != retry.RuleTimeToLive {
		t.Fatalf("AtDue at the deadline = %+v, %v: want a TimeToLive ending", dec, ended)
	}
	if got, want := dec.Explain(), "time to live ended at 13:00:00 → DeadLetter (TimeToLiveExceeded)"; got != want {
		t.Fatalf("Explain() = %q, want %q", got, want)
	}
	probation := p.End(schemas.UndeliverableDueToProbationCausedByClientError)
	if probation.Why.Rule != retry.RuleProbation || !strings.Contains(probation.Explain(), "on probation for a client error") {
		t.Fatalf("probation ending %q (rule %s)", probation.Explain(), probation.Why.Rule)
	}
	if got := (retry.Decision{}).Explain(); got != "delivered" {
		t.Fatalf("zero decision explains %q, want delivered", got)
	}
}
