package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// natsConnect connects to the NATS server s as name, dialling through d, and reconnects
// without end after a lost connection.
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
