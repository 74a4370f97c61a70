package broker

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/lib/pq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// dialTimeout bounds connecting to a broker.
const dialTimeout = 5 * time.Second

// NATS JetStream.

func natsConnect(s NATSServer, name string, d *natsDialer) (*nats.Conn, error) {
	return nats.Connect(s.URL,
		nats.Name(name),
		nats.SetCustomDialer(d),
		nats.Timeout(dialTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		// Publishes while disconnected fail at once instead of waiting in a buffer: the
		// subscription's retry policy, not the client, decides when to try again.
		nats.ReconnectBufSize(-1),
	)
}

// natsPublisher publishes to JetStream in watermill-nats' wire format (its NATSMarshaler: the
// UUID and metadata as headers, the payload as data), with the message UUID (the event id) as
// Nats-Msg-Id so JetStream drops a republished duplicate within the stream's duplicate window.
// Unlike watermill-nats' own publisher it waits for the stream's acknowledgement only as long
// as the message's context allows, so an abandoned attempt does not linger.
type natsPublisher struct {
	d  *natsDialer
	nc *nats.Conn
	js jetstream.JetStream
	m  wmnats.NATSMarshaler
}

func openNATSPublisher(s NATSServer, _ watermill.LoggerAdapter) (message.Publisher, error) {
	d := &natsDialer{}
	nc, err := natsConnect(s, "egrid publisher", d)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsPublisher{d: d, nc: nc, js: js}, nil
}

// natsDialer dials the connections of one nats.go client and keeps the latest, so a publish
// whose attempt ends while a write to it is stuck can close it (see [natsPublisher.Publish]).
type natsDialer struct {
	mu  sync.Mutex
	cur *natsNetConn
	// wrote holds a channel for each cutStuckWrite waiting for a write to begin, closed by
	// the next write on any of the dialer's connections. Guarded by mu.
	wrote []chan struct{}
}

// Dial implements [nats.CustomDialer], within dialTimeout.
func (d *natsDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, dialTimeout)
	if err != nil {
		return nil, err
	}
	nc := &natsNetConn{Conn: c, d: d}
	d.mu.Lock()
	d.cur = nc
	d.mu.Unlock()
	return nc, nil
}

// cutStuckWrite runs once a publish's attempt has ended, until that publish returns (done):
// it closes the current connection when a write to it is in progress then or begins later,
// since the publish's own write may begin only after its attempt ended (on a busy machine, or
// behind a reconnection). The server is not taking what the client sends: nats.go writes a
// publish under its connection's lock, bounded only by its 1-minute write timeout, so that one
// write held every publish of the connection; closed, the write fails at once and nats.go
// reconnects. It waits on the writes' signal, not on a clock, and ends with the publish.
func (d *natsDialer) cutStuckWrite(done <-chan struct{}) {
	for {
		wrote := make(chan struct{})
		d.mu.Lock()
		c := d.cur
		d.wrote = append(d.wrote, wrote)
		d.mu.Unlock()
		if c != nil && c.writes.Load() > 0 {
			_ = c.Close()
			d.forget(wrote)
			return
		}
		select {
		case <-wrote:
		case <-done:
			d.forget(wrote)
			return
		}
	}
}

// forget drops wrote from the channels waiting for a write.
func (d *natsDialer) forget(wrote chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.wrote = slices.DeleteFunc(d.wrote, func(w chan struct{}) bool { return w == wrote })
}

// natsNetConn counts the writes in progress on a connection of nats.go, and tells its
// dialer's waiting cutStuckWrite calls that one began.
type natsNetConn struct {
	net.Conn
	d      *natsDialer
	writes atomic.Int32
}

func (c *natsNetConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	defer c.writes.Add(-1)
	c.d.mu.Lock()
	for _, w := range c.d.wrote {
		close(w)
	}
	c.d.wrote = c.d.wrote[:0]
	c.d.mu.Unlock()
	return c.Conn.Write(b)
}

func (p *natsPublisher) connected() bool { return p.nc.IsConnected() }

