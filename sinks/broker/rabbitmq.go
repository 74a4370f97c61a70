package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// rabbitMQPublisher publishes to queues through the default exchange in watermill-amqp's wire
// format (its DefaultMarshaler: persistent messages, the UUID and metadata as headers), so
// watermill-amqp subscribers read what it publishes. It makes sure of each queue before its
// first publish (RabbitMQ drops a message routed to no queue; see declareQueue) and waits for
// the broker's confirm of every message, as long as the message's context allows. It talks to
// amqp091 directly rather than through watermill-amqp's publisher, whose background reconnect
// is not safe to call into while it runs; a lost connection is dialled again by [Brokers].
type rabbitMQPublisher struct {
	conn     *amqp.Connection
	m        wmamqp.DefaultMarshaler
	mu       sync.Mutex
	declared map[string]bool
	// maxSize is the broker's max_message_size once it has refused a message for it, 0
	// before: AMQP does not tell it, RabbitMQ's refusal does.
	maxSize atomic.Int64
}

// amqpDial makes the connection of an AMQP client (net.Dial's signature, as amqp091 takes
// it); nil dials TCP within dialTimeout.
type amqpDial = func(network, addr string) (net.Conn, error)

func openRabbitMQPublisher(s RabbitMQServer, dial amqpDial) (message.Publisher, error) {
	conn, err := amqp.DialConfig(s.URL, amqpConfig(dial))
	if err != nil {
		return nil, err
	}
	return &rabbitMQPublisher{conn: conn, declared: make(map[string]bool)}, nil
}

func amqpConfig(dial amqpDial) amqp.Config {
	if dial == nil {
		dial = amqp.DefaultDial(dialTimeout)
	}
	return amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US", Dial: dial}
}

// rabbitMQAnswerTimeout bounds each wait for RabbitMQ's answer: to opening, declaring on,
// configuring and closing a channel, to taking a published message and confirming it, and to
// closing the connection. amqp091 bounds none of them (its heartbeats end a connection that
// is silent for 15 s, and nothing ends one that still sends heartbeats while its channels
// hang), so a broker that accepts the connection and stops answering held a delivery, a
// source and Close that long or for good. When the bound passes, the connection is cut, so
// the call returns, and the next use dials a new one (see [Brokers]).
const rabbitMQAnswerTimeout = 10 * time.Second

// noAnswerError says RabbitMQ did not answer a call within rabbitMQAnswerTimeout (classified
// TimedOut), or before the sink whose publish waited for it closed (classified Canceled).
type noAnswerError struct {
	what    string // the call, as a gerund ("opening a channel")
	after   time.Duration
	closing bool // the sink closed first
}

func (e *noAnswerError) Error() string {
	if e.closing {
		return fmt.Sprintf("%s: RabbitMQ had not answered when the sink closed, so the connection was closed (the next attempt dials a new one)", e.what)
	}
	return fmt.Sprintf("%s: RabbitMQ did not answer within %s, so the connection was closed (the next attempt dials a new one)", e.what, e.after)
}

// answered makes call, which waits for RabbitMQ's answer on conn, and cuts conn when the
// answer has not come within rabbitMQAnswerTimeout, so that call returns (amqp091 then fails
// every call waiting on the connection). what names the call in the error, as a gerund.
func answered(conn *amqp.Connection, what string, call func() error) error {
	return answeredOrCut(conn, nil, what, call)
}

