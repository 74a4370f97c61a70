package retry

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/egridio/egrid/schemas"
)

// defaultProfile is the profile of a [Policy] whose Profile is nil. It is never handed out, so
// nobody can change it.
var defaultProfile = EventGrid()

// Policy is one subscription's effective delivery policy: a [Profile] plus the settings a
// subscription may choose. The zero value is valid and means the [EventGrid] profile with its
// defaults, no dead-letter destination, jitter seeded with 0, and real time.
//
// A Policy is read-only once built; its methods are safe for concurrent use as long as nobody
// changes it (or its Profile) at the same time.
type Policy struct {
	// Profile is the retry profile; nil means [EventGrid].
	Profile *Profile
	// MaxDeliveryAttempts is maxDeliveryAttempts: the most attempts an event gets, 1 to the
	// profile's MaxAttemptsLimit; 0 means the profile's DefaultMaxAttempts.
	MaxDeliveryAttempts int
	// EventTimeToLive is the event time to live measured from the publish time
	// (eventTimeToLiveInMinutes; a namespace subscription's ISO 8601 retention), whole minutes
	// within the profile's MinTTL..MaxTTL; 0 means the profile's DefaultTTL.
	EventTimeToLive time.Duration
	// DeadLetter says a dead-letter destination is configured: an event that cannot be
	// delivered is dead-lettered when it is set and dropped (and counted) when it is not. The
	// 2019 profile also uses it to decide whether 400 and 413 end a delivery at once.
	DeadLetter bool
	// JitterSeed seeds the 0-10 % jitter added to retry delays. The jitter is a hash of the
	// seed, the event id and the attempt number, so the same inputs always give the same
	// delay.
	JitterSeed uint64
	// NoJitter turns the jitter off, for tests that need exact times.
	NoJitter bool
	// HonorRetryAfter makes a 429 or 503 answer's Retry-After header count in the retry
	// delay (an egrid extension: Azure documents no Retry-After handling, so the built-in
	// profiles ignore the header unless this is set).
	HonorRetryAfter bool
	// TimeScale divides every policy duration — schedule delays, floors, Retry-After, the time
	// to live — so `egrid serve --time-scale N` runs a 24-hour schedule N times faster
	// (DESIGN.md §5). 0 and 1 mean real time; values between 0 and 1 slow time down.
	// Negative, NaN and infinite values fail [Policy.Validate] and are treated as 1.
	TimeScale float64
}

// Validate checks the subscription's settings against the profile's ranges (SPEC §2.1,
// eventgrid-behaviour.md §6.3) and reports every problem at once: each out-of-range setting
// as a *[FieldError], joined with errors.Join, plus the profile's own problems when a
// hand-built profile is invalid.
func (p *Policy) Validate() error {
	prof := p.profile()
	var errs []error
	if p.Profile != nil {
		if err := p.Profile.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("retry profile %q: %w", p.Profile.Name, err))
		}
	}
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if n := p.MaxDeliveryAttempts; n < 0 || n > prof.MaxAttemptsLimit {
		bad("maxDeliveryAttempts", "is %d: must be between 1 and %d for the %s profile (leave it unset for the default, %d)",
			n, prof.MaxAttemptsLimit, prof.Name, prof.DefaultMaxAttempts)
	}
	switch ttl := p.EventTimeToLive; {
	case ttl == 0:
	case ttl < prof.MinTTL || ttl > prof.MaxTTL:
		bad("eventTimeToLive", "is %s: must be between %s and %s for the %s profile (leave it unset for the default, %s)",
			ttl, prof.MinTTL, prof.MaxTTL, prof.Name, prof.DefaultTTL)
	case ttl%time.Minute != 0:
		bad("eventTimeToLive", "is %s: must be a whole number of minutes", ttl)
	}
	if s := p.TimeScale; math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
		bad("timeScale", "is %v: must be a positive finite number (0 or 1 for real time)", s)
	}
	return errors.Join(errs...)
}

// MaxAttempts returns the effective maxDeliveryAttempts: MaxDeliveryAttempts, or the profile's
// default when it is 0.
func (p *Policy) MaxAttempts() int {
	if p.MaxDeliveryAttempts > 0 {
		return p.MaxDeliveryAttempts
	}
	return p.profile().DefaultMaxAttempts
}

