package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/store"
)

// clusterAdmin is a request routed to the node running a subscription: an admin call
// (status, endProbation) or a pull call (receive, settle).
type clusterAdmin struct {
	Op           string `json:"op"` // "status", "endProbation", "receive" or "settle"
	Topic        string `json:"topic"`
	Subscription string `json:"subscription"`
	// receive
	MaxEvents int           `json:"maxEvents,omitempty"`
	MaxWait   time.Duration `json:"maxWait,omitempty"`
	// settle
	Settle     actors.SettleOp `json:"settle,omitempty"`
	LockTokens []string        `json:"lockTokens,omitempty"`
	Delay      time.Duration   `json:"delay,omitempty"`
}

type clusterAnswer struct {
	Status  *Status         `json:"status,omitempty"`
	Events  []ReceivedEvent `json:"events,omitempty"`
	Settled *SettleResult   `json:"settled,omitempty"`
	Err     string          `json:"err,omitempty"`
	// Kind names the sentinel Err wraps, so the caller's node answers as the owner would.
	Kind string `json:"kind,omitempty"`
	// NotHere is set when this node does not run the subscription (it moved meanwhile).
	NotHere bool `json:"notHere,omitempty"`
}

// errKinds are the sentinels an answer's Kind carries between nodes, the first that matches
// (moved before notRunning: a fenced write's answer wraps both).
var errKinds = []struct {
	kind string
	err  error
}{
	{"moved", ErrSubscriptionMoved},
	{"notRunning", actors.ErrNotRunning},
	{"loading", ErrSubscriptionLoading},
	{"notQueue", ErrNotQueueSubscription},
	{"subNotFound", ErrSubscriptionNotFound},
	{"topicNotFound", ErrTopicNotFound},
	{"closed", ErrClosed},
	{"diskFull", store.ErrDiskFull}, // before storage and unavailable: it matches both
	{"storage", ErrInsufficientStorage},
	{"damaged", ErrStoreDamaged}, // before unavailable: an owner's store damage is no outage
	{"unavailable", ErrUnavailable},
	{"polls", ErrTooManyPolls},
	{"canceled", context.Canceled},
	{"deadline", context.DeadlineExceeded},
}

func (a *clusterAnswer) setErr(err error) {
	a.Err = err.Error()
	for _, k := range errKinds {
		if errors.Is(err, k.err) {
			a.Kind = k.kind
			return
		}
	}
}

// err is the owner's error as this node returns it: wrapping the same sentinel. An owner
// shutting down is a subscription about to move, and an owner whose topic actor does not run
// the subscription's actor at the moment (the placement names a node a moment before it runs
// it there; its actor restarts after a failed state write) is one about to run: both are
// [ErrNotPlaced], to try again; the latter also wraps [ErrSubscriptionNotRunning], and an
// owner whose state write was fenced (another node took the subscription over)
// [ErrSubscriptionMoved] with it, so a pull call routed to the owner is answered as one
// that reached it is (503 with Retry-After, "not running here" or "moved").
func (a *clusterAnswer) err(holder string) error {
	for _, k := range errKinds {
		if a.Kind == k.kind {
			switch k.err {
			case ErrTooManyPolls:
				reason := strings.TrimPrefix(a.Err, ErrTooManyPolls.Error()+": ")
				return fmt.Errorf("%w on node %s, which runs the event subscription: %s", ErrTooManyPolls, holder, reason)
			case ErrClosed:
				return fmt.Errorf("node %s is shutting down: %w", holder, ErrNotPlaced)
			case ErrSubscriptionMoved:
				return fmt.Errorf("node %s: %s: %w (%w, %w)", holder, a.Err, ErrSubscriptionNotRunning, ErrSubscriptionMoved, ErrNotPlaced)
			case actors.ErrNotRunning:
				return fmt.Errorf("node %s does not run the event subscription at the moment (it is starting or restarting it): %s: %w (%w)", holder, a.Err, ErrNotPlaced, ErrSubscriptionNotRunning)
			case store.ErrDiskFull:
				// As on the owner, where the router wraps the store's refusal.
				return fmt.Errorf("node %s: %s: %w: %w", holder, a.Err, ErrUnavailable, store.ErrDiskFull)
			}
			return fmt.Errorf("node %s: %s: %w", holder, a.Err, k.err)
		}
	}
	return fmt.Errorf("node %s: %s", holder, a.Err)
}