// answeredOrCut is answered, which also cuts conn when cut ends first: the closing of the
// [Sink] whose publish makes the call (see cutOf; nil: no such sink).
func answeredOrCut(conn *amqp.Connection, cut context.Context, what string, call func() error) error {
	const (
		waiting int32 = iota
		answer
		timedOut
		closing
	)
	var state atomic.Int32
	giveUp := func(why int32) {
		if state.CompareAndSwap(waiting, why) {
			// CloseDeadline with a deadline already passed fails its own write at once and
			// shuts the connection down, whatever the heartbeats do.
			_ = conn.CloseDeadline(time.Now())
		}
	}
	timer := time.AfterFunc(rabbitMQAnswerTimeout, func() { giveUp(timedOut) })
	defer timer.Stop()
	if cut != nil {
		stop := context.AfterFunc(cut, func() { giveUp(closing) })
		defer stop()
	}
	err := call()
	if !state.CompareAndSwap(waiting, answer) {
		return &noAnswerError{what: what, after: rabbitMQAnswerTimeout, closing: state.Load() == closing}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// closeAMQP closes conn, waiting at most rabbitMQAnswerTimeout for RabbitMQ's answer. (amqp091's
// CloseDeadline is no such bound: each heartbeat read moves the read deadline on.)
func closeAMQP(conn *amqp.Connection) error {
	err := answered(conn, "closing the RabbitMQ connection", conn.Close)
	if err != nil && !errors.Is(err, amqp.ErrClosed) { // ErrClosed: the connection was lost already
		return err
	}
	return nil
}

func (p *rabbitMQPublisher) connected() bool { return !p.conn.IsClosed() }

// Publish implements [message.Publisher]: the messages go to the queue on one channel in
// confirm mode, each confirmed before Publish returns.
//
// They are published mandatory: RabbitMQ confirms a message that reaches no queue as well as
// one it stored, and drops it, so a queue deleted since this publisher declared it would
// swallow every later message as delivered. A message RabbitMQ returns as unroutable is
// published again once after the queue is declared again; returned a second time, it fails
// as NotFound (NO_ROUTE).
//
// A message over the broker's max_message_size (its body, as RabbitMQ counts it) can never be
// published there. RabbitMQ does not tell the limit until it refuses a message for it, closing
// the channel with 406 PRECONDITION_FAILED and the limit in its reason; from then on the
// publisher knows it, and Publish sends nothing of a batch that holds such a message and
// returns an *[sinks.UnsendableError] naming each one by its index in msgs, with a
// *[TooLargeError]. The message RabbitMQ refuses is named the same way, with the others of
// the batch over the limit, once the messages before it were stored (the error's Sent counts
// them): sent again, they arrive twice (consumers dedupe by UUID, the event id). The limit learnt is kept for the life of the
// connection.
//
// Each call that waits for RabbitMQ is bounded by rabbitMQAnswerTimeout (see answered), the
// confirm of a message by its context too.
func (p *rabbitMQPublisher) Publish(queue string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pubs := make([]amqp.Publishing, len(msgs))
	for i, m := range msgs {
		pub, err := p.m.Marshal(m)
		if err != nil {
			return fmt.Errorf("encoding message %s: %w", m.UUID, err)
		}
		pubs[i] = pub
	}
	if faults := p.oversized(pubs, 0); len(faults) > 0 {
		return &sinks.UnsendableError{Faults: faults}
	}
	// A sink closing while a call still waits for RabbitMQ cuts the connection (see cutOf).
	cut := cutOf(msgs[0].Context())
	var ch *amqp.Channel
	if err := answeredOrCut(p.conn, cut, "opening a channel", func() (err error) { ch, err = p.conn.Channel(); return err }); err != nil {
		return err
	}
	defer func() { _ = answeredOrCut(p.conn, cut, "closing the channel", ch.Close) }()
	p.mu.Lock()
	declared := p.declared[queue]
	p.mu.Unlock()
	if !declared {
		var err error
		if ch, err = p.declare(ch, cut, queue); err != nil {
			return err
		}
	}
	// The connection's reader hands returns over as it reads them, so the channel has room
	// for every one there can be (each message, and its one republish), or it would block
	// the whole connection.
	returns := ch.NotifyReturn(make(chan amqp.Return, 2*len(msgs)))
	// The reason RabbitMQ closes the channel for, when it does (a message over its size).
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := answeredOrCut(p.conn, cut, "putting the channel in confirm mode", func() error { return ch.Confirm(false) }); err != nil {
		return err
	}
	for i, m := range msgs {
		pub := pubs[i]
		returned, err := p.publish(ch, returns, closes, queue, m, pub)
		if err != nil {
			if classify(err, nil) == schemas.PayloadTooLarge {
				return p.refused(err, pubs, i)
			}
			return err
		}
		if !returned {
			continue
		}
		// The queue is gone: declare it again (egrid owns its queues) and publish again.
		p.mu.Lock()
		delete(p.declared, queue)
		p.mu.Unlock()
		// On the publishing channel: a plain declaration, which RabbitMQ refuses only for a
		// queue declared otherwise meanwhile (the next attempt uses that one as it is).
		if err := answeredOrCut(p.conn, cut, fmt.Sprintf("declaring queue %q", queue), func() error {
			_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
			return err
		}); err != nil {
			return err
		}
		p.mu.Lock()
		p.declared[queue] = true
		p.mu.Unlock()
		if returned, err = p.publish(ch, returns, closes, queue, m, pub); err != nil {
			return err
		}
		if returned {
			return fmt.Errorf("RabbitMQ returned message %s as unroutable: queue %q does not take it: %w", m.UUID, queue,
				&amqp.Error{Code: amqp.NoRoute, Reason: "NO_ROUTE - the message reached no queue", Server: true})
		}
	}
	return nil
}

// oversized returns a fault for each of pubs[from:] over the broker's max_message_size, once
// the publisher knows it.
func (p *rabbitMQPublisher) oversized(pubs []amqp.Publishing, from int) []sinks.EventFault {
	limit := p.maxSize.Load()
	if limit <= 0 {
		return nil
	}
	var faults []sinks.EventFault
	for i := from; i < len(pubs); i++ {
		if size := int64(len(pubs[i].Body)); size > limit {
			faults = append(faults, sinks.EventFault{Index: i, Err: &TooLargeError{Broker: RabbitMQ, Size: size, Limit: limit, Setting: "max_message_size"}})
		}
	}
	return faults
}

// rabbitMQMaxSize reads the limit out of RabbitMQ's refusal of a message for its size:
// "PRECONDITION_FAILED - message size 2000 is larger than configured max size 1000".
var rabbitMQMaxSize = regexp.MustCompile(`larger than (?:configured )?max size (\d+)`)

// refused returns the *[sinks.UnsendableError] of a batch whose message i RabbitMQ refused for
// its size (err): that message, with the limit learnt from the refusal when it says it, and
// the messages after it over that limit.
func (p *rabbitMQPublisher) refused(err error, pubs []amqp.Publishing, i int) error {
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) {
		if m := rabbitMQMaxSize.FindStringSubmatch(amqpErr.Reason); m != nil {
			if limit, perr := strconv.ParseInt(m[1], 10, 64); perr == nil && limit > 0 {
				p.maxSize.Store(limit)
				err = fmt.Errorf("%w (%w)", &TooLargeError{Broker: RabbitMQ, Size: int64(len(pubs[i].Body)), Limit: limit, Setting: "max_message_size"}, err)
			}
		}
	}
	faults := append([]sinks.EventFault{{Index: i, Err: err}}, p.oversized(pubs, i+1)...)
	// The messages before i were confirmed: stored.
	return &sinks.UnsendableError{Faults: faults, Sent: i}
}

// declare makes sure queue exists on ch (see declareQueue), remembers it declared, and
// returns the channel to go on with.
func (p *rabbitMQPublisher) declare(ch *amqp.Channel, cut context.Context, queue string) (*amqp.Channel, error) {
	ch, err := declareQueue(p.conn, cut, ch, queue)
	if err != nil {
		return ch, err
	}
	p.mu.Lock()
	p.declared[queue] = true
	p.mu.Unlock()
	return ch, nil
}

// declareQueue makes sure queue exists, on ch, a channel of conn. A queue that exists is used
// as it is, whatever it was declared with (a length limit, a quorum queue, a dead-letter
// exchange, not durable): it is checked with a passive declaration. One that does not is
// declared durable without arguments, as watermill-amqp's durable-queue subscriber declares
// it. egrid declared every queue so, and RabbitMQ refused the declaration of a queue declared
// otherwise (406 PRECONDITION_FAILED, inequivalent arg), so nothing could be published to it.
//
// RabbitMQ closes the channel of a declaration it refuses (the passive one of a queue that does
// not exist): declareQueue then goes on on a new channel, and returns the channel to go on
// with, ch or the last it opened (the others closed). cut is as for answeredOrCut.
func declareQueue(conn *amqp.Connection, cut context.Context, ch *amqp.Channel, queue string) (*amqp.Channel, error) {
	what := fmt.Sprintf("declaring queue %q", queue)
	declare := func(passive bool) error {
		return answeredOrCut(conn, cut, what, func() error {
			var err error
			if passive {
				_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			} else {
				_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
			}
			return err
		})
	}
	reopen := func() error {
		_ = answeredOrCut(conn, cut, "closing the channel", ch.Close) // closed by RabbitMQ already
		// ch keeps the closed channel when the open fails: amqp091 answers a failed open with a
		// nil channel, which the callers' deferred Close would dereference.
		return answeredOrCut(conn, cut, "opening a channel", func() error {
			opened, err := conn.Channel()
			if err == nil {
				ch = opened
			}
			return err
		})
	}
	err := declare(true)
	if !isAMQP(err, amqp.NotFound) {
		return ch, err // nil: it exists, and is used as it is
	}
	if err := reopen(); err != nil {
		return ch, err
	}
	err = declare(false)
	if !isAMQP(err, amqp.PreconditionFailed) {
		return ch, err
	}
	// Declared meanwhile by another client, otherwise (its consumer, say): used as it is too.
	if err := reopen(); err != nil {
		return ch, err
	}
	if perr := declare(true); perr == nil {
		return ch, nil
	}
	return ch, fmt.Errorf("queue %q was declared by another client, with other arguments than egrid's, as egrid declared it: %w; declare the queue before egrid uses it, and egrid uses it as it is", queue, err)
}

// isAMQP reports whether err is RabbitMQ's answer with code.
func isAMQP(err error, code int) bool {
	var e *amqp.Error
	return errors.As(err, &e) && e.Code == code
}

// publish publishes one message mandatory and waits for its confirm, for as long as the
// message's context allows and at most rabbitMQAnswerTimeout; a confirm that does not come
// by then, or before the sink closes, cuts the connection, as every other wait for RabbitMQ
// does. It reports whether RabbitMQ returned the message
// as unroutable (RabbitMQ sends the return before the confirm, so it is on returns by then).
//
// When RabbitMQ closes the channel instead (it refuses a message over its max_message_size
// so), the reason it sent on closes is the error.
func (p *rabbitMQPublisher) publish(ch *amqp.Channel, returns <-chan amqp.Return, closes <-chan *amqp.Error, queue string, m *message.Message, pub amqp.Publishing) (returned bool, err error) {
	ctx := m.Context()
	cut := cutOf(ctx)
	var dc *amqp.DeferredConfirmation
	// The write itself waits when RabbitMQ stops reading (TCP flow control).
	err = answeredOrCut(p.conn, cut, fmt.Sprintf("publishing message %s to queue %s", m.UUID, queue), func() (err error) {
		dc, err = ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, pub)
		return err
	})
	if err != nil {
		return false, err
	}
	wctx, cancel := context.WithTimeout(ctx, rabbitMQAnswerTimeout)
	defer cancel()
	if cut != nil {
		defer context.AfterFunc(cut, cancel)()
	}
	acked, err := dc.WaitContext(wctx)
	if err != nil && ctx.Err() == nil {
		// No confirm at the sink's close or within the bound: the connection is cut, as
		// answeredOrCut cuts it for a call, so the next attempt dials a new one rather than
		// publish on a connection RabbitMQ has stopped answering. (Left to the channel's
		// close, which a broker still answering channel calls answers, the cut happened or
		// not by which goroutine ran first.)
		_ = p.conn.CloseDeadline(time.Now())
		if cut != nil && cut.Err() != nil {
			return false, &noAnswerError{what: fmt.Sprintf("waiting for RabbitMQ to confirm message %s", m.UUID), closing: true}
		}
		return false, &noAnswerError{what: fmt.Sprintf("waiting for RabbitMQ to confirm message %s", m.UUID), after: rabbitMQAnswerTimeout}
	}
	if err != nil {
		return false, fmt.Errorf("waiting for RabbitMQ to confirm message %s: %w", m.UUID, err)
	}
	if !acked {
		// amqp091 sends the reason on closes before it nacks what the channel had pending.
		select {
		case e, ok := <-closes:
			if ok && e != nil {
				return false, fmt.Errorf("publishing message %s to queue %s: RabbitMQ closed the channel: %w", m.UUID, queue, e)
			}
		default:
		}
		return false, fmt.Errorf("RabbitMQ refused message %s (nack): %w", m.UUID, &amqp.Error{Code: amqp.ResourceError, Reason: "publish nacked by the broker", Server: true})
	}
	select {
	case <-returns:
		return true, nil
	default:
		return false, nil
	}
}