// Publish implements [message.Publisher]: the messages go to the subject one by one, each
// acknowledged by its stream before the next.
//
// A message over the server's max_payload (headers and data, as the server counts it) can
// never be published there: Publish then sends nothing and returns an *[sinks.UnsendableError]
// naming every such message by its index in msgs, each with a *[TooLargeError]. A message
// its stream refuses for the stream's own size limit (max_msg_size) is found only when it is
// published, after the messages before it were stored: Publish returns an
// *[sinks.UnsendableError] naming it, whose Sent counts the messages before it, and those,
// sent again, are dropped by JetStream as duplicates (their Nats-Msg-Id) within the stream's
// duplicate window.
func (p *natsPublisher) Publish(subject string, msgs ...*message.Message) error {
	if !p.nc.IsConnected() {
		return fmt.Errorf("publishing to NATS: %w", nats.ErrDisconnected)
	}
	limit := p.nc.MaxPayload()
	nms := make([]*nats.Msg, len(msgs))
	var faults []sinks.EventFault
	for i, m := range msgs {
		nm, err := p.m.Marshal(subject, m)
		if err != nil {
			return fmt.Errorf("encoding message %s: %w", m.UUID, err)
		}
		nm.Header.Set(nats.MsgIdHdr, m.UUID)
		if size := natsSize(nm); limit > 0 && size > limit {
			faults = append(faults, sinks.EventFault{Index: i, Err: &TooLargeError{Broker: NATSJetStream, Size: size, Limit: limit, Setting: "max_payload"}})
		}
		nms[i] = nm
	}
	if len(faults) > 0 {
		return &sinks.UnsendableError{Faults: faults}
	}
	for i, nm := range nms {
		m := msgs[i]
		ctx := m.Context()
		// A write still stuck when the attempt ends is cut (see cutStuckWrite): the write of
		// a message nats.go makes itself, without the context, bounded by its 1-minute write
		// timeout only.
		returned := make(chan struct{})
		stop := context.AfterFunc(ctx, func() { p.d.cutStuckWrite(returned) })
		_, err := p.js.PublishMsg(ctx, nm)
		close(returned)
		stop()
		if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("NATS had not taken the message when the attempt ended, so the connection was closed (nats.go reconnects): %w (%w)", context.Cause(ctx), err)
		}
		if err != nil {
			err = fmt.Errorf("publishing message %s to subject %s: %w", m.UUID, subject, err)
			if classify(err, nil) == schemas.PayloadTooLarge {
				return &sinks.UnsendableError{Faults: []sinks.EventFault{{Index: i, Err: err}}, Sent: i}
			}
			return err
		}
	}
	return nil
}

// natsSize is the size of m as the server holds it against max_payload: its header block
// (as nats.go writes it) and its data.
func natsSize(m *nats.Msg) int64 {
	n := len(m.Data)
	if len(m.Header) > 0 {
		var b bytes.Buffer
		b.WriteString("NATS/1.0\r\n")
		_ = http.Header(m.Header).Write(&b)
		n += b.Len() + 2
	}
	return int64(n)
}

// Close implements [message.Publisher].
func (p *natsPublisher) Close() error {
	p.nc.Close()
	return nil
}

// natsSubscriber is watermill-nats' JetStream subscriber on a durable consumer per subject.
// natsSubscriber consumes JetStream subjects through durable consumers. It is egrid's own
// rather than watermill-nats' Subscriber, whose output channel is closed by one goroutine while
// its message callback may still send on it (a data race, and a possible panic, at every
// unsubscribe); here one goroutine per subscription both sends and closes. Messages use
// watermill-nats' wire format (see natsMessage).
type natsSubscriber struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	group   string
	closing chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func (s *natsSubscriber) connected() bool { return !s.nc.IsClosed() }

func openNATSSubscriber(s NATSServer, group string, _ watermill.LoggerAdapter) (message.Subscriber, error) {
	nc, err := natsConnect(s, "egrid source", &natsDialer{})
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsSubscriber{nc: nc, js: js, group: group, closing: make(chan struct{})}, nil
}

// natsAckWait bounds how long a message handed out may stay unanswered; natsNakDelay is how
// long a nacked message waits before it comes back, so a failing journal is not hammered.
const (
	natsAckWait  = 30 * time.Second
	natsNakDelay = time.Second
)

