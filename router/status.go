package router

import (
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
)

// Status is a subscription's delivery state ([Router.Status], [Router.EndProbation]).
type Status struct {
	Topic, Subscription string
	// Backlog counts events taken in or still in the journal that are neither delivered nor
	// ended: ready, in flight, parked for retry, or not yet read.
	Backlog int
	// OldestUndelivered is the publish time of the oldest event in the backlog (zero if none).
	OldestUndelivered time.Time
	// InFlight counts attempts currently running.
	InFlight int
	// Cursor is the subscription's durable cursor.
	Cursor uint64
	// Probation is the endpoint's probation state.
	Probation ProbationStatus
	// Loading is set while the subscription's actor still reads its stored state (after a
	// restart, an update or its placement on this cluster node) and the read has run for over
	// a second (a request waits that long for it): the fields above are then not known yet
	// (zero). [Router.EndProbation] meanwhile answers [ErrSubscriptionLoading].
	Loading bool
	// LoadingSince is when the actor started reading its state (zero unless Loading): a load
	// that has run for long points at a store that stopped answering.
	LoadingSince time.Time
}

// ErrSubscriptionLoading is wrapped by [Router.EndProbation]'s error while the subscription's
// actor still reads its stored state: nothing was changed; call it again once [Router.Status]
// no longer says Loading. The admin API answers it 503 with Retry-After.
var ErrSubscriptionLoading = actors.ErrLoading

// ErrSubscriptionNotRunning is wrapped by [Router.Status]'s and [Router.EndProbation]'s error
// when the subscription's actor was not running as the call reached it: it stopped before it
// had loaded its state (the subscription was changed, moved or restarted meanwhile), or it
// was just deleted — then the error wraps [ErrSubscriptionNotFound] instead. Nothing was
// changed: call it again. The admin API answers it 503 with Retry-After.
var ErrSubscriptionNotRunning = actors.ErrNotRunning

// ProbationStatus describes an endpoint's probation (SPEC §2.2).
type ProbationStatus struct {
	// Active is true while the probation period runs: nothing is sent before Until.
	Active bool
	// State is where the endpoint stands in the probation cycle: Healthy, OnProbation (Active),
	// AwaitingProbe (the period is over and the next batch sent is the probe) or ProbeInFlight.
	State retry.ProbationState
	// Until is when the current probation period ends (in the past while the endpoint awaits
	// or runs its probe); zero when the endpoint is healthy.
	Until time.Time
	// Cause is the outcome that caused the probation; zero when the endpoint is healthy.
	Cause schemas.Outcome
	// ConsecutiveFailures counts the failed attempts since the last success, up to
	// retry.ConsecutiveFailureThreshold.
	ConsecutiveFailures int
}

func statusOf(s *actors.Status) *Status {
	p := s.Probation
	return &Status{
		Topic: s.Topic, Subscription: s.Subscription, Backlog: s.Backlog, OldestUndelivered: s.OldestUndelivered,
		InFlight: s.InFlight, Cursor: s.Cursor,
		Probation: ProbationStatus{Active: p.Active, State: p.State, Until: p.Until, Cause: p.Cause, ConsecutiveFailures: p.ConsecutiveFailures},
		Loading:   s.Loading, LoadingSince: s.LoadingSince,
	}
}

// DeadLetterStatus is the dead-letter actor's state ([Router.DeadLetterStatus]).
type DeadLetterStatus struct {
	// Waiting counts records waiting out their delay; Writing those in a write now; Retrying
	// those whose write failed and waits for its next try.
	Waiting, Writing, Retrying int
	// ObjectsWritten, RecordsWritten and RecordsDropped count since the actor started.
	ObjectsWritten, RecordsWritten, RecordsDropped int
	// Loading is set while the dead-letter actor still reads its outbox at start: the answer
	// comes at once, and the counts of records are then not known yet (zero).
	Loading bool
	// LoadingSince is when it started reading its outbox (zero unless Loading).
	LoadingSince time.Time
	// Replays are the dead-letter replays running in this router (in cluster mode, on this
	// node: the one that got the replay call), by topic and subscription; known while Loading
	// too.
	Replays []ReplayStatus
}

