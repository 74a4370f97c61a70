package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/store"
)

// This file is pull delivery (eventgrid-behaviour.md §9): consumers of a namespace topic's queue
// subscription (deliveryConfiguration.deliveryMode Queue) long-poll it for events and settle
// each by its lock token. The subscription's actor (actors.QueueProps) owns the events, locks
// and delivery counts; these methods check their arguments, ask it, and wait.

// ErrNotQueueSubscription is returned by the pull operations ([Router.Receive],
// [Router.Acknowledge], [Router.Release], [Router.Reject], [Router.RenewLock]) on an event
// subscription whose deliveryConfiguration.deliveryMode is not Queue. The HTTP layer answers it
// 400.
var ErrNotQueueSubscription = errors.New("event subscription is not a queue subscription: receive and settle need deliveryConfiguration.deliveryMode Queue")

// ErrSubscriptionMoved is wrapped, with [ErrSubscriptionNotRunning], by the error of a
// receive or settle on this node whose state write the store fenced: another cluster node
// took the queue subscription over, nothing of the operation was recorded, and made again it
// reaches that node. The HTTP layer answers it 503 with Retry-After, as it answers
// ErrSubscriptionNotRunning. It is [store.ErrFenced].
var ErrSubscriptionMoved = store.ErrFenced

// ErrTooManyPolls is returned by [Router.Receive] in cluster mode when the node running the
// queue subscription refused the long poll routed to it: it has as many polls waiting as its
// bound allows ([Router.AdmitRoutedPolls]). The HTTP layer answers it 429 with Retry-After,
// as a poll over the bound of the node it reached.
var ErrTooManyPolls = errors.New("too many receive long polls waiting")

// AdmitRoutedPolls bounds, in cluster mode, the :receive long polls other nodes route to this
// one (the node running the queue subscription; see README "Cluster mode"): take takes a
// slot for a poll about to wait on queue ("topic/subscription", names as created) and returns
// its release, or an error saying why there is none (its text reaches the consumer). A poll
// without a slot is answered at once with [ErrTooManyPolls] on the node it reached. Each
// waiting poll holds a goroutine, a waiter and up to its answer's events in memory here,
// whichever node it reached, so a server gives the same bound as its own polls'
// (httpserver.PollLimit.Take, whose limit they share): a poll routed here takes a slot on
// both nodes. Without it the routed polls are not bounded. Safe to call at any time.
func (r *Router) AdmitRoutedPolls(take func(queue string) (release func(), err error)) {
	r.routedPolls.Store(&take)
}

// admitRoutedPoll takes a slot for a poll routed here on topic/sub, when AdmitRoutedPolls set a
// bound: release (nil without one) frees it.
func (r *Router) admitRoutedPoll(topic, sub string) (release func(), err error) {
	take := r.routedPolls.Load()
	if take == nil {
		return nil, nil
	}
	return (*take)(topic + "/" + sub)
}

// Bounds of the pull operations (eventgrid-behaviour.md §9).
const (
	MaxReceiveEvents      = 100
	DefaultReceiveWait    = 60 * time.Second
	MinReceiveWait        = 10 * time.Second
	MaxReceiveWait        = 120 * time.Second
	MaxLockTokens         = 100
	MaxLockRenewal        = actors.MaxLockRenewal
	receiveAnswerMargin   = 30 * time.Second // beyond MaxWait, for the receipt's synced write
	defaultSettleDeadline = 30 * time.Second
)

// ReleaseDelays are the release delays Event Grid accepts (releaseDelayInSeconds).
var ReleaseDelays = []time.Duration{0, 10 * time.Second, time.Minute, 10 * time.Minute, time.Hour}

// ReceiveOptions bound one [Router.Receive] call (eventgrid-behaviour.md §9).
type ReceiveOptions struct {
	// MaxEvents is the most events to return, 1..100; 0 means 1.
	MaxEvents int
	// MaxWait is how long to wait for a first event, 10s..120s; 0 means 60s.
	MaxWait time.Duration
}