// admin answers a request another node routed here ([cluster.Hooks.Admin]). The answer of a
// receive that handed out events comes with unsent, which the node calls should the answer
// not reach the caller: it releases the events at once, so they are not left locked for
// nobody until their locks expire, and answers the caller with an error instead.
func (c *clusterRuntime) admin(ctx context.Context, req []byte) (answer []byte, unsent func(error) []byte) {
	var q clusterAdmin
	var a clusterAnswer
	if err := json.Unmarshal(req, &q); err != nil {
		a.Err = err.Error()
	} else if !c.node.Running(cluster.Key{Topic: q.Topic, Subscription: q.Subscription}) {
		a.NotHere = true
	} else {
		var err error
		switch q.Op {
		case "receive":
			var hold *actors.AnswerHold
			a.Events, hold, err = c.receiveRouted(ctx, q)
			// The answer below is a copy: the events are free once it is encoded.
			defer hold.Release()
		case "settle":
			var res SettleResult
			if res, err = c.r.settleLocal(ctx, q.Topic, q.Subscription, q.Settle, q.LockTokens, q.Delay); err == nil {
				a.Settled = &res
			}
		case "endProbation":
			a.Status, err = c.r.askLocal(ctx, q.Topic, q.Subscription, func(name string) any { return &actors.EndProbation{Subscription: name} })
		default:
			a.Status, err = c.r.askLocal(ctx, q.Topic, q.Subscription, func(name string) any { return &actors.GetStatus{Subscription: name} })
		}
		if err != nil {
			a.setErr(err)
		}
	}
	if len(a.Events) > 0 {
		unsent = func(err error) []byte { return c.unsentReceive(q, a.Events, err) }
	}
	b, err := encodeAnswer(&a)
	if err != nil { // an event that is not JSON: the router stores none
		if unsent != nil {
			return unsent(fmt.Errorf("encoding the answer: %w", err)), nil
		}
		b, _ = encodeAnswer(&clusterAnswer{Err: fmt.Sprintf("encoding the answer: %v", err)})
	}
	return b, unsent
}

// unsentReceive releases the events of a routed receive whose answer could not be sent back
// (err), as [Router.releaseUnclaimed] releases those of a local receive whose caller went
// away, and returns the error answer to send instead.
func (c *clusterRuntime) unsentReceive(q clusterAdmin, evs []ReceivedEvent, err error) []byte {
	tokens := make([]string, len(evs))
	for i, e := range evs {
		tokens[i] = e.LockToken
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultSettleDeadline)
	defer cancel()
	what := "they were released: receive again"
	if _, rerr := c.r.settleLocal(ctx, q.Topic, q.Subscription, actors.Release, tokens, 0); rerr != nil {
		c.r.log.Warn("releasing the events of a routed receive whose answer could not be sent; they come back when their locks expire", logattr.Topic, q.Topic, logattr.Subscription, q.Subscription, "err", rerr)
		what = "they come back when their locks expire"
	}
	b, _ := encodeAnswer(&clusterAnswer{Err: fmt.Sprintf("node %s could not send back its answer of %d events: %v; %s", c.node.Name(), len(evs), err, what)})
	return b
}

// encodeAnswer encodes a as JSON without escaping <, > and & (json.Marshal writes each as six
// bytes, in the events' bodies too), so the answer of a routed receive is no larger than its
// events' bodies and lock tokens plus the framing [answerBytes] and [answerEventBytes] count.
func encodeAnswer(a *clusterAnswer) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(a); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// answerBytes is the framing of a routed receive's answer ([clusterAnswer] with its events),
// and answerEventBytes what it adds to each event besides its body and lock token (field
// names, the delivery count, a comma): the byte bound of a routed receive is the NATS
// max_payload less answerBytes, each event counting answerEventBytes more.
var answerBytes, answerEventBytes = answerOverhead()