// Close implements [message.Publisher]. It waits at most rabbitMQAnswerTimeout for RabbitMQ.
func (p *rabbitMQPublisher) Close() error { return closeAMQP(p.conn) }

// rabbitMQSubscriber consumes queues (used as they are, or declared as watermill-amqp's
// durable-queue subscriber declares them: see declareQueue; one message in flight per queue) on one amqp091 connection, and
// reads watermill-amqp's wire format. It is egrid's own rather than watermill-amqp's
// Subscriber, whose reconnect goroutine replaces the connection and its "connected" channel
// while the subscriptions read them (a data race at every lost connection). Here nothing
// reconnects in the background: a subscription whose channel or connection is lost ends (its
// message channel closes), the source subscribes again, and [Brokers] dials a new
// connection for it once this one is closed, as it does for the publisher.
type rabbitMQSubscriber struct {
	conn    *amqp.Connection
	closing chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func (s *rabbitMQSubscriber) connected() bool { return !s.conn.IsClosed() }

func openRabbitMQSubscriber(s RabbitMQServer, dial amqpDial) (message.Subscriber, error) {
	return openRabbitMQSubscriberConfig(s, amqpConfig(dial))
}

func openRabbitMQSubscriberConfig(s RabbitMQServer, cfg amqp.Config) (message.Subscriber, error) {
	conn, err := amqp.DialConfig(s.URL, cfg)
	if err != nil {
		return nil, err
	}
	return &rabbitMQSubscriber{conn: conn, closing: make(chan struct{})}, nil
}

// Subscribe implements [message.Subscriber]: messages of the durable queue, one at a time,
// each acked or nacked (and requeued) before the next one comes. The channel closes when ctx
// ends, the subscriber closes or the connection is lost; a message in hand then goes back to
// the queue. Each call that waits for RabbitMQ, and the ack or nack of a message, is bounded by
// rabbitMQAnswerTimeout (see answered).
func (s *rabbitMQSubscriber) Subscribe(ctx context.Context, queue string) (<-chan *message.Message, error) {
	var ch *amqp.Channel
	if err := answered(s.conn, "opening a channel", func() (err error) { ch, err = s.conn.Channel(); return err }); err != nil {
		return nil, err
	}
	closeCh := func() { _ = answered(s.conn, "closing the channel", ch.Close) }
	ch, err := declareQueue(s.conn, nil, ch, queue)
	if err != nil {
		closeCh()
		return nil, err
	}
	if err := answered(s.conn, fmt.Sprintf("setting the prefetch of queue %q", queue), func() error { return ch.Qos(1, 0, false) }); err != nil {
		closeCh()
		return nil, err
	}
	// Consume, not ConsumeWithContext: that one cancels the consumer from a goroutine of its
	// own when ctx ends, an RPC that can take the answer to the channel's Close beside it (the
	// Close then waits for good). Closing the channel ends the consumer, and RabbitMQ requeues
	// what it had not been answered.
	var deliveries <-chan amqp.Delivery
	err = answered(s.conn, fmt.Sprintf("consuming queue %q", queue), func() (err error) {
		deliveries, err = ch.Consume(queue, "", false, false, false, false, nil)
		return err
	})
	if err != nil {
		closeCh()
		return nil, err
	}
	out := make(chan *message.Message)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer closeCh()
		for {
			select {
			case d, ok := <-deliveries:
				if !ok || !s.deliver(ctx, d, out) {
					return
				}
			case <-ctx.Done():
				return
			case <-s.closing:
				return
			}
		}
	}()
	return out, nil
}