// withDefaults checks o and fills in the defaults.
func (o ReceiveOptions) withDefaults() (ReceiveOptions, error) {
	var errs []error
	switch {
	case o.MaxEvents == 0:
		o.MaxEvents = 1
	case o.MaxEvents < 1 || o.MaxEvents > MaxReceiveEvents:
		errs = append(errs, fmt.Errorf("maxEvents %d is out of range: use 1-%d (default 1)", o.MaxEvents, MaxReceiveEvents))
	}
	switch {
	case o.MaxWait == 0:
		o.MaxWait = DefaultReceiveWait
	case o.MaxWait < MinReceiveWait || o.MaxWait > MaxReceiveWait:
		errs = append(errs, fmt.Errorf("maxWaitTime %v is out of range: use 10-120 seconds (default 60)", o.MaxWait))
	}
	return o, errors.Join(errs...)
}

// ReceivedEvent is one event handed out by [Router.Receive], locked until it is settled or its
// lock expires.
type ReceivedEvent struct {
	// LockToken settles the event; it is opaque.
	LockToken string
	// DeliveryCount is how many times the event has been received, this time included.
	DeliveryCount int
	// Event is the CloudEvent (structured JSON) as Azure returns it. It is the router's own
	// copy of the event, shared with the subscription that holds it, not a copy made for
	// the answer (an answer of 100 events of 1 MB costs no second 100 MB): read it, never
	// change it; copy it to keep a changed version.
	Event json.RawMessage
}

// FailedLockToken is a lock token a settle operation could not apply, with Event Grid's error
// code ([CodeBadToken]: malformed or not this subscription's; [CodeTokenLost]: expired,
// already settled, or handed out before a restart) and message.
type FailedLockToken struct{ LockToken, Code, Message string }

// Lock token error codes of [FailedLockToken].
const (
	CodeBadToken  = actors.TokenBad
	CodeTokenLost = actors.TokenLost
)

// SettleResult is the answer of a settle operation: the tokens it applied to and those it could
// not. Event Grid answers 200 with it even when every token failed.
type SettleResult struct {
	Succeeded []string
	Failed    []FailedLockToken
}

var receiveIDs atomic.Uint64

// queueTarget finds a queue subscription, with its name as created. In cluster mode its
// actor may run on another node ([Router.queueRemote]), and one created on another node a
// moment ago is looked up in the store (subscriptionFresh).
func (r *Router) queueTarget(ctx context.Context, topic, sub string) (*topicRuntime, string, error) {
	t, spec, name, err := r.subscriptionFresh(ctx, topic, sub)
	if err != nil {
		return nil, "", err
	}
	if !spec.IsQueue() {
		return nil, "", fmt.Errorf("event subscription %q of topic %q: %w", name, t.name, ErrNotQueueSubscription)
	}
	return t, name, nil
}

// Receive long-polls a queue subscription: it answers as soon as at least one event is
// available (up to o.MaxEvents), or with none after o.MaxWait. Each event is locked for the
// subscription's receiveLockDurationInSeconds and its receipt (with its delivery count) is
// durable before Receive returns it. A cancelled ctx ends the wait early with ctx's error;
// events handed out at that very moment are released at once (their next receipt counts one
// more delivery, as after a lock expiry).
//
// In cluster mode any node answers: when another node runs the subscription's actor, the call
// goes there over NATS request/reply, bounded by ctx (and MaxWait plus a margin); when ctx
// ends first the owner is told at once and stops waiting, as a local caller's cancel does.
// Events the owner handed out in the instant before the cancel reached it (its answer
// crossed the cancel notice) stay locked until their lock expires. The owner's answer is one
// NATS message: it holds the events that fit in the owner's max_payload, at least one (fewer
// than o.MaxEvents, possibly), and when the next event alone does not fit the call fails at
// once without locking it. An answer the owner could not send is logged there, its events
// are released, and the call fails at once.
//
// The events count against the router's bound on receive answers held at once
// ([Config.MaxReceiveAnswerBytes]) only until Receive returns; [Router.ReceiveHeld] keeps them
// counted until the caller has passed them on.
func (r *Router) Receive(ctx context.Context, topic, sub string, o ReceiveOptions) ([]ReceivedEvent, error) {
	evs, done, err := r.ReceiveHeld(ctx, topic, sub, o)
	done()
	return evs, err
}

