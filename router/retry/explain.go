package retry

import (
	"fmt"
	"strings"
	"time"

	"github.com/egridio/egrid/schemas"
)

// Rule names the rule of the policy that made a [Decision].
type Rule uint8

// Rules, in the order [Policy.AfterFailure] applies them, then the two rules applied when an
// event comes due.
const (
	// RuleUnsendable: the event itself cannot be sent; it ends now.
	RuleUnsendable Rule = iota + 1
	// RuleNeverRetried: the status or outcome is never retried by the profile (or, with a
	// dead-letter destination, ends at once); the event ends now.
	RuleNeverRetried
	// RuleMaxAttempts: the event had its maxDeliveryAttempts; it ends.
	RuleMaxAttempts
	// RuleSchedule: the retry waits the schedule delay of its step (the floor, if any, was
	// not longer).
	RuleSchedule
	// RuleFloor: the retry waits the status floor, which is longer than the schedule delay.
	RuleFloor
	// RuleRetryAfter: the retry waits the endpoint's Retry-After (the HonorRetryAfter
	// extension), which is longer than both.
	RuleRetryAfter
	// RuleTimeToLive: the event's time to live had passed when its next attempt came due.
	RuleTimeToLive
	// RuleProbation: the event came due while a probation caused by a client error was in
	// force (SPEC §2.2).
	RuleProbation
	// RuleStopped: the attempt was still in flight when the subscription stopped (a shutdown
	// past its stop grace, an update, a move to another node); its answer is unknown, and the
	// event is attempted again as soon as the subscription runs again. Not a rule of the
	// policy: the subscription decides it as it stops, and the cut attempt does not count
	// against maxDeliveryAttempts.
	RuleStopped
)

// String returns the rule's name.
func (r Rule) String() string {
	switch r {
	case RuleUnsendable:
		return "Unsendable"
	case RuleNeverRetried:
		return "NeverRetried"
	case RuleMaxAttempts:
		return "MaxAttempts"
	case RuleSchedule:
		return "Schedule"
	case RuleFloor:
		return "Floor"
	case RuleRetryAfter:
		return "RetryAfter"
	case RuleTimeToLive:
		return "TimeToLive"
	case RuleProbation:
		return "Probation"
	case RuleStopped:
		return "Stopped"
	}
	return fmt.Sprintf("Rule(%d)", uint8(r))
}

// Explanation is why the policy decided as it did: the rule and the numbers it weighed. It
// is returned inside every [Decision] the policy makes, so a delivery's history can say which
// rule moved each event on (`egrid explain`). Durations are in the policy's time, already
// divided by the time scale. The zero value explains nothing (a delivered event).
type Explanation struct {
	// Rule is the rule that decided.
	Rule Rule
	// Status is the HTTP status the status rules applied to (0 when there was none).
	Status int
	// Outcome is the outcome of the failed attempt (zero for a decision made when an event
	// came due).
	Outcome schemas.Outcome
	// Attempts is the number of attempts made so far; MaxAttempts the subscription's limit.
	Attempts, MaxAttempts int
	// Step is the schedule step of the retry (the attempt number) and Schedule its delay;
	// Floor is the status floor that applied (0 when none did); RetryAfter the endpoint's
	// Retry-After that counted (0 when none did), and RetryAfterCapped says it was cut to the
	// time to live left. Set only for a retry.
	Step             int
	Schedule, Floor  time.Duration
	RetryAfter       time.Duration
	RetryAfterCapped bool
	// Delay is the delay before jitter; Jitter the jitter added to it (0 when jitter is off).
	Delay, Jitter time.Duration
	// Deadline is the end of the event's time to live (set for TimeToLive).
	Deadline time.Time
}

// Explain describes the decision in one line: the rule that won first, the ones it beat in
// parentheses, then the result, e.g. "503: floor 30s (over schedule step 1 = 10s), jitter +4%,
// due 12:03:41" or "500: attempt 30 of maxDeliveryAttempts 30 → DeadLetter
// (MaxDeliveryAttemptsExceeded)". A delivered event's zero Decision reads "delivered".
func (d Decision) Explain() string {
	e := d.Why
	if d.Action == 0 {
		return "delivered"
	}
	var b strings.Builder
	if e.Status != 0 {
		fmt.Fprintf(&b, "%d: ", e.Status)
	} else if e.Outcome != 0 {
		fmt.Fprintf(&b, "%s: ", e.Outcome)
	}
	switch e.Rule {
	case RuleUnsendable:
		b.WriteString("the event cannot be sent")
	case RuleNeverRetried:
		b.WriteString("never retried")
	case RuleMaxAttempts:
		fmt.Fprintf(&b, "attempt %d of maxDeliveryAttempts %d", e.Attempts, e.MaxAttempts)
	case RuleSchedule, RuleFloor, RuleRetryAfter:
		sched := fmt.Sprintf("schedule step %d = %s", e.Step, e.Schedule)
		floor := "floor " + e.Floor.String()
		ra := "Retry-After " + e.RetryAfter.String()
		if e.RetryAfterCapped {
			ra += " (capped at the time to live)"
		}
		var won string
		var beat []string
		switch e.Rule {
		case RuleSchedule:
			won = sched
		case RuleFloor:
			won, beat = floor, []string{sched}
		default:
			won, beat = ra, []string{sched}
		}
		if e.Floor > 0 && e.Rule != RuleFloor {
			beat = append([]string{floor}, beat...)
		}
		b.WriteString(won)
		if len(beat) > 0 {
			fmt.Fprintf(&b, " (over %s)", strings.Join(beat, ", "))
		}
		if e.Delay > 0 && e.Jitter > 0 {
			fmt.Fprintf(&b, ", jitter +%.1f%%", float64(e.Jitter)*100/float64(e.Delay))
		}
	case RuleTimeToLive:
		fmt.Fprintf(&b, "time to live ended at %s", e.Deadline.UTC().Format(time.TimeOnly))
	case RuleProbation:
		b.WriteString("the endpoint is on probation for a client error")
	case RuleStopped:
		b.WriteString("cut when the subscription stopped (a shutdown, an update, a move to another node) before the answer; not counted against maxDeliveryAttempts, attempted again when it runs again")
		return b.String() // due at once, whenever that is
	}
	switch d.Action {
	case Retry:
		fmt.Fprintf(&b, ", due %s", d.At.UTC().Format(time.TimeOnly))
	case DeadLetter, Drop:
		fmt.Fprintf(&b, " → %s (%s)", d.Action, d.Reason)
	}
	return b.String()
}
