package actors

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// Appended tells a topic actor that entries were appended to its journal. The router sends
// Appended messages for one topic in sequence order; where it leaves a gap, it sends a
// [JournalAt] instead, and the subscriptions read the entries of the gap from the journal.
type Appended struct {
	Entries []store.Entry
	// Held, when non-nil, counts the bytes of events handed to the topic actor and not yet
	// handed on to its subscriptions, Bytes of them this message's: the topic actor takes
	// them off once it has fanned Entries out ([Appended.Handed]). The router holds that
	// count under a bound, and past it sends a JournalAt instead of the entries, so a topic
	// actor slower than its publishers (many filtered subscriptions of big events) leaves the
	// backlog in the journal, not in its mailbox. An atomic shared by the router's committer
	// and the topic actor: a count each only adds to, never a state either reads to decide
	// anything of the other's.
	Held  *atomic.Int64
	Bytes int64
}

// Handed takes a's bytes off its Held count; the topic actor calls it once a is fanned out.
func (a *Appended) Handed() {
	if a.Held != nil {
		a.Held.Add(-a.Bytes)
	}
}

// Deliver hands a subscription actor the journal entries that match its filter. Through is the
// sequence number of the last journal entry the topic actor has looked at (matching or not), so
// the subscription can advance its cursor past entries that did not match.
type Deliver struct {
	Entries []store.Entry
	Through uint64
	// From, when non-zero, is the sequence number of the first journal entry the topic actor
	// looked at. A subscription whose next entry comes before it missed entries (in cluster
	// mode other nodes append to the journal too, and the router hands a topic actor only
	// what fits its bound: [Appended.Held]) and reads them from the journal instead.
	From uint64
}

// JournalAt tells a topic actor that its journal reaches at least Last: another cluster node
// appended to it, or the router appended events it did not hand over ([Appended.Held]). Its
// subscription actors read what they lack from the journal.
type JournalAt struct {
	Last uint64
}

// AddSubscription asks a topic actor to start (or replace) a subscription actor.
type AddSubscription struct {
	Config *SubscriptionConfig
}

// RemoveSubscription asks a topic actor to stop a subscription actor.
type RemoveSubscription struct {
	Name string
}

// GetStatus asks a subscription actor (or, with Subscription set, a topic actor, which forwards
// it) for its delivery state; the answer is a *[Status]. While the actor still reads its stored
// state at start, the request waits for the read up to a second (statusWait; a load that ends
// by then answers with the loaded state) and is then answered with the loading status
// ([Status.Loading]). An actor that stops or restarts before its load is in answers the
// requests it kept (GetStatus and [EndProbation]) at once with an error wrapping
// [ErrNotRunning].
type GetStatus struct {
	Subscription string
	// EventID, when set, asks a push subscription also where that event stands if the actor
	// holds it: taken in and not finished ([Status.Event]).
	EventID string
}

// HeldEvent is where an event a subscription actor holds in memory stands: taken in and
// neither delivered nor ended, so its delivery history may not have a step yet (an attempt
// in flight, or none made).
type HeldEvent struct {
	PublishTime time.Time
	// InFlight says an attempt of the event runs, since AttemptStarted.
	InFlight       bool
	AttemptStarted time.Time
	// Due is when the event's next attempt is due while it waits parked (a retry, or the
	// attempt again after a stop cut the last one); zero while it is ready to go out (behind
	// other events, the in-flight limit, or a probation).
	Due time.Time
	// Attempts counts the attempts the event had; MaxAttempts and Deadline are the
	// subscription's maxDeliveryAttempts and the end of the event's time to live.
	Attempts    int
	MaxAttempts int
	Deadline    time.Time
}

// EndProbation asks a subscription actor (through its topic actor) to end its probation now.
// The answer is a *[Status]. While the actor still reads its stored state at start the request
// waits for the read up to a second (statusWait), and past it is answered with an error wrapping
// [ErrLoading], nothing ended: the probation is in the state being read.
type EndProbation struct {
	Subscription string
}

// ErrLoading wraps the answer to an [EndProbation] that reaches a subscription actor while it
// still reads its stored state at start (after a restart, an update that replaced it, or its
// placement on this cluster node) and whose read has not ended within a second: nothing was
// changed, and the call is to be made again once the state is in, which a [GetStatus] tells
// ([Status.Loading]). The request is not kept for longer: a store that stopped answering would
// hold its caller, and every caller after it, for as long as it does.
var ErrLoading = errors.New("the event subscription is still loading its state from the store")

