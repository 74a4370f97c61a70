package actors

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotQueue answers a [ReceiveEvents] or [SettleEvents] sent to a push subscription.
var ErrNotQueue = errors.New("the event subscription delivers by push, not from a queue")

// ErrNotRunning answers a request a topic actor forwards to one of its subscriptions' actors
// (a status, a pull request) when it runs no actor of that name: the subscription was just
// deleted, or, in cluster mode, its placement names this node a moment before the topic
// actor has started it there. It also answers the status requests and EndProbations a
// subscription or queue actor kept for its state load when it stops or restarts before the
// load is in.
var ErrNotRunning = errors.New("the event subscription's actor is not running")

// This file holds the messages of queue subscription actors (pull delivery,
// eventgrid-behaviour.md §9). The router sends them to the topic actor, which forwards them to
// the subscription's actor; the answer goes to the sender.

// ReceiveEvents asks a queue subscription actor for up to MaxEvents events, waiting up to
// MaxWait for the first one (a long poll). The answer is a *[ReceivedEvents], sent as soon as
// at least one event is locked for the caller and its receipt is durable, or with no events
// once MaxWait has passed. Asked of a push subscription, the answer is [ErrNotQueue].
//
// MaxBytes, when above 0, bounds the size of the answer as the caller passes it on (in
// cluster mode a receive routed from another node goes back in one NATS message, which
// cannot pass the connection's max_payload): each event counts the length of its Event and
// LockToken plus EventBytes, and the actor stops adding events once the next one would take
// the sum past MaxBytes. It always hands out at least one event when one is available; when
// the next event alone is over MaxBytes the answer is an *[EventTooLargeError] instead, and
// that event stays available, neither locked nor counted as a delivery. 0 sets no bound.
type ReceiveEvents struct {
	Subscription string
	// ID names the request, so that a [CancelReceive] can withdraw it.
	ID        uint64
	MaxEvents int
	MaxWait   time.Duration
	// MaxBytes bounds the answer's size (0: no bound); EventBytes is what the caller's
	// encoding adds to each event besides its Event and LockToken.
	MaxBytes, EventBytes int
	// Claim, when set, is the caller's claim on the answer's share of the router's
	// [AnswerBudget]: a caller that stops waiting without the answer (its future timed out,
	// it went away) drops it ([AnswerClaim.Drop]), and the share is given back whenever the
	// answer is made, though the answer itself reaches nobody.
	Claim *AnswerClaim
}

// EventTooLargeError answers a [ReceiveEvents] whose MaxBytes the next event to hand out does
// not fit in alone. Nothing was locked or counted: the event stays available to receives
// without that bound (in cluster mode, those made on the node running the subscription).
type EventTooLargeError struct {
	// Size is the event's size as MaxBytes counts it; MaxBytes is the receive's bound.
	Size, MaxBytes int
}

func (e *EventTooLargeError) Error() string {
	return fmt.Sprintf("the next event is %d bytes with its lock token, over the %d bytes the answer may hold; it was not handed out (nor counted as a delivery)", e.Size, e.MaxBytes)
}

// CancelReceive withdraws a waiting [ReceiveEvents] (its caller gave up). Nothing answers it.
type CancelReceive struct {
	Subscription string
	ID           uint64
}

// ReceivedEvents answers a [ReceiveEvents].
type ReceivedEvents struct {
	Events []LockedEvent
	// Hold is the events' share of the router's [AnswerBudget] (nil without one): whoever
	// gets the answer releases it once the answer is written to its consumer, or will not be
	// ([AnswerHold.Release]); until then the queue hands out no events the budget cannot
	// cover. An answer nobody gets (it came after its caller stopped waiting) is released
	// through the receive's [ReceiveEvents.Claim].
	Hold *AnswerHold
}

// Release gives back the answer's share of the budget; nil-safe, and only the first call
// counts.
func (r *ReceivedEvents) Release() {
	if r != nil {
		r.Hold.Release()
	}
}

// LockedEvent is one event handed to a consumer, locked until it is settled or the lock
// expires.
type LockedEvent struct {
	LockToken     string
	DeliveryCount int
	// Event is the event as a structured CloudEvent (JSON). It may be the event's own bytes,
	// which the queue and other subscriptions share: read it, never change it.
	Event []byte
}

// SettleOp is what a [SettleEvents] does to the locked events.
type SettleOp uint8

// Settle operations.
const (
	// Acknowledge deletes the events: they are delivered.
	Acknowledge SettleOp = iota + 1
	// Release makes them available again after [SettleEvents.Delay].
	Release
	// Reject dead-letters them (or drops them without a dead-letter destination).
	Reject
	// RenewLock extends their locks by the lock duration, within an hour of their receipt.
	RenewLock
)

// String names the operation as Event Grid's REST API does.
func (o SettleOp) String() string {
	switch o {
	case Acknowledge:
		return "acknowledge"
	case Release:
		return "release"
	case Reject:
		return "reject"
	case RenewLock:
		return "renewLock"
	}
	return fmt.Sprintf("SettleOp(%d)", uint8(o))
}

// SettleEvents applies Op to the events locked under LockTokens. The answer is a *[Settled],
// sent once the change is durable.
type SettleEvents struct {
	Subscription string
	Op           SettleOp
	LockTokens   []string
	// Delay is a Release's delay before the events are available again.
	Delay time.Duration
}

// Settled answers a [SettleEvents]: the tokens applied, and the others with Event Grid's code
// and message.
type Settled struct {
	Succeeded []string
	Failed    []FailedToken
}

// FailedToken is a lock token a [SettleEvents] could not apply.
type FailedToken struct {
	LockToken string
	// Code is TokenBad (malformed, or another subscription's) or TokenLost (expired, settled,
	// or issued before a restart).
	Code    string
	Message string
}

// Lock token failure codes (eventgrid-behaviour.md §9).
const (
	TokenBad  = "BadToken"
	TokenLost = "TokenLost"
)

// receiveTimeout is sent by a waiting receive's timer when its MaxWait has passed.
type receiveTimeout struct{ id uint64 }