// ReceiveHeld is [Router.Receive] for a caller that holds the events until it has passed them
// on, as the HTTP API does while its consumer reads the answer: they count against the
// router's bound on receive answers held at once ([Config.MaxReceiveAnswerBytes]) until done
// is called. Call done once on every path, when the answer is written or will not be (the
// write failed or timed out, the consumer went away); it is never nil, and calls after the
// first do nothing. While the bound is reached, receives get the events that fit, or wait for
// answers to be done; one event is handed out whatever its size when no other answer is held.
// In cluster mode the answer another node sent is counted here as it arrives.
func (r *Router) ReceiveHeld(ctx context.Context, topic, sub string, o ReceiveOptions) (evs []ReceivedEvent, done func(), err error) {
	o, err = o.withDefaults()
	if err != nil {
		return nil, noHold, err
	}
	t, name, err := r.queueTarget(ctx, topic, sub)
	if err != nil {
		return nil, noHold, err
	}
	if r.queueRemote(t.name, name) {
		ctx, cancel := context.WithTimeout(ctx, o.MaxWait+receiveAnswerMargin)
		defer cancel()
		a, err := r.cl.ask(ctx, clusterAdmin{Op: "receive", Topic: t.name, Subscription: name, MaxEvents: o.MaxEvents, MaxWait: o.MaxWait})
		if err != nil {
			return nil, noHold, remoteError("receiving from", name, err)
		}
		// The answer is a copy, in memory here until it is passed on: it is counted, though
		// the owner handed it out against its own bound.
		var n int64
		for _, e := range a.Events {
			n += int64(len(e.Event))
		}
		return a.Events, r.answers.Hold(n).Release, nil
	}
	evs, hold, err := r.receiveAt(ctx, t, name, o, receiveBound{})
	return evs, hold.Release, err
}

// ReceiveAnswerBytes reports the bytes of receive answers held at once now and the bound on
// them ([Config.MaxReceiveAnswerBytes]): events handed out whose answers are not passed on
// yet ([Router.ReceiveHeld]).
func (r *Router) ReceiveAnswerBytes() (held, limit int64) {
	return r.answers.Held(), r.answers.Limit()
}

// noHold is the done of a receive that holds nothing.
func noHold() {}

// remoteError leaves the errors of a call routed to another node as they are (they wrap the
// router's sentinels, or ctx's error) and names the subscription.
func remoteError(what, name string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%s event subscription %q: %w", what, name, err)
}

// receiveLocal is Receive on this node's actor of a queue subscription (a call another node
// routed here), its answer within bound
// (see receiveAt for the hold).
func (r *Router) receiveLocal(ctx context.Context, topic, sub string, o ReceiveOptions, bound receiveBound) ([]ReceivedEvent, *actors.AnswerHold, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	t, name, err := r.queueTarget(ctx, topic, sub)
	if err != nil {
		return nil, nil, err
	}
	return r.receiveAt(ctx, t, name, o, bound)
}