func answerOverhead() (answer, event int) {
	ev := ReceivedEvent{DeliveryCount: math.MaxInt, Event: json.RawMessage("0")} // empty token
	one, _ := encodeAnswer(&clusterAnswer{Events: []ReceivedEvent{ev}})
	two, _ := encodeAnswer(&clusterAnswer{Events: []ReceivedEvent{ev, ev}})
	event = len(two) - len(one) - len(ev.Event) // its fields and a comma
	return len(one) - len(ev.Event) - event + 1, event
}

// receiveBound is the byte bound of a receive's answer (actors.ReceiveEvents.MaxBytes and
// EventBytes); the zero value sets none.
type receiveBound struct{ maxBytes, eventBytes int }

// routedReceiveBound is the bound of a receive routed here: its answer, one NATS message,
// fits in the connection's max_payload.
func (c *clusterRuntime) routedReceiveBound() receiveBound {
	mp := c.node.MaxPayload()
	if mp <= 0 {
		return receiveBound{} // not connected: the answer cannot be sent anyway (unsent)
	}
	return receiveBound{maxBytes: max(int(mp)-answerBytes, 1), eventBytes: answerEventBytes}
}

// receiveRouted is a receive another node routed here: it waits here (a goroutine, a waiter,
// its answer in memory) as a poll that reached this node does, so it takes a slot of this
// node's bound on polls first ([Router.AdmitRoutedPolls]); without one it is refused at once
// with the reason as the error's text (Kind "polls"), which the node it reached answers 429.
// Its answer goes back in one NATS message: it holds the events that fit in the
// connection's max_payload ([clusterRuntime.routedReceiveBound]), at least one, and when
// the next event alone does not fit it is refused, saying so, without locking it.
func (c *clusterRuntime) receiveRouted(ctx context.Context, q clusterAdmin) ([]ReceivedEvent, *actors.AnswerHold, error) {
	release, err := c.r.admitRoutedPoll(q.Topic, q.Subscription)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s", ErrTooManyPolls, err.Error())
	}
	if release != nil {
		defer release()
	}
	evs, hold, err := c.r.receiveLocal(ctx, q.Topic, q.Subscription, ReceiveOptions{MaxEvents: q.MaxEvents, MaxWait: q.MaxWait}, c.routedReceiveBound())
	if tooLarge := (*actors.EventTooLargeError)(nil); errors.As(err, &tooLarge) {
		return nil, hold, fmt.Errorf("%w; the answer goes back to the node the receive reached in one NATS message of at most %d bytes (the NATS servers' max_payload): receive through node %s, which runs the event subscription, or give the NATS servers max_payload: 4MB", err, c.node.MaxPayload(), c.node.Name())
	}
	return evs, hold, err
}

// ErrNotPlaced is returned by calls about a subscription whose actor runs on no node at the
// moment (it is moving, or no node could start it): try again in a few seconds. It wraps
// [ErrUnavailable], so the admin API answers it 503 with Retry-After.
var ErrNotPlaced = fmt.Errorf("the event subscription is not running on any cluster node at the moment (it is moving to another node); try again in a few seconds: %w", ErrUnavailable)

// ask sends q to the node running its subscription (topic and name as created) and returns
// its answer. ctx bounds the wait, and the owner's handling (see [cluster.Node.Request]).
func (c *clusterRuntime) ask(ctx context.Context, q clusterAdmin) (*clusterAnswer, error) {
	holder, err := c.node.Holder(ctx, cluster.Key{Topic: q.Topic, Subscription: q.Subscription})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if holder == "" {
		return nil, ErrNotPlaced
	}
	req, _ := json.Marshal(q)
	raw, err := c.node.Request(ctx, holder, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", ErrNotPlaced, err)
	}
	var a clusterAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("asking node %s: %w", holder, err)
	}
	switch {
	case a.NotHere:
		return nil, ErrNotPlaced
	case a.Err != "":
		return nil, a.err(holder)
	}
	return &a, nil
}

// askOwner asks the node running a subscription for its status (op "status" or
// "endProbation").
func (c *clusterRuntime) askOwner(ctx context.Context, op, topic, name string) (*Status, error) {
	a, err := c.ask(ctx, clusterAdmin{Op: op, Topic: topic, Subscription: name})
	if err != nil {
		return nil, err
	}
	return a.Status, nil
}