// deliver hands one delivery out and answers RabbitMQ as the handler answered it. It returns
// false when the subscription must end.
//
// The answer is a write RabbitMQ does not reply to, but a broker that stops reading the
// connection holds it: it is bounded by rabbitMQAnswerTimeout like the calls that wait for a
// reply (see answered). When the bound passes, the connection is cut and the subscription
// ends; RabbitMQ redelivers the message, as it does every message unacknowledged on a lost
// connection.
func (s *rabbitMQSubscriber) deliver(ctx context.Context, d amqp.Delivery, out chan<- *message.Message) bool {
	m := amqpMessage(d)
	var err error
	switch handOut(ctx, s.closing, m, out, 0) {
	case acked:
		err = answered(s.conn, fmt.Sprintf("acknowledging message %s", shorten(m.UUID)), func() error { return d.Ack(false) })
	case nacked:
		err = answered(s.conn, fmt.Sprintf("returning message %s to the queue", shorten(m.UUID)), func() error { return d.Nack(false, true) })
	default:
		_ = answered(s.conn, fmt.Sprintf("returning message %s to the queue", shorten(m.UUID)), func() error { return d.Nack(false, true) })
		return false
	}
	return err == nil
}

// amqpMessage reads a delivery in watermill-amqp's wire format (its DefaultMarshaler: the UUID
// and the metadata as headers). A header that is not a string, which that format cannot
// read, is taken in its printed form: the message still reaches the source, whose checks of
// the payload decide, rather than stalling the queue unanswered. An UnreadableKey header is
// dropped (see dropReserved).
func amqpMessage(d amqp.Delivery) *message.Message {
	if m, err := (wmamqp.DefaultMarshaler{}).Unmarshal(d); err == nil {
		dropReserved(m)
		return m
	}
	m := message.NewMessage("", d.Body)
	for k, v := range d.Headers {
		text, ok := v.(string)
		if !ok {
			text = fmt.Sprint(v)
		}
		switch k {
		case wmamqp.DefaultMessageUUIDHeaderKey:
			m.UUID = text
			continue
		case UnreadableKey:
			continue // reserved: see dropReserved
		}
		m.Metadata[k] = text
	}
	return m
}

// Close stops every subscription, waits for them and closes the connection, waiting at most
// rabbitMQAnswerTimeout for RabbitMQ. It is idempotent.
func (s *rabbitMQSubscriber) Close() (err error) {
	s.once.Do(func() {
		close(s.closing)
		s.wg.Wait()
		err = closeAMQP(s.conn)
	})
	return err
}