// Subscribe implements message.Subscriber: messages of subject, one at a time, each acked or
// nacked before the next is fetched. The channel closes when ctx ends or the subscriber closes.
func (s *natsSubscriber) Subscribe(ctx context.Context, subject string) (<-chan *message.Message, error) {
	cons, _, err := durableConsumer(s.group)(ctx, s.js, subject)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		for ctx.Err() == nil {
			select {
			case <-s.closing:
				return
			default:
			}
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(500*time.Millisecond))
			if err != nil {
				if s.nc.IsClosed() {
					return
				}
				select { // a broken connection: try again shortly
				case <-ctx.Done():
				case <-s.closing:
				case <-time.After(natsNakDelay):
				}
				continue
			}
			for msg := range batch.Messages() {
				if !s.deliver(ctx, msg, out) {
					return
				}
			}
		}
	}()
	return out, nil
}

// deliver hands one message out and answers JetStream as the handler answered it. It returns
// false when the subscription must end.
//
// The answers (Ack, Nak, Term) are plain publishes, which nats.go appends to its connection's
// buffer and returns from; it writes to the socket itself only once 32 KB are buffered, and
// its flusher goroutine writes under the connection's lock. So an answer waits on a server
// that stopped reading (up to nats.go's 1-minute write timeout) only once the kernel's socket
// buffers are full, which a source's traffic (one small fetch request every half second, and
// its answers) fills after hours, well after nats.go's pings (2 minutes apart, two missed)
// have found the connection stale and replaced it. They are therefore not cut as a stuck
// publish of a destination is ([natsDialer.cutStuckWrite]). An answer lost with its
// connection is no loss: JetStream hands the message out again after the consumer's AckWait.
func (s *natsSubscriber) deliver(ctx context.Context, msg jetstream.Msg, out chan<- *message.Message) bool {
	m := natsMessage(msg)
	switch handOut(ctx, s.closing, m, out, natsAckWait) {
	case acked:
		_ = msg.Ack()
	case nacked:
		_ = msg.NakWithDelay(natsNakDelay)
	case unanswered: // JetStream redelivers after its own AckWait
	default:
		_ = msg.Nak()
		return false
	}
	return true
}

// natsMessage reads a JetStream message in watermill-nats' wire format (its DefaultUnmarshaler:
// the UUID and the metadata as headers, the payload as data). A header sent more than once,
// which that format refuses (watermill metadata holds one value a key), is taken with its
// values joined by ", ", as HTTP combines a repeated field (RFC 9110, 5.3): a source reads
// nothing of a message but its payload, so the message still reaches the source, whose checks
// of the payload decide, and a poisoned one keeps every value, rather than being dropped
// unanswered.
// An UnreadableKey header is dropped (see dropReserved).
func natsMessage(msg jetstream.Msg) *message.Message {
	if m, err := (wmjs.DefaultUnmarshaler{}).Unmarshal(msg); err == nil {
		dropReserved(m)
		return m
	}
	hdr := msg.Headers()
	m := message.NewMessage(hdr.Get(wmnats.WatermillUUIDHdr), msg.Data())
	for k, v := range hdr {
		switch k {
		case wmnats.WatermillUUIDHdr, nats.MsgIdHdr, nats.ExpectedLastMsgIdHdr, nats.ExpectedStreamHdr, nats.ExpectedLastSubjSeqHdr, nats.ExpectedLastSeqHdr:
			continue // as DefaultUnmarshaler: not the message's metadata
		case UnreadableKey:
			continue // reserved: see dropReserved
		}
		m.Metadata.Set(k, strings.Join(v, ", "))
	}
	return m
}

// answer is what became of a message handed out (see handOut).
type answer int

const (
	ended      answer = iota // the subscription ended first
	acked                    // the reader acked it
	nacked                   // the reader nacked it
	unanswered               // the bound passed first
)

// handOut sends m on out, with a context that ends when it returns, and waits for the
// reader's answer, for at most bound (0: no bound), or until ctx ends or closing closes.
func handOut(ctx context.Context, closing <-chan struct{}, m *message.Message, out chan<- *message.Message, bound time.Duration) answer {
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.SetContext(mctx)
	select {
	case out <- m:
	case <-ctx.Done():
		return ended
	case <-closing:
		return ended
	}
	var timeout <-chan time.Time
	if bound > 0 {
		t := time.NewTimer(bound)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-m.Acked():
		return acked
	case <-m.Nacked():
		return nacked
	case <-timeout:
		return unanswered
	case <-ctx.Done():
	case <-closing:
	}
	// The subscription ended, maybe just after the reader answered (select picks at random
	// among ready cases): an answer given still counts, or an acked message would come back.
	select {
	case <-m.Acked():
		return acked
	case <-m.Nacked():
		return nacked
	default:
		return ended
	}
}