// TTL returns the effective event time to live in real time: EventTimeToLive, or the
// profile's default when it is 0. [Policy.Deadline] applies the time scale.
func (p *Policy) TTL() time.Duration {
	if p.EventTimeToLive > 0 {
		return p.EventTimeToLive
	}
	return p.profile().DefaultTTL
}

// Deadline returns the instant an event published at publishTime stops living: publishTime
// plus the time to live divided by the time scale. An attempt that comes due at or after it
// is not made ([Policy.AtDue]).
func (p *Policy) Deadline(publishTime time.Time) time.Time {
	return publishTime.Add(p.scale(p.TTL()))
}

// Failure is what a sink reported for one failed attempt (the facts of a
// *sinks.DeliveryError).
type Failure struct {
	// Outcome classifies the failure. schemas.Delivered is not a failure; AfterFailure treats
	// it like schemas.GenericError.
	Outcome schemas.Outcome
	// StatusCode is the HTTP status the endpoint answered with, 0 when there was no HTTP
	// response.
	StatusCode int
	// RetryAfter is the endpoint's Retry-After header verbatim (delay-seconds or an HTTP
	// date), or empty.
	RetryAfter string
	// Unsendable says the event itself can never be sent (it cannot be encoded, or a delivery
	// header cannot be built from it: a *sinks.UnsendableError names it). No request reached
	// the destination, so this is no fact about the endpoint: the caller must not count it
	// against the endpoint's [Probation].
	Unsendable bool
}

// status returns the HTTP status the status rules apply to: StatusCode, or, for a failure
// without an HTTP response (a Go function sink), the status an HTTP endpoint would have
// answered with for the outcomes that have exactly one (BadRequest 400, Unauthorized 401,
// Forbidden 403, NotFound 404, PayloadTooLarge 413, URITooLong 414). Busy (429 or 503) and
// TimedOut (a 408 or no answer at all) are ambiguous and keep 0, so they get the default
// floor; so that a function sink "gets exactly the same retry semantics as a webhook" (SPEC
// §1.2) it should report StatusCode when it means a specific one.
func (f Failure) status() int {
	if f.StatusCode != 0 {
		return f.StatusCode
	}
	switch f.Outcome {
	case schemas.BadRequest:
		return 400
	case schemas.Unauthorized:
		return 401
	case schemas.Forbidden:
		return 403
	case schemas.NotFound:
		return 404
	case schemas.PayloadTooLarge:
		return 413
	case schemas.URITooLong:
		return 414
	}
	return 0
}

// honoursRetryAfter reports whether the failure's Retry-After header counts: on 429 and 503
// (SPEC §2.1), and on a Busy outcome without an HTTP status.
func (f Failure) honoursRetryAfter(code int) bool {
	return code == 429 || code == 503 || (code == 0 && f.Outcome == schemas.Busy)
}

// Action is what happens to an event after a decision.
type Action uint8

// Actions.
const (
	// Retry parks the event until [Decision.At], when the next attempt is due.
	Retry Action = iota + 1
	// DeadLetter ends the delivery and hands the event to the dead-letter destination.
	DeadLetter
	// Drop ends the delivery without a dead-letter destination; the event is counted in
	// DroppedEventCount by [Decision.Reason].
	Drop
)

