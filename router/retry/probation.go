package retry

import (
	"fmt"
	"time"

	"github.com/egridio/egrid/schemas"
)

// Probation rules of SPEC §2.2 (seed 002's table, and the seeds' "if the first 10 events
// fail").
const (
	// ConsecutiveFailureThreshold is the number of consecutive failed attempts, of any kind,
	// that puts an endpoint on probation.
	ConsecutiveFailureThreshold = 10
	// ConsecutiveProbation is the probation an endpoint gets when it reaches
	// ConsecutiveFailureThreshold; it doubles with each failed probe, up to MaxProbation.
	ConsecutiveProbation = time.Minute
	// MaxProbation caps the doubling of ConsecutiveProbation.
	MaxProbation = 4 * time.Hour
)

// maxDoublings is the number of doublings after which ConsecutiveProbation exceeds
// MaxProbation (1 m << 8 = 256 m); counting stops there so the shift never overflows.
const maxDoublings = 8

// ProbationDuration returns how long a failed attempt with outcome o puts its endpoint on
// probation, per the table of SPEC §2.2: Busy 10 s, TimedOut 10 s, SocketError 30 s,
// NotFound 5 m, ResolutionError 5 m, Unauthorized 5 m, Forbidden 5 m, Disabled 5 m, Full 5 m,
// InvalidDestination 10 m. Other outcomes give false: they lead to probation only through the
// consecutive-failures rule.
func ProbationDuration(o schemas.Outcome) (time.Duration, bool) {
	switch o {
	case schemas.Busy, schemas.TimedOut:
		return 10 * time.Second, true
	case schemas.SocketError:
		return 30 * time.Second, true
	case schemas.NotFound, schemas.ResolutionError, schemas.Unauthorized, schemas.Forbidden,
		schemas.Disabled, schemas.Full:
		return 5 * time.Minute, true
	case schemas.InvalidDestination:
		return 10 * time.Minute, true
	}
	return 0, false
}

// IsClientError reports whether a probation caused by outcome o is a client-error probation:
// Unauthorized, Forbidden, NotFound, ResolutionError or InvalidDestination (SPEC §2.2). Events
// that come due during one are ended without an attempt.
func IsClientError(o schemas.Outcome) bool {
	switch o {
	case schemas.Unauthorized, schemas.Forbidden, schemas.NotFound, schemas.ResolutionError,
		schemas.InvalidDestination:
		return true
	}
	return false
}

// ProbationState is where an endpoint stands in the probation cycle.
type ProbationState uint8

// Probation states.
const (
	// Healthy: deliveries go out freely.
	Healthy ProbationState = iota
	// OnProbation: nothing is sent until [Probation.Until]; due events wait, or are ended
	// without an attempt when [Probation.ClientError] says so.
	OnProbation
	// AwaitingProbe: the probation period is over; the next batch sent is the probe, and the
	// actor reports it with [Probation.ProbeStarted].
	AwaitingProbe
	// ProbeInFlight: the probe is out; nothing else is sent until its result.
	ProbeInFlight
)

// String returns the state's name.
func (s ProbationState) String() string {
	switch s {
	case Healthy:
		return "Healthy"
	case OnProbation:
		return "OnProbation"
	case AwaitingProbe:
		return "AwaitingProbe"
	case ProbeInFlight:
		return "ProbeInFlight"
	}
	return fmt.Sprintf("ProbationState(%d)", uint8(s))
}

