package actors

import (
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// Appended tells a topic actor that entries were appended to its journal. The router sends
// Appended messages for one topic in sequence order with no gaps.
type Appended struct {
	Entries []store.Entry
}

// Deliver hands a subscription actor the journal entries that match its filter. Through is the
// sequence number of the last journal entry the topic actor has looked at (matching or not), so
// the subscription can advance its cursor past entries that did not match.
type Deliver struct {
	Entries []store.Entry
	Through uint64
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
// it) for its delivery state; the answer is a *[Status].
type GetStatus struct {
	Subscription string
}

// EndProbation asks a subscription actor (through its topic actor) to end its probation now.
// The answer is a *[Status].
type EndProbation struct {
	Subscription string
}

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
}

// ProbationStatus describes an endpoint's probation.
type ProbationStatus struct {
	Active bool
	Until  time.Time
	Cause  schemas.Outcome // zero when not on probation
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

// AttemptRecord describes one finished attempt; [SubscriptionConfig.OnAttempt] receives it.
// It is what delivery timelines and `egrid explain` are built from.
type AttemptRecord struct {
	Topic, Subscription string
	EventIDs            []string
	Time                time.Time // when the attempt started
	Duration            time.Duration
	Outcome             schemas.Outcome
	StatusCode          int
	// Decision per event, in order: Delivered, or the retry decision.
	Decisions []retry.Decision
}

// attemptDone is the result of one sink call, sent by the goroutine that ran it.
type attemptDone struct {
	id       uint64 // batch id
	err      error
	panicked any
	duration time.Duration
}

// wake is sent by the retry/probation timer.
type wake struct{ gen uint64 }