// Status is a subscription's delivery state at one instant.
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
	// Loading is set while the actor still reads its stored state at start (a router restart,
	// a restart of the actor, an update that replaced it, its placement on this cluster node)
	// and the read has run for a second (a request waits that long for it), or when more than
	// 64 requests wait for it: the answer comes from the actor, without the read. The delivery
	// fields above (Backlog, OldestUndelivered, InFlight, Cursor, Probation) are then not
	// known yet: they are zero, and say nothing of the subscription.
	Loading bool
	// LoadingSince is when the actor started reading its state (zero unless Loading): a load
	// that has run for long points at a store that stopped answering.
	LoadingSince time.Time
	// Event answers GetStatus.EventID: where the event stands when the actor holds it, nil
	// when it does not (or nothing was asked, or Loading).
	Event *HeldEvent
}

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

// DeadLetter is an event that ended without delivery: it goes to the dead-letter destination
// when the subscription has one, and is dropped (and counted) otherwise.
type DeadLetter struct {
	Topic, Subscription string
	TopicID             string
	InputSchema         schemas.Schema
	DeliverySchema      schemas.Schema
	Event               *schemas.Event
	Reason              schemas.Reason
	DeliveryAttempts    int
	LastOutcome         schemas.Outcome
	LastHTTPStatus      int
	PublishTime         time.Time
	LastAttemptTime     time.Time
}

// AttemptRecord describes one finished attempt, or events that ended when they came due
// without an attempt; [SubscriptionConfig.OnAttempt] receives it. Together the records are an
// event's whole delivery history: what delivery timelines and `egrid explain` are built from.
//
// Events end without an attempt in two cases (NoAttempt is set): their time to live had passed
// when their next attempt came due (SPEC §2.1; Outcome is zero and the decision's reason is
// TimeToLiveExceeded), or they came due while a probation caused by a client error was in
// force (SPEC §2.2; Outcome is schemas.Probation).
//
// A queue (pull) subscription reports the steps of its events' pull delivery instead: Pull
// says which step the record is, Attempts holds each event's delivery count, and Decisions
// how a step ended an event (the zero Decision when it did not).
type AttemptRecord struct {
	Topic, Subscription string
	// Epoch is the epoch of the subscription the actor loaded
	// ([store.SubscriptionState.Epoch]): a delivery history written from the record after
	// the subscription was deleted and created again under its name goes nowhere
	// ([store.Store.PutHistory]). Zero for a replay's records (they come from its private
	// journal's subscription, not the live one).
	Epoch uint64
	// EventIDs are the events of the attempt, in the order of the request body.
	EventIDs []string
	// Attempts holds, per event, the number of this attempt for that event (1 for its first):
	// events in one batch keep their own counts (SPEC §2.3). For a NoAttempt record it is the
	// number of attempts the event had had. Only attempts that count against
	// maxDeliveryAttempts are numbered: an attempt cut by the subscription's stop (rule
	// [retry.RuleStopped]) has the number of the attempt made after it.
	Attempts []int
	// AfterCut, when not nil, holds per event whether an earlier attempt of it, reported in an
	// earlier record, was cut by a stop before it had a counted one: its history then has
	// steps before this record although Attempts says 1 (0 for a NoAttempt record). The record
	// of an event's first cut has it false, so that cut starts the event's history as a first
	// attempt does, not adding to another event's with the same id (a publisher's retry).
	AfterCut []bool
	// Time is when the attempt started, or when the events ended for a NoAttempt record.
	Time time.Time
	// Duration is how long the attempt took; the decisions were made at Time+Duration.
	Duration time.Duration
	Outcome  schemas.Outcome
	// StatusCode is the HTTP status the destination answered, a success's (200-204) too
	// ([sinks.Batch.StatusCode]); 0 when there was none (no response, a broker).
	StatusCode int
	// Decisions holds the decision per event, in order: the zero Decision for a delivered
	// event, else the retry decision or how the delivery ended.
	Decisions []retry.Decision
	// Probe is set when the attempt was the probe sent after a probation ended (SPEC §2.2).
	Probe bool
	// NoAttempt is set when the record describes events that ended without an attempt.
	NoAttempt bool
	// PublishTimes holds, per event, when it was published (accepted into the journal).
	PublishTimes []time.Time
	// Detail is what the sink said about a failed attempt (its error text, which names the
	// destination without secrets and the answer); empty for a delivered or NoAttempt record.
	Detail string
	// Pull is the step of a queue subscription's record; zero for a push subscription's.
	Pull PullStep
	// DeadLetterDropped is set on the record of dead letters the dead-letter actor dropped
	// unwritten (the router makes it; no subscription actor reports one): the events, which
	// had ended dead-lettered, end dropped. Attempts holds their delivery attempts, Time when
	// they were dropped, and Detail why.
	DeadLetterDropped bool
	// Until is, for a PullReceived or PullRenewed record, when the lock expires; for a
	// PullReleased one with a delay, when the events are available again (each no later than
	// its time to live); zero otherwise.
	Until time.Time
}