// receiveAt asks t's actor of queue subscription name for events, its answer within bound
// (see actors.ReceiveEvents.MaxBytes). The events' share of the answer budget comes with
// them: the caller releases it once they are passed on (nil when there is none; a nil hold's
// Release does nothing).
func (r *Router) receiveAt(ctx context.Context, t *topicRuntime, name string, o ReceiveOptions, bound receiveBound) ([]ReceivedEvent, *actors.AnswerHold, error) {
	id := receiveIDs.Add(1)
	// The claim gives the answer's budget share back should the answer come after this
	// stops waiting for it (its receipt's synced write outlasting the future): protoactor
	// drops a late answer in dead letters, and its hold with it.
	claim := new(actors.AnswerClaim)
	req := &actors.ReceiveEvents{Subscription: name, ID: id, MaxEvents: o.MaxEvents, MaxWait: o.MaxWait, MaxBytes: bound.maxBytes, EventBytes: bound.eventBytes, Claim: claim}
	f := r.system.Root.RequestFuture(t.pid, req, o.MaxWait+receiveAnswerMargin)
	ch := make(chan receiveAnswer, 1)
	go func() { // ends when the actor answers: at MaxWait at the latest, or at once on cancel
		v, err := f.Result()
		ch <- receiveAnswer{v, err}
	}()
	var a receiveAnswer
	select {
	case a = <-ch:
	case <-ctx.Done():
		r.system.Root.Send(t.pid, &actors.CancelReceive{Subscription: name, ID: id})
		go r.releaseUnclaimed(t, name, claim, ch)
		return nil, nil, ctx.Err()
	}
	if a.err != nil {
		claim.Drop() // an answer made later is nobody's
		return nil, nil, fmt.Errorf("receiving from event subscription %q: %w: %w", name, ErrUnavailable, a.err)
	}
	switch v := a.v.(type) {
	case *actors.ReceivedEvents:
		out := make([]ReceivedEvent, len(v.Events))
		for i, e := range v.Events {
			out[i] = ReceivedEvent{LockToken: e.LockToken, DeliveryCount: e.DeliveryCount, Event: e.Event}
		}
		return out, v.Hold, nil
	case error:
		return nil, nil, queueError(name, v)
	}
	return nil, nil, fmt.Errorf("receiving from event subscription %q: unexpected answer %T", name, a.v)
}

// releaseUnclaimed waits for the answer of a receive whose caller went away and releases the
// events it holds, if the actor handed some out before the cancel reached it: nobody will
// settle them, so they are available again at once rather than after their lock. The
// answer's budget share is given back through claim, even when the answer comes after the
// wait for it timed out.
func (r *Router) releaseUnclaimed(t *topicRuntime, name string, claim *actors.AnswerClaim, ch <-chan receiveAnswer) {
	a := <-ch
	claim.Drop()
	v, ok := a.v.(*actors.ReceivedEvents)
	if a.err != nil || !ok || len(v.Events) == 0 {
		return
	}
	v.Release() // nobody reads them: their bytes are free once this drops them
	tokens := make([]string, len(v.Events))
	for i, e := range v.Events {
		tokens[i] = e.LockToken
	}
	_, _ = r.system.Root.RequestFuture(t.pid, &actors.SettleEvents{Subscription: name, Op: actors.Release, LockTokens: tokens}, defaultSettleDeadline).Result()
}

// receiveAnswer is the queue actor's answer to a receive.
type receiveAnswer struct {
	v   any
	err error
}

// Acknowledge deletes the locked events: they are delivered. The acknowledgement is durable
// when Acknowledge returns.
func (r *Router) Acknowledge(ctx context.Context, topic, sub string, lockTokens []string) (SettleResult, error) {
	return r.settle(ctx, topic, sub, actors.Acknowledge, lockTokens, 0)
}

// Release makes the locked events available again after delay (0, 10s, 1m, 10m or 1h; an
// event whose time to live ends sooner ends then). Its next receipt counts one more delivery;
// an event received maxDeliveryCount times is dead-lettered instead.
func (r *Router) Release(ctx context.Context, topic, sub string, lockTokens []string, delay time.Duration) (SettleResult, error) {
	ok := false
	for _, d := range ReleaseDelays {
		ok = ok || d == delay
	}
	if !ok {
		return SettleResult{}, fmt.Errorf("releaseDelayInSeconds %v is not allowed: use 0, 10, 60, 600 or 3600 seconds", delay.Seconds())
	}
	return r.settle(ctx, topic, sub, actors.Release, lockTokens, delay)
}

// Reject dead-letters the locked events at once, with reason RejectedBySubscriber (or drops
// them, counted, without a dead-letter destination).
func (r *Router) Reject(ctx context.Context, topic, sub string, lockTokens []string) (SettleResult, error) {
	return r.settle(ctx, topic, sub, actors.Reject, lockTokens, 0)
}

// RenewLock extends the locks of the events by the lock duration from now. A lock is renewed
// only within one hour of the event's receipt ([MaxLockRenewal]); later the token fails with
// TokenLost.
func (r *Router) RenewLock(ctx context.Context, topic, sub string, lockTokens []string) (SettleResult, error) {
	return r.settle(ctx, topic, sub, actors.RenewLock, lockTokens, 0)
}