// Close stops every subscription, waits for them and closes the connection. It is idempotent.
func (s *natsSubscriber) Close() error {
	s.once.Do(func() {
		close(s.closing)
		s.wg.Wait()
		s.nc.Close()
	})
	return nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// durableConsumer reads a subject from whichever stream captures it, through a durable
// consumer named <group>_<subject> that survives restarts (so nothing is read twice, or
// missed, across them).
func durableConsumer(group string) wmjs.ResourceInitializer {
	return func(ctx context.Context, js jetstream.JetStream, subject string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
		name, err := js.StreamNameBySubject(ctx, subject)
		if err != nil {
			return nil, nil, fmt.Errorf("finding the JetStream stream of subject %q (create a stream that captures it): %w", subject, err)
		}
		stream, err := js.Stream(ctx, name)
		if err != nil {
			return nil, nil, fmt.Errorf("opening JetStream stream %q: %w", name, err)
		}
		consumer, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       group + "_" + unsafeName.ReplaceAllString(subject, "_"),
			FilterSubject: subject,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("creating the consumer of subject %q on stream %q: %w", subject, name, err)
		}
		return consumer, nil, nil
	}
}

// RabbitMQ.

// rabbitMQPublisher publishes to durable queues through the default exchange in
// watermill-amqp's wire format (its DefaultMarshaler: persistent messages, the UUID and
// metadata as headers), so watermill-amqp subscribers read what it publishes. It declares each
// queue before its first publish (RabbitMQ drops a message routed to no queue) and waits for
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
	// The connection's reader hands returns over as it reads them, so the channel has room
	// for every one there can be (each message, and its one republish), or it would block
	// the whole connection.
	returns := ch.NotifyReturn(make(chan amqp.Return, 2*len(msgs)))
	// The reason RabbitMQ closes the channel for, when it does (a message over its size).
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	p.mu.Lock()
	declared := p.declared[queue]
	p.mu.Unlock()
	if !declared {
		if err := p.declare(ch, cut, queue); err != nil {
			return err
		}
	}
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
		if err := p.declare(ch, cut, queue); err != nil {
			return err
		}
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

// declare declares queue durable on ch, as watermill-amqp's durable-queue subscriber declares
// it, and remembers it declared.
func (p *rabbitMQPublisher) declare(ch *amqp.Channel, cut context.Context, queue string) error {
	err := answeredOrCut(p.conn, cut, fmt.Sprintf("declaring queue %q", queue), func() error {
		_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
		return err
	})
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.declared[queue] = true
	p.mu.Unlock()
	return nil
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

// rabbitMQSubscriber consumes durable queues (declared as watermill-amqp's durable-queue
// subscriber declares them, one message in flight per queue) on one amqp091 connection, and
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
	err := answered(s.conn, fmt.Sprintf("declaring queue %q", queue), func() error {
		_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
		return err
	})
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

// shorten cuts a value read from a broker for an error message.
func shorten(v string) string {
	const max = 64
	if len(v) <= max {
		return v
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + "..."
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

// Redis Streams.

func redisClient(s RedisServer) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: s.Addr, Username: s.Username, Password: s.Password, DB: s.DB,
		DialTimeout: dialTimeout,
		// No hidden retries: the subscription's policy retries, and sees every failure.
		MaxRetries: -1,
	})
}

func openRedisPublisher(s RedisServer, wlog watermill.LoggerAdapter) (message.Publisher, error) {
	return redisstream.NewPublisher(redisstream.PublisherConfig{Client: redisClient(s)}, wlog)
}

// redisClaimIdle is how long a pending message of a Redis source waits before the subscriber
// claims it back (see openRedisSubscriber).
const redisClaimIdle = 15 * time.Second