// Probation is the probation state of one endpoint (SPEC §2.2), a value the subscription
// actor keeps and updates with the result of every attempt. The zero value is a healthy
// endpoint. It is not safe for concurrent use; the actor owns it.
//
// The cycle: a failed attempt whose outcome is in the table of [ProbationDuration], or the
// ConsecutiveFailureThreshold-th failed attempt in a row of any kind but the events' own fault
// ([EventsFault]), puts the endpoint on
// probation until now plus the duration (divided by the time scale). During probation nothing
// is sent. When it ends, one batch goes out as a probe ([Probation.ProbeStarted]); success
// ([Probation.Succeeded]) makes the endpoint healthy again and the backlog drains, failure
// re-enters probation: for the new outcome's table duration, for the consecutive-failures
// duration once that rule is in force (1 m, doubling with each failed probe, at most 4 h), or
// otherwise — a probe failing with an outcome that has no table entry before the threshold —
// for the same duration as the probation it ended. When several rules apply the longest wins.
//
// A failure that arrives while the endpoint is already on probation (a batch sent before it
// began) extends the probation only if it would end later, and then also takes over the
// cause; it never shortens it. Waiting out a probation does not consume attempts; the actor
// still asks [Policy.AtDue] before each attempt.
type Probation struct {
	cause        schemas.Outcome
	until        time.Time
	base         time.Duration // unscaled duration of the current probation
	consecutive  int
	escalated    bool // the consecutive-failures rule is in force
	doublings    int  // failed probes since the consecutive-failures rule came into force
	probing      bool
	probeStarted time.Time
}

// Failed records a failed attempt with outcome o at now and enters or re-enters probation as
// the rules above say. timeScale divides the probation's duration, like [Policy.TimeScale]
// (0 or 1 is real time). schemas.Delivered is not a failure and schemas.Canceled means egrid
// itself abandoned the attempt (shutdown), which says nothing about the endpoint; both are
// ignored. An endpoint that refuses the events themselves (BadRequest 400, PayloadTooLarge
// 413: [EventsFault]) answered: the failure is the events' own and never counts against it
// (SPEC §8), and a probe answered so ends the probation as a delivered one does.
func (p *Probation) Failed(o schemas.Outcome, now time.Time, timeScale float64) {
	if o == schemas.Delivered || o == schemas.Canceled {
		return
	}
	if EventsFault(o) {
		if p.probing {
			p.Succeeded()
		}
		return
	}
	wasProbing := p.probing
	p.probing = false
	p.probeStarted = time.Time{}
	if p.consecutive < ConsecutiveFailureThreshold {
		p.consecutive++
	}

	var d time.Duration
	enter := false
	if td, ok := ProbationDuration(o); ok {
		d, enter = td, true
	}
	if p.consecutive >= ConsecutiveFailureThreshold {
		if p.escalated && wasProbing && p.doublings < maxDoublings {
			p.doublings++
		}
		p.escalated = true
		d, enter = max(d, min(ConsecutiveProbation<<p.doublings, MaxProbation)), true
	}
	if !enter && wasProbing {
		d, enter = p.base, true
	}
	if !enter {
		return
	}
	until := now.Add(scaleDuration(d, timeScale))
	if p.until.IsZero() || !until.Before(p.until) {
		p.until, p.cause, p.base = until, o, d
	}
}

// EventsFault reports whether an attempt that failed with o failed through the fault of its
// events, not of their endpoint: the endpoint answered, refusing the request's content (400
// Bad Request) or its size (413 Payload Too Large). Such a failure ends the events (or
// retries them, in a profile that retries 400 and 413) but never counts toward probation:
// a few malformed events must not hold back the healthy ones behind them, nor make
// themselves the probe that keeps the endpoint on probation for hours.
func EventsFault(o schemas.Outcome) bool {
	return o == schemas.BadRequest || o == schemas.PayloadTooLarge
}

// Succeeded records a successful attempt: the endpoint is healthy again and every counter is
// reset. Any success counts, also one of a batch sent before the probation began, since the
// endpoint has just shown it accepts deliveries.
func (p *Probation) Succeeded() { *p = Probation{} }

// End ends the probation at an operator's request (SPEC §2.2: "an operator can end it") and
// resets every counter, as a success would.
func (p *Probation) End() { *p = Probation{} }

// ProbeStarted records that the batch being sent at now is the probe. It does nothing unless
// [Probation.State] is AwaitingProbe at now, so calling it for every batch sent is safe.
func (p *Probation) ProbeStarted(now time.Time) {
	if p.State(now) == AwaitingProbe {
		p.probing, p.probeStarted = true, now
	}
}

// ProbeAbandoned records that the probe was not sent after all: its events could never be sent
// (an *sinks.UnsendableError), which says nothing about the endpoint. The endpoint is awaiting
// a probe again, so the next batch becomes the probe; nothing else changes.
func (p *Probation) ProbeAbandoned() {
	p.probing, p.probeStarted = false, time.Time{}
}