// ReplayStatus is a dead-letter replay running ([DeadLetterStatus.Replays]).
type ReplayStatus struct {
	Topic, Subscription string
	// Started is when its events were handed to its replay actor.
	Started time.Time
	// Events counts the events it replays; Settled those delivered or ended again so far.
	Events, Settled int
}

// Pending counts the records not yet written.
func (s *DeadLetterStatus) Pending() int { return s.Waiting + s.Writing + s.Retrying }

func deadLetterStatusOf(s *deadletter.Status) *DeadLetterStatus {
	return &DeadLetterStatus{
		Waiting: s.Waiting, Writing: s.Writing, Retrying: s.Retrying,
		ObjectsWritten: s.ObjectsWritten, RecordsWritten: s.RecordsWritten, RecordsDropped: s.RecordsDropped,
		Loading: s.Loading, LoadingSince: s.LoadingSince,
	}
}

// DeadLetter is an event that ended without delivery on a subscription with a dead-letter
// destination, as [Deps.OnDeadLetter] observes it: the event and the facts its dead-letter
// record is made of (SPEC §5).
type DeadLetter struct {
	Topic, Subscription string
	// TopicID is the topic's resource id; InputSchema and DeliverySchema are the topic's and
	// the subscription's schemas.
	TopicID                     string
	InputSchema, DeliverySchema schemas.Schema
	Event                       *schemas.Event
	Reason                      schemas.Reason
	DeliveryAttempts            int
	LastOutcome                 schemas.Outcome
	LastHTTPStatus              int
	PublishTime                 time.Time
	LastAttemptTime             time.Time
}

func deadLetterOf(d *actors.DeadLetter) *DeadLetter {
	return &DeadLetter{
		Topic: d.Topic, Subscription: d.Subscription, TopicID: d.TopicID, InputSchema: d.InputSchema,
		DeliverySchema: d.DeliverySchema, Event: d.Event, Reason: d.Reason, DeliveryAttempts: d.DeliveryAttempts,
		LastOutcome: d.LastOutcome, LastHTTPStatus: d.LastHTTPStatus, PublishTime: d.PublishTime, LastAttemptTime: d.LastAttemptTime,
	}
}

// AttemptRecord describes one finished delivery attempt, or events that ended when they came
// due without an attempt; [Deps.OnAttempt] receives it. Together the records are an event's
// whole delivery history: what delivery timelines are built from.
//
// Events end without an attempt in two cases (NoAttempt is set): their time to live had passed
// when their next attempt came due (SPEC §2.1; Outcome is zero and the decision's reason is
// TimeToLiveExceeded), or they came due while a probation caused by a client error was in
// force (SPEC §2.2; Outcome is schemas.Probation).
type AttemptRecord struct {
	Topic, Subscription string
	// EventIDs are the events of the attempt, in the order of the request body.
	EventIDs []string
	// Attempts holds, per event, the number of this attempt for that event (1 for its first):
	// events in one batch keep their own counts (SPEC §2.3). For a NoAttempt record it is the
	// number of attempts the event had had.
	Attempts []int
	// Time is when the attempt started, or when the events ended for a NoAttempt record.
	Time time.Time
	// Duration is how long the attempt took; the decisions were made at Time+Duration.
	Duration time.Duration
	Outcome  schemas.Outcome
	// StatusCode is the HTTP status the destination answered, a success's (200-204) too
	// (the sink's Batch.StatusCode); 0 when there was none (no response, a broker).
	StatusCode int
	// Decisions holds the decision per event, in order: the zero Decision for a delivered
	// event, else the retry decision or how the delivery ended.
	Decisions []retry.Decision
	// Probe is set when the attempt was the probe sent after a probation ended (SPEC §2.2).
	Probe bool
	// NoAttempt is set when the record describes events that ended without an attempt.
	NoAttempt bool
	// Epoch tells the incarnations of a subscription name apart: a subscription deleted and
	// created again under its name reports another epoch.
	Epoch uint64
}

func attemptRecordOf(a *actors.AttemptRecord) *AttemptRecord {
	return &AttemptRecord{
		Topic: a.Topic, Subscription: a.Subscription, EventIDs: a.EventIDs, Attempts: a.Attempts, Time: a.Time,
		Duration: a.Duration, Outcome: a.Outcome, StatusCode: a.StatusCode, Decisions: a.Decisions, Probe: a.Probe, NoAttempt: a.NoAttempt,
		Epoch: a.Epoch,
	}
}