func openRedisSubscriber(s RedisServer, group string, wlog watermill.LoggerAdapter) (message.Subscriber, error) {
	client := redisClient(s)
	client.AddHook(redisEntryIDs{})
	return redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:        client,
		ConsumerGroup: group,
		// Every entry becomes a message, so that the source decides what becomes of it: an
		// entry watermill-redisstream's own unmarshaller refuses ended the subscription
		// unanswered, and stayed pending at the head of the stream for good, each claim
		// ending the subscription again and holding back the entries behind it.
		Unmarshaller: redisUnmarshaller{},
		// A new consumer group reads the stream from its first entry.
		OldestId: "0",
		// A message Redis hands to a connection that is dying (the source's read in flight
		// when the connection drops) stays pending for this consumer with no one holding it,
		// until the subscriber claims it back: after redisClaimIdle, not the library's
		// minute. A message the source holds that long (a topic refusing it, nacked with
		// pauses of up to 10 s) may be claimed while in hand and so read twice: sources are
		// at least once.
		MaxIdleTime:                   redisClaimIdle,
		ClaimInterval:                 redisClaimIdle / 5,
		NackResendSleep:               time.Second,
		DisableIndefiniteInitialBlock: true,
	}, wlog)
}

// UnreadableKey is the metadata key of a message a subscriber could read no payload from,
// holding what is wrong with it (an entry of a Redis stream with neither a payload field nor
// a single field). A source poisons a message carrying it, with that reason, as it does a
// malformed payload, without reading its payload. The key is reserved to egrid's own
// subscribers: a header, field or metadata entry of that name a message arrives with is
// dropped (dropReserved), so that no publisher can have its message poisoned unread.
const UnreadableKey = "egrid-unreadable"

// dropReserved deletes from m's metadata the keys only egrid's subscribers set
// (UnreadableKey). A message's metadata is read from its headers (NATS, RabbitMQ), its
// fields and metadata field (Redis) or its metadata column (PostgreSQL), which whoever
// publishes to the broker writes.
func dropReserved(m *message.Message) {
	delete(m.Metadata, UnreadableKey)
}

// redisPayloadField is the field of a Redis stream entry that holds its payload in
// watermill-redisstream's wire format; redisMetadataField holds its metadata (msgpack).
const (
	redisPayloadField  = "payload"
	redisMetadataField = "metadata"
)

// redisUnmarshaller reads the entries of a Redis stream into messages and never fails (see
// redisMessage).
type redisUnmarshaller struct{}

func (redisUnmarshaller) Unmarshal(values map[string]any) (*message.Message, error) {
	return redisMessage(values), nil
}

// redisMessage reads an entry of a Redis stream in watermill-redisstream's wire format (the
// UUID, payload and metadata fields), and any other entry as well, so that a source decides
// what becomes of it: an entry without the UUID field has its entry ID as UUID (see
// redisEntryIDs); an entry without a payload field whose only field is another takes that
// field's value as payload; metadata that does not decode is kept as it came, under
// "metadata"; the fields besides these become metadata, but for an UnreadableKey, which is
// dropped (see dropReserved). An entry with neither a payload field nor a single field has no
// payload: the message carries UnreadableKey, saying so.
func redisMessage(values map[string]any) *message.Message {
	text := func(v any) string {
		switch v := v.(type) {
		case string:
			return v
		case []byte:
			return string(v)
		default:
			return fmt.Sprint(v)
		}
	}
	uuid, _ := values[redisstream.UUIDHeaderKey].(string)
	m := message.NewMessage(uuid, nil)
	others := make([]string, 0, len(values))
	for k := range values {
		if k != redisstream.UUIDHeaderKey {
			others = append(others, k)
		}
	}
	slices.Sort(others)
	payload, hasPayload := values[redisPayloadField]
	switch {
	case hasPayload:
		m.Payload = []byte(text(payload))
	case len(others) == 1:
		m.Payload = []byte(text(values[others[0]]))
		return m
	case len(others) == 0:
		m.Metadata.Set(UnreadableKey, "the Redis stream entry has no fields, so no events: add entries with a field payload holding a publish body (a JSON array of events, or one event)")
		return m
	default:
		m.Metadata.Set(UnreadableKey, fmt.Sprintf("the Redis stream entry has no field %s, and more than one other (%s), so egrid cannot tell which holds its events: add entries with a field payload holding a publish body (a JSON array of events, or one event), or with that body as their only field", redisPayloadField, shorten(strings.Join(others, ", "))))
	}
	if raw, ok := values[redisMetadataField]; ok {
		v := text(raw)
		md, err := (redisstream.DefaultMarshallerUnmarshaller{}).Unmarshal(map[string]any{redisstream.UUIDHeaderKey: uuid, redisMetadataField: v})
		if err != nil {
			md = message.NewMessage(uuid, nil)
			md.Metadata.Set(redisMetadataField, v)
		}
		for k, v := range md.Metadata {
			if k != UnreadableKey && m.Metadata.Get(k) == "" {
				m.Metadata.Set(k, v)
			}
		}
	}
	for _, k := range others {
		if k != redisPayloadField && k != redisMetadataField && k != UnreadableKey && m.Metadata.Get(k) == "" {
			m.Metadata.Set(k, text(values[k]))
		}
	}
	return m
}