// PullStep is a step of an event's delivery on a queue subscription ([AttemptRecord.Pull]).
type PullStep uint8

// Pull steps.
const (
	// PullReceived: a consumer received the events and holds their locks.
	PullReceived PullStep = iota + 1
	// PullAcknowledged: the consumer acknowledged the events: delivered.
	PullAcknowledged
	// PullReleased: the consumer released the events: available again, at once or after a
	// delay, unless their delivery count reached maxDeliveryCount (they end).
	PullReleased
	// PullRejected: the consumer rejected the events: they end (RejectedBySubscriber).
	PullRejected
	// PullRenewed: the consumer renewed the events' locks.
	PullRenewed
	// PullLockExpired: the lock expired unsettled: the event is available again, unless its
	// delivery count reached maxDeliveryCount (it ends).
	PullLockExpired
	// PullEnded: the event ended without a consumer's step: its time to live passed while it
	// waited, it reached maxDeliveryCount as its release delay ended or as the queue started,
	// or it cannot be encoded.
	PullEnded
	// PullLockLost: the lock ended unsettled before it expired because the queue's actor
	// stopped (the subscription was updated or deleted, moved to another node, restarted after
	// a failure, or the server stopped): locks live in the actor's memory. The event is
	// available again once the subscription runs, its delivery count kept.
	PullLockLost
)

var pullSteps = [...]string{PullReceived: "Received", PullAcknowledged: "Acknowledged", PullReleased: "Released",
	PullRejected: "Rejected", PullRenewed: "LockRenewed", PullLockExpired: "LockExpired", PullEnded: "Ended",
	PullLockLost: "LockLost"}

// String returns the step's name as delivery histories show it ("Received", "LockRenewed", ...).
func (s PullStep) String() string {
	if int(s) < len(pullSteps) && s > 0 {
		return pullSteps[s]
	}
	return fmt.Sprintf("PullStep(%d)", s)
}

// attemptDone is the result of one sink call, sent by the goroutine that ran it.
type attemptDone struct {
	id       uint64 // batch id
	err      error
	status   int // the status of a success (sinks.Batch.StatusCode); a failure's is in err
	panicked any
	duration time.Duration
}

// wake is sent by the retry/probation timer.
type wake struct{ gen uint64 }

// journalRead is the result of a catch-up read of the journal, sent by the goroutine that ran
// it.
type journalRead struct {
	id      uint64
	from    uint64
	entries []store.Entry
	err     error
}

// stateLoaded is the subscription's stored state, read off the mailbox when the actor starts
// by the goroutine that sends it.
type stateLoaded struct {
	id    uint64
	state store.SubscriptionState // parked events without their bodies
	head  uint64                  // the journal's last seq, read after the state
	err   error
}

// parkedRead is the result of reading the bodies of parked events that came due, sent by the
// goroutine that ran it.
type parkedRead struct {
	id     uint64
	parked []store.Parked
	err    error
}

// The results an actor's goroutines and timers send it may reach it once it has stopped: its
// stop work lets them run out after its Terminated (stopwork.go), and a stopped actor's
// mailbox is gone. They are dropped as any message to a stopped actor, without protoactor's
// dead-letter log entry ([actor.IgnoreDeadLetterLogging]): nothing is amiss.

func (*attemptDone) IgnoreDeadLetterLogging()    {}
func (*wake) IgnoreDeadLetterLogging()           {}
func (*journalRead) IgnoreDeadLetterLogging()    {}
func (*stateLoaded) IgnoreDeadLetterLogging()    {}
func (*parkedRead) IgnoreDeadLetterLogging()     {}
func (*slowLoad) IgnoreDeadLetterLogging()       {}
func (*receiveTimeout) IgnoreDeadLetterLogging() {}