func (r *Router) settle(ctx context.Context, topic, sub string, op actors.SettleOp, tokens []string, delay time.Duration) (SettleResult, error) {
	switch {
	case len(tokens) == 0:
		return SettleResult{}, fmt.Errorf("lockTokens is empty: pass 1-%d lock tokens as receive returned them", MaxLockTokens)
	case len(tokens) > MaxLockTokens:
		return SettleResult{}, fmt.Errorf("lockTokens has %d tokens: pass at most %d per call", len(tokens), MaxLockTokens)
	}
	t, name, err := r.queueTarget(ctx, topic, sub)
	if err != nil {
		return SettleResult{}, err
	}
	if r.queueRemote(t.name, name) {
		// Locks live in the owner's memory: the tokens are settled there, whichever node
		// the call reached. Tokens of a previous owner fail there with TokenLost.
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, defaultSettleDeadline)
			defer cancel()
		}
		a, err := r.cl.ask(ctx, clusterAdmin{Op: "settle", Topic: t.name, Subscription: name, Settle: op, LockTokens: tokens, Delay: delay})
		if err != nil {
			return SettleResult{}, remoteError(fmt.Sprint(op)+" on", name, err)
		}
		if a.Settled == nil {
			return SettleResult{}, nil
		}
		return *a.Settled, nil
	}
	return r.settleAt(ctx, t, name, op, tokens, delay)
}

// settleLocal is a settle call on this node's actor of a queue subscription (a call another
// node routed here).
func (r *Router) settleLocal(ctx context.Context, topic, sub string, op actors.SettleOp, tokens []string, delay time.Duration) (SettleResult, error) {
	t, name, err := r.queueTarget(ctx, topic, sub)
	if err != nil {
		return SettleResult{}, err
	}
	return r.settleAt(ctx, t, name, op, tokens, delay)
}

func (r *Router) settleAt(ctx context.Context, t *topicRuntime, name string, op actors.SettleOp, tokens []string, delay time.Duration) (SettleResult, error) {
	timeout, err := requestTimeout(ctx, defaultSettleDeadline)
	if err != nil {
		return SettleResult{}, fmt.Errorf("%s on event subscription %q: %w", op, name, err)
	}
	v, err := r.system.Root.RequestFuture(t.pid, &actors.SettleEvents{Subscription: name, Op: op, LockTokens: tokens, Delay: delay}, timeout).Result()
	if err != nil {
		return SettleResult{}, fmt.Errorf("%s on event subscription %q: %w: %w", op, name, ErrUnavailable, err)
	}
	switch v := v.(type) {
	case *actors.Settled:
		res := SettleResult{Succeeded: v.Succeeded}
		for _, f := range v.Failed {
			res.Failed = append(res.Failed, FailedLockToken{LockToken: f.LockToken, Code: f.Code, Message: f.Message})
		}
		return res, nil
	case error:
		return SettleResult{}, queueError(name, v)
	}
	return SettleResult{}, fmt.Errorf("%s on event subscription %q: unexpected answer %T", op, name, v)
}

// requestTimeout is the timeout of a request to an actor made for a caller with ctx: the time
// left before ctx's deadline, or def without one. A deadline already past is an error
// wrapping context.DeadlineExceeded, and nothing should be sent: protoactor takes a negative
// timeout for none, and the call would wait for the actor's answer for ever — one that never
// comes when the write it waits for hangs or the actor restarts first. In cluster mode a call
// routed to the node running a subscription gets the caller's time left there, which may be
// gone by the time it runs.
func requestTimeout(ctx context.Context, def time.Duration) (time.Duration, error) {
	d, ok := ctx.Deadline()
	if !ok {
		return def, nil
	}
	if left := time.Until(d); left > 0 {
		return left, nil
	}
	return 0, context.DeadlineExceeded
}

// queueError maps an actor's refusal to the router's sentinels.
func queueError(name string, err error) error {
	if errors.Is(err, actors.ErrNotQueue) {
		return fmt.Errorf("event subscription %q: %w", name, ErrNotQueueSubscription)
	}
	return fmt.Errorf("event subscription %q: %w", name, err)
}