// redisEntryIDs is a go-redis hook that gives each stream entry a read returns without
// watermill-redisstream's UUID field its entry ID (the one XADD made) in that field, so a
// foreign entry is named in the log and the poison queue by the ID that finds it in the
// stream. The unmarshaller is not given the ID.
type redisEntryIDs struct{}

func (redisEntryIDs) DialHook(next redis.DialHook) redis.DialHook { return next }

func (redisEntryIDs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (redisEntryIDs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		switch c := cmd.(type) {
		case *redis.XStreamSliceCmd: // XREADGROUP
			for _, xs := range c.Val() {
				withEntryIDs(xs.Messages)
			}
		case *redis.XMessageSliceCmd: // XCLAIM
			withEntryIDs(c.Val())
		}
		return err
	}
}

func withEntryIDs(entries []redis.XMessage) {
	for i := range entries {
		if _, ok := entries[i].Values[redisstream.UUIDHeaderKey]; ok {
			continue
		}
		if entries[i].Values == nil {
			entries[i].Values = map[string]any{}
		}
		entries[i].Values[redisstream.UUIDHeaderKey] = entries[i].ID
	}
}

// PostgreSQL.

// postgresPublisher publishes through watermill-sql, each publish on a connection of its own
// bounded by the attempt (see withConn): watermill-sql's Publish takes no context and runs its
// statements with none, so it is given, for each publish, a database handle that runs them
// with the first message's context (a [Sink] sets its attempt's). Its connections are bounded
// too (see pgConns).
type postgresPublisher struct {
	db    *sql.DB
	conns *pgConns
	wlog  watermill.LoggerAdapter
	// initialized holds the topics whose tables this publisher created (or found).
	initialized *sync.Map
}

func openPostgres(s PostgresServer) (*sql.DB, *pgConns, error) {
	conns, err := newPGConns(s.DSN)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(conns)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(time.Minute)
	return db, conns, nil
}

func openPostgresPublisher(s PostgresServer, wlog watermill.LoggerAdapter) (message.Publisher, error) {
	db, conns, err := openPostgres(s)
	if err != nil {
		return nil, err
	}
	return postgresPublisher{db: db, conns: conns, wlog: wlog, initialized: new(sync.Map)}, nil
}

// ctxConn is the database handle watermill-sql publishes with: one connection, on which it
// runs every statement with ctx in place of the background context it passes.
type ctxConn struct {
	c   *sql.Conn
	ctx context.Context
}

func (c ctxConn) ExecContext(_ context.Context, q string, args ...any) (sql.Result, error) {
	return c.c.ExecContext(c.ctx, q, args...)
}

func (c ctxConn) QueryContext(_ context.Context, q string, args ...any) (*sql.Rows, error) {
	return c.c.QueryContext(c.ctx, q, args...)
}

func (c ctxConn) QueryRowContext(_ context.Context, q string, args ...any) *sql.Row {
	return c.c.QueryRowContext(c.ctx, q, args...)
}

func (c ctxConn) Exec(q string, args ...any) (sql.Result, error) {
	return c.c.ExecContext(c.ctx, q, args...)
}

func (c ctxConn) Query(q string, args ...any) (*sql.Rows, error) {
	return c.c.QueryContext(c.ctx, q, args...)
}

func (c ctxConn) QueryRow(q string, args ...any) *sql.Row {
	return c.c.QueryRowContext(c.ctx, q, args...)
}

