package router

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ErrNotQueueSubscription is returned by the pull operations ([Router.Receive],
// [Router.Acknowledge], [Router.Release], [Router.Reject], [Router.RenewLock]) on an event
// subscription whose deliveryConfiguration.deliveryMode is not Queue. The HTTP layer answers it
// 400.
var ErrNotQueueSubscription = errors.New("event subscription is not a queue subscription: receive and settle need deliveryConfiguration.deliveryMode Queue")

// ReceiveOptions bound one [Router.Receive] call (eventgrid-behaviour.md §9).
type ReceiveOptions struct {
	// MaxEvents is the most events to return, 1..100; 0 means 1.
	MaxEvents int
	// MaxWait is how long to wait for a first event, 10s..120s; 0 means 60s.
	MaxWait time.Duration
}

// ReceivedEvent is one event handed out by [Router.Receive], locked until it is settled or its
// lock expires.
type ReceivedEvent struct {
	// LockToken settles the event; it is opaque.
	LockToken string
	// DeliveryCount is how many times the event has been received, this time included.
	DeliveryCount int
	// Event is the CloudEvent (structured JSON) as Azure returns it.
	Event json.RawMessage
}

// FailedLockToken is a lock token a settle operation could not apply, with Event Grid's error
// code ("BadToken": malformed or not this subscription's; "TokenLost": expired or already
// settled) and message.
type FailedLockToken struct{ LockToken, Code, Message string }

// Lock token error codes of [FailedLockToken].
const (
	CodeBadToken  = "BadToken"
	CodeTokenLost = "TokenLost"
)

// SettleResult is the answer of a settle operation: the tokens it applied to and those it could
// not.
type SettleResult struct {
	Succeeded []string
	Failed    []FailedLockToken
}

var errPullNotImplemented = errors.New("pull delivery is not implemented yet")

// Receive long-polls a queue subscription: it answers as soon as at least one event is
// available (up to o.MaxEvents), or with none after o.MaxWait; a cancelled ctx ends it early.
// Received events are locked for the subscription's receiveLockDurationInSeconds.
func (r *Router) Receive(ctx context.Context, topic, sub string, o ReceiveOptions) ([]ReceivedEvent, error) {
	return nil, errPullNotImplemented
}

// Acknowledge deletes the locked events: they are delivered.
func (r *Router) Acknowledge(ctx context.Context, topic, sub string, lockTokens []string) (SettleResult, error) {
	return SettleResult{}, errPullNotImplemented
}

// Release makes the locked events available again after delay (0, 10s, 1m, 10m or 1h).
func (r *Router) Release(ctx context.Context, topic, sub string, lockTokens []string, delay time.Duration) (SettleResult, error) {
	return SettleResult{}, errPullNotImplemented
}

// Reject dead-letters the locked events at once (or drops them without a dead-letter
// destination).
func (r *Router) Reject(ctx context.Context, topic, sub string, lockTokens []string) (SettleResult, error) {
	return SettleResult{}, errPullNotImplemented
}

// RenewLock extends the locks of the events by the lock duration, within one hour of their
// first receipt.
func (r *Router) RenewLock(ctx context.Context, topic, sub string, lockTokens []string) (SettleResult, error) {
	return SettleResult{}, errPullNotImplemented
}