// String returns the action's name ("Retry", "DeadLetter", "Drop").
func (a Action) String() string {
	switch a {
	case Retry:
		return "Retry"
	case DeadLetter:
		return "DeadLetter"
	case Drop:
		return "Drop"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Decision is the policy's answer about one event.
type Decision struct {
	// Action is what to do.
	Action Action
	// At is when the next attempt is due; set only for Retry.
	At time.Time
	// Reason says why the delivery ended (the deadLetterReason, or the DroppedEventCount
	// reason); set only for DeadLetter and Drop.
	Reason schemas.Reason
	// Why explains the decision: the rule that made it and the numbers it weighed
	// ([Decision.Explain] puts it in words).
	Why Explanation
}

// Ends reports whether the decision ends the event's delivery (DeadLetter or Drop).
func (d Decision) Ends() bool { return d.Action == DeadLetter || d.Action == Drop }

// String describes the decision for logs and golden delivery timelines: "Retry at
// <RFC 3339 time>" or "<Action> (<Reason>)".
func (d Decision) String() string {
	if d.Action == Retry {
		return "Retry at " + d.At.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s (%s)", d.Action, d.Reason)
}

// End returns the decision that ends an event's delivery for reason: DeadLetter when a
// dead-letter destination is configured, Drop when not (SPEC §5). The subscription actor uses
// it for schemas.UndeliverableDueToProbationCausedByClientError when a due event meets a
// client-error probation ([Probation.ClientError]), so the choice lives in one place.
func (p *Policy) End(reason schemas.Reason) Decision {
	var why Explanation
	if reason == schemas.UndeliverableDueToProbationCausedByClientError {
		why.Rule = RuleProbation
	}
	return p.end(reason, why)
}

// end returns the decision ending a delivery for reason, explained by why.
func (p *Policy) end(reason schemas.Reason, why Explanation) Decision {
	why.MaxAttempts = p.MaxAttempts()
	if p.DeadLetter {
		return Decision{Action: DeadLetter, Reason: reason, Why: why}
	}
	return Decision{Action: Drop, Reason: reason, Why: why}
}

// AfterFailure decides what happens after a failed attempt (SPEC §2.1). attempts counts the
// attempts made so far, including this one (values below 1 count as 1); eventID, with
// JitterSeed and attempts, seeds the jitter; publishTime is when the event was accepted.
//
// The rules, in order:
//
//  0. An unsendable event ([Failure.Unsendable]) ends now with
//     UndeliverableDueToEventContent: retrying cannot change the event.
//  1. A never-retried status or outcome of the profile — or, when DeadLetter is set, a status
//     in DeadLetterAtOnceIfConfigured — ends the delivery now, with reason
//     UndeliverableDueToHttpBadRequest for 400 and UndeliverableDueToClientError otherwise.
//  2. When attempts has reached the maximum, the delivery ends with
//     MaxDeliveryAttemptsExceeded.
//  3. Otherwise the event is retried after max(schedule delay, status floor, Retry-After)
//     (no floor for the profile's first UnflooredRetries retries),
//     each divided by the time scale. Retry-After counts only with HonorRetryAfter, only on
//     429 and 503, and is capped at the event's remaining time to live. A 0-10 % jitter is then added to the delay — also
//     when Retry-After decided it, since jitter only ever lengthens a delay and so never
//     breaks "retry no sooner than", while it spreads the herd of events that got the same
//     Retry-After. The exception is a Retry-After capped at the time to live: that retry is
//     due exactly at the deadline, where [Policy.AtDue] ends it, because jitter there would
//     only hold a dead event longer.
//
// The time to live is deliberately not checked here: Event Grid checks it only when the next
// attempt comes due (SPEC §2.1), which is [Policy.AtDue]'s job. A Retry decision's At is never
// before now.
func (p *Policy) AfterFailure(f Failure, attempts int, eventID string, publishTime, now time.Time) Decision {
	prof := p.profile()
	if attempts < 1 {
		attempts = 1
	}
	code := f.status()
	why := Explanation{Status: code, Outcome: f.Outcome, Attempts: attempts, MaxAttempts: p.MaxAttempts()}
	if f.Unsendable {
		why.Rule = RuleUnsendable
		return p.end(schemas.UndeliverableDueToEventContent, why)
	}
	if reason, final := p.final(prof, f.Outcome, code); final {
		why.Rule = RuleNeverRetried
		return p.end(reason, why)
	}
	if attempts >= p.MaxAttempts() {
		why.Rule = RuleMaxAttempts
		return p.end(schemas.MaxDeliveryAttemptsExceeded, why)
	}

	floor := prof.Floor(code)
	if attempts <= prof.UnflooredRetries {
		floor = 0
	}
	why.Step, why.Schedule, why.Floor = attempts, max(p.scale(prof.ScheduleDelay(attempts)), 0), max(p.scale(floor), 0)
	why.Rule = RuleSchedule
	if why.Floor > why.Schedule {
		why.Rule = RuleFloor
	}
	delay := max(why.Schedule, why.Floor)
	jitter := !p.NoJitter
	if p.HonorRetryAfter && f.RetryAfter != "" && f.honoursRetryAfter(code) {
		if ra, ok := ParseRetryAfter(f.RetryAfter, now); ok {
			ra = p.scale(ra)
			capped := false
			if remaining := p.Deadline(publishTime).Sub(now); ra > remaining {
				ra, capped = remaining, true
			}
			if ra > delay {
				delay = ra
				jitter = jitter && !capped
				why.Rule, why.RetryAfter, why.RetryAfterCapped = RuleRetryAfter, ra, capped
			}
		}
	}
	why.Delay = delay
	if jitter {
		why.Jitter = p.jitter(delay, eventID, attempts)
		delay = addSaturating(delay, why.Jitter)
	}
	return Decision{Action: Retry, At: now.Add(delay), Why: why}
}

// AtDue applies the time to live when a parked event's next attempt comes due (SPEC §2.1:
// "the time to live is checked only when the next attempt comes due"). It returns the
// decision ending the delivery with TimeToLiveExceeded and true when now is at or past the
// event's [Policy.Deadline]; otherwise false, and the attempt goes ahead. The actor also asks
// it for an event that waited out a probation, since waiting does not stop the clock
// (SPEC §2.2).
func (p *Policy) AtDue(publishTime, now time.Time) (Decision, bool) {
	deadline := p.Deadline(publishTime)
	if now.Before(deadline) {
		return Decision{}, false
	}
	return p.end(schemas.TimeToLiveExceeded, Explanation{Rule: RuleTimeToLive, Deadline: deadline}), true
}

// final reports whether a failure with outcome o and effective status code ends the delivery
// at once, and with which reason.
func (p *Policy) final(prof *Profile, o schemas.Outcome, code int) (schemas.Reason, bool) {
	if code != 0 && (prof.NeverRetry[code] || (p.DeadLetter && prof.DeadLetterAtOnceIfConfigured[code])) {
		if code == 400 {
			return schemas.UndeliverableDueToHTTPBadRequest, true
		}
		return schemas.UndeliverableDueToClientError, true
	}
	if prof.NeverRetryOutcomes[o] {
		return schemas.UndeliverableDueToClientError, true
	}
	return "", false
}

// EndsOnClientErrorProbation reports whether events that come due during a probation a client
// error caused end without an attempt (SPEC §2.2), or wait for it to end
// ([Profile.WaitOnClientErrorProbation]).
func (p *Policy) EndsOnClientErrorProbation() bool { return !p.profile().WaitOnClientErrorProbation }

// profile returns the policy's profile, [EventGrid] when none is set.
func (p *Policy) profile() *Profile {
	if p.Profile == nil {
		return defaultProfile
	}
	return p.Profile
}

// scale divides d by the policy's time scale.
func (p *Policy) scale(d time.Duration) time.Duration {
	return scaleDuration(d, p.TimeScale)
}

// scaleDuration divides d by s, saturating instead of overflowing. An s of 0 or 1, or one
// that is not a positive finite number, leaves d unchanged.
func scaleDuration(d time.Duration, s float64) time.Duration {
	if s == 1 || !(s > 0) || math.IsInf(s, 0) {
		return d
	}
	r := math.Round(float64(d) / s)
	switch {
	case r >= math.MaxInt64:
		return math.MaxInt64
	case r <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(r)
}

// jitter returns a deterministic jitter in [0, d/10) for the given event and attempt.
func (p *Policy) jitter(d time.Duration, eventID string, attempts int) time.Duration {
	if d <= 0 {
		return 0
	}
	// FNV-1a over the event id, inline so the hot path does not allocate.
	h := uint64(14695981039346656037)
	for i := 0; i < len(eventID); i++ {
		h ^= uint64(eventID[i])
		h *= 1099511628211
	}
	h = splitmix64(h ^ p.JitterSeed)
	h = splitmix64(h ^ uint64(attempts))
	// hi = floor(d * h / 2^64) is uniform in [0, d) without overflow.
	hi, _ := bits.Mul64(uint64(d), h)
	return time.Duration(hi / 10)
}

// splitmix64 is the SplitMix64 finaliser: a bijective mix with good avalanche.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// addSaturating returns a+b for non-negative durations, or the largest duration on overflow.
func addSaturating(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