// pgAttemptEndedError says the attempt ended before PostgreSQL answered, so the connection was
// closed: the attempt's context's cause (classified TimedOut or Canceled), and the driver's
// error.
type pgAttemptEndedError struct{ cause, err error }

func (e *pgAttemptEndedError) Error() string {
	return fmt.Sprintf("PostgreSQL had not answered when the attempt ended, so its connection was closed (the next attempt uses another): %v (%v)", e.cause, e.err)
}

func (e *pgAttemptEndedError) Unwrap() []error { return []error{e.cause, e.err} }

// withConn runs f on a connection of the pool taken for it alone, within ctx: taking the
// connection waits no longer than ctx, and when ctx ends before f returns the connection is
// closed, so f returns then even when the server stopped answering: lib/pq, told of ctx, may
// send PostgreSQL a cancel request, but it waits for the server's answer, which a hung server
// never gives, until the connection's 5-minute read bound. The connection so closed leaves the
// pool.
func (p postgresPublisher) withConn(ctx context.Context, f func(*sql.Conn) error) error {
	c, err := p.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var nc *pgConn
	_ = c.Raw(func(dc any) error { nc = p.conns.of(dc); return nil })
	cut := func() {}
	if nc != nil {
		cut = func() { _ = nc.Close() }
	}
	stop := context.AfterFunc(ctx, cut)
	err = f(c)
	if !stop() && ctx.Err() != nil {
		// Cut (or being cut): the pool must not hand it out again.
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
		if err != nil {
			return &pgAttemptEndedError{cause: context.Cause(ctx), err: err}
		}
	}
	return err
}

// publish runs watermill-sql's Publish of msgs to topic on c, with ctx: it creates the topic's
// table first when this publisher has not yet.
func (p postgresPublisher) publish(ctx context.Context, c *sql.Conn, topic string, msgs []*message.Message) error {
	_, done := p.initialized.Load(topic)
	pub, err := wmsql.NewPublisher(ctxConn{c: c, ctx: ctx}, wmsql.PublisherConfig{
		SchemaAdapter:        wmsql.DefaultPostgreSQLSchema{},
		AutoInitializeSchema: !done,
	}, p.wlog)
	if err != nil {
		return err
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		return err
	}
	p.initialized.Store(topic, struct{}{})
	return nil
}

// pgUUIDLimit is the length, in characters, of watermill-sql's uuid column (VARCHAR(36) in
// its DefaultPostgreSQLSchema), which holds the message UUID: the event id.
const pgUUIDLimit = 36

// Publish implements [message.Publisher]: the messages are inserted in one statement, so all
// or none are stored.
//
// A message whose UUID (the event id) is longer than watermill-sql's uuid column takes can
// never be stored: the server refuses the whole statement (22001, value too long). Publish
// then inserts nothing and returns an *[sinks.UnsendableError] naming every such message by
// its index in msgs, each with a *[TooLargeError]. A payload is far under PostgreSQL's own
// limit on a value (1 GB): an event is at most 1 MiB.
//
// A statement PostgreSQL refuses for the data of a row (see pgRowRefusal) does not say which
// row: Publish then inserts the messages again one by one in a transaction it rolls back, and
// returns an *[sinks.UnsendableError] naming each message refused alone. Nothing is stored.
func (p postgresPublisher) Publish(topic string, msgs ...*message.Message) error {
	var faults []sinks.EventFault
	for i, m := range msgs {
		if n := utf8.RuneCountInString(m.UUID); n > pgUUIDLimit {
			faults = append(faults, sinks.EventFault{Index: i, Err: &TooLargeError{
				Broker: PostgreSQL, Part: "event id", Size: int64(n), Limit: pgUUIDLimit,
				Setting: "watermill-sql's uuid column, VARCHAR(36)",
			}})
		}
	}
	if len(faults) > 0 {
		return &sinks.UnsendableError{Faults: faults}
	}
	ctx := msgs[0].Context()
	err := p.withConn(ctx, func(c *sql.Conn) error { return p.publish(ctx, c, topic, msgs) })
	if err == nil || !pgRowRefusal(err) {
		return err
	}
	if len(msgs) == 1 {
		return &sinks.UnsendableError{Faults: []sinks.EventFault{{Index: 0, Err: pgRefused(err)}}}
	}
	if ue := p.refusedRows(topic, msgs); ue != nil {
		return ue
	}
	return err
}