// State returns where the endpoint stands at now.
func (p *Probation) State(now time.Time) ProbationState {
	switch {
	case p.until.IsZero():
		return Healthy
	case p.probing:
		return ProbeInFlight
	case now.Before(p.until):
		return OnProbation
	}
	return AwaitingProbe
}

// Active reports whether the endpoint is on probation at now: nothing may be sent before
// [Probation.Until].
func (p *Probation) Active(now time.Time) bool {
	return !p.until.IsZero() && !p.probing && now.Before(p.until)
}

// Probing reports whether the probe is in flight, so nothing else may be sent.
func (p *Probation) Probing() bool { return p.probing }

// ProbeStartedAt returns when the probe in flight was sent, zero when there is none.
func (p *Probation) ProbeStartedAt() time.Time { return p.probeStarted }

// Until returns when the current probation period ends (it is in the past while the endpoint
// awaits or runs its probe), zero when the endpoint is healthy.
func (p *Probation) Until() time.Time { return p.until }

// Cause returns the outcome that caused the current probation, 0 when the endpoint is
// healthy.
func (p *Probation) Cause() schemas.Outcome { return p.cause }

// ClientError reports whether the current probation was caused by a client error
// ([IsClientError]). The actor ends events that come due while [Probation.Active] and
// ClientError are both true without an attempt, with lastDeliveryOutcome Probation and
// [Policy.End] of UndeliverableDueToProbationCausedByClientError (SPEC §2.2); once the
// period is over they wait for the probe like any other.
func (p *Probation) ClientError() bool { return !p.until.IsZero() && IsClientError(p.cause) }

// ConsecutiveFailures returns the number of failed attempts since the last success, counted
// up to ConsecutiveFailureThreshold.
func (p *Probation) ConsecutiveFailures() int { return p.consecutive }

// ProbationSnapshot is the plain-data form of a [Probation], for keeping it across a restart
// (issue 5). The zero value is a healthy endpoint. Callers encode it as they like; it holds
// only exported fields of basic types.
type ProbationSnapshot struct {
	// Cause is the outcome that caused the current probation, 0 when healthy.
	Cause schemas.Outcome
	// Until is when the current probation period ends, zero when healthy.
	Until time.Time
	// Base is the unscaled duration of the current probation; a probe failing with an outcome
	// that has no table entry re-enters probation for it.
	Base time.Duration
	// ConsecutiveFailures counts failed attempts since the last success, up to
	// ConsecutiveFailureThreshold.
	ConsecutiveFailures int
	// Escalated reports whether the consecutive-failures rule is in force.
	Escalated bool
	// Doublings counts failed probes since the consecutive-failures rule came into force.
	Doublings int
	// Probing reports whether a probe was in flight when the snapshot was taken.
	Probing bool
	// ProbeStarted is when that probe was sent, zero when none was.
	ProbeStarted time.Time
}

// Snapshot returns p's state as plain data.
func (p *Probation) Snapshot() ProbationSnapshot {
	return ProbationSnapshot{
		Cause:               p.cause,
		Until:               p.until,
		Base:                p.base,
		ConsecutiveFailures: p.consecutive,
		Escalated:           p.escalated,
		Doublings:           p.doublings,
		Probing:             p.probing,
		ProbeStarted:        p.probeStarted,
	}
}

// RestoreProbation returns the Probation s was taken from. A probe in flight at snapshot time
// cannot still be out after a restart, so it restores as awaiting a probe: the next batch
// sent is the probe again. Counters out of range are clamped.
func RestoreProbation(s ProbationSnapshot) Probation {
	p := Probation{
		cause:       s.Cause,
		until:       s.Until,
		base:        s.Base,
		consecutive: min(max(s.ConsecutiveFailures, 0), ConsecutiveFailureThreshold),
		escalated:   s.Escalated,
		doublings:   min(max(s.Doublings, 0), maxDoublings),
	}
	if p.until.IsZero() {
		p.cause, p.base = 0, 0
	}
	return p
}