// pgRowRefusal reports whether err is PostgreSQL's refusal of the data of a row: a data
// exception (class 22: a value too long, a byte sequence the database encoding does not take,
// JSON it does not parse) or a constraint (class 23, such as a CHECK the operator added to the
// table). The statement inserts nothing else than the events' ids, payloads and metadata, so
// such a refusal is an event's fault; but it does not say which row of the batch.
func pgRowRefusal(err error) bool {
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) {
		return false
	}
	class := pqErr.Code.Class()
	return class == "22" || class == "23"
}

func pgRefused(err error) error {
	return fmt.Errorf("PostgreSQL refuses the event's row, whatever is sent again: %w", err)
}

// refusedRows finds the rows of a batch PostgreSQL refused whole for the data of a row (see
// pgRowRefusal), by inserting them again one by one, each under a savepoint, in a transaction
// that is rolled back: nothing is stored. It returns an *[sinks.UnsendableError] naming every
// refused row, or nil when it finds none, or cannot tell (a row refused for another reason,
// the connection lost, the message's context done): the batch then fails with its own error.
func (p postgresPublisher) refusedRows(topic string, msgs []*message.Message) *sinks.UnsendableError {
	ctx := msgs[0].Context()
	var ue *sinks.UnsendableError
	_ = p.withConn(ctx, func(c *sql.Conn) error { ue = p.refusedRowsOn(ctx, c, topic, msgs); return nil })
	return ue
}

func (p postgresPublisher) refusedRowsOn(ctx context.Context, c *sql.Conn, topic string, msgs []*message.Message) *sinks.UnsendableError {
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		return nil
	}
	defer func() { _ = tx.Rollback() }()
	var faults []sinks.EventFault
	for i, m := range msgs {
		q, err := wmsql.DefaultPostgreSQLSchema{}.InsertQuery(topic, message.Messages{m})
		if err != nil {
			return nil
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT egrid_row"); err != nil {
			return nil
		}
		if _, err := tx.ExecContext(ctx, q.Query, q.Args...); err != nil {
			if !pgRowRefusal(err) {
				return nil
			}
			faults = append(faults, sinks.EventFault{Index: i, Err: pgRefused(err)})
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT egrid_row"); err != nil {
				return nil
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT egrid_row"); err != nil {
			return nil
		}
	}
	if len(faults) == 0 {
		return nil
	}
	return &sinks.UnsendableError{Faults: faults}
}

// Close implements [message.Publisher]. It cuts the connections first, so the inserts in
// flight end at once, even on a server that stopped answering.
func (p postgresPublisher) Close() error {
	p.conns.close()
	return p.db.Close()
}

type postgresSubscriber struct {
	*wmsql.Subscriber
	db    *sql.DB
	conns *pgConns
}

func openPostgresSubscriber(s PostgresServer, group string, wlog watermill.LoggerAdapter) (message.Subscriber, error) {
	db, conns, err := openPostgres(s)
	if err != nil {
		return nil, err
	}
	sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
		ConsumerGroup:    group,
		SchemaAdapter:    postgresSchema{},
		OffsetsAdapter:   wmsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     100 * time.Millisecond,
		ResendInterval:   time.Second,
	}, wlog)
	if err != nil {
		db.Close()
		return nil, err
	}
	return postgresSubscriber{Subscriber: sub, db: db, conns: conns}, nil
}

// postgresSchema is watermill-sql's PostgreSQL schema, but a message read with an
// UnreadableKey in its metadata column has it dropped (see dropReserved).
type postgresSchema struct{ wmsql.DefaultPostgreSQLSchema }

func (s postgresSchema) UnmarshalMessage(row wmsql.Scanner) (wmsql.Row, error) {
	r, err := s.DefaultPostgreSQLSchema.UnmarshalMessage(row)
	if err == nil && r.Msg != nil {
		dropReserved(r.Msg)
	}
	return r, err
}

// Close implements [message.Subscriber]. It cuts the connections first, as the publisher's
// Close does: watermill-sql's Close waits for its subscriptions' queries. A message in hand
// whose acknowledgement is cut is read again (sources are at least once).
func (s postgresSubscriber) Close() error {
	s.conns.close()
	err := s.Subscriber.Close()
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}
