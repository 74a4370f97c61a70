package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// Metadata keys a delivered message carries besides the aeg-* delivery headers
// ([schemas.HeaderEventType] and the others, under the same lower-case names).
const (
	// MetadataContentType is the media type of the payload: [schemas.ContentTypeJSON] for the
	// Event Grid and custom schemas, [schemas.ContentTypeCloudEvent] for CloudEvents.
	MetadataContentType = "content-type"
)

// Config describes one broker destination: where on a publisher a subscription's events go.
// It is data; the publisher is a parameter of [New].
type Config struct {
	// Topic is the watermill topic to publish to: the NATS subject, RabbitMQ queue, Redis
	// stream, PostgreSQL topic or GoChannel topic. Required.
	Topic string `json:"topic" yaml:"topic"`
	// Name describes the destination in error messages ("NatsJetStream subject orders").
	// Default: the topic.
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
}

// Validate reports every problem with c at once (joined *[ConfigError] values), or nil.
func (c Config) Validate() error {
	if strings.TrimSpace(c.Topic) == "" {
		return &ConfigError{Field: "topic", Reason: "is empty; name the subject, queue, stream or topic to publish to"}
	}
	return nil
}

// ConfigError is one problem with a [Config] or a [Connections] setting.
type ConfigError struct {
	// Field is the setting at fault ("topic", "nats.url").
	Field string
	// Reason says what is wrong and what to do.
	Reason string
}

// Error describes the problem.
func (e *ConfigError) Error() string { return "broker " + e.Field + ": " + e.Reason }

// closeWait bounds [Sink.Close]. Publishes still running closeCutAfter into it have the
// connections whose calls still wait for the broker cut (see cutOf), and the rest of closeWait
// to return.
const (
	closeWait     = 5 * time.Second
	closeCutAfter = 4 * time.Second
)

// cutKey is the context key of a [Sink]'s closing, on the contexts of the messages it
// publishes.
type cutKey struct{}

// cutOf returns the closing of the [Sink] that publishes a message with context ctx: a context
// that ends when the sink, closing, gives up waiting for its publishes, so the publisher should
// cut the connection of a call that still waits for the broker (the RabbitMQ publisher does;
// see answeredOrCut). It returns nil for messages no sink publishes.
func cutOf(ctx context.Context) context.Context {
	c, _ := ctx.Value(cutKey{}).(context.Context)
	return c
}

// errClosed is the cause of a delivery to a closed sink.
var errClosed = errors.New("broker sink is closed")

// Sink publishes batches to one topic of a watermill [message.Publisher]. It implements
// [sinks.Sink] and [sinks.Closer]; it is safe for concurrent use. See the package
// documentation for the message shape and the outcome classification.
type Sink struct {
	pub   message.Publisher
	topic string
	name  string

	// cut ends, by cutNow, when Close gives up waiting for the publishes in flight (see cutOf).
	cut    context.Context
	cutNow context.CancelFunc
	// release gives back the connection of the sink's own, when the publisher gave it one
	// (RabbitMQ's of [Brokers]).
	release     func()
	releaseOnce sync.Once

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
}

// New validates cfg and returns a sink publishing to cfg.Topic on pub. The publisher stays the
// caller's: several sinks may share it, and [Sink.Close] does not close it. The RabbitMQ
// publisher of [Brokers] gives each sink a connection of its own, so that one sink's hung call,
// cut with its connection (at its timeout or at the sink's Close), ends no other sink's
// publishes; Close releases it.
func New(pub message.Publisher, cfg Config) (*Sink, error) {
	var errs []error
	if pub == nil {
		errs = append(errs, &ConfigError{Field: "publisher", Reason: "is nil; pass a watermill message.Publisher"})
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	name := cfg.Name
	if name == "" {
		name = cfg.Topic
	}
	cut, cutNow := context.WithCancel(context.Background())
	s := &Sink{pub: pub, topic: cfg.Topic, name: name, cut: cut, cutNow: cutNow, release: func() {}}
	if o, ok := pub.(interface {
		ownPublisher() (message.Publisher, func())
	}); ok {
		if own, release := o.ownPublisher(); own != nil {
			s.pub, s.release = own, release
		}
	}
	return s, nil
}

// Topic returns the topic the sink publishes to.
func (s *Sink) Topic() string { return s.topic }

// Deliver publishes b: one message per event, all in one Publish call. It returns nil when
// the publisher accepted every message, and a *[sinks.DeliveryError] otherwise. When ctx is
// done first it returns at once (TimedOut for a deadline, Canceled otherwise); the publish goes
// on in the background with its own copy of the payloads, and may still land: consumers
// dedupe by message UUID, which is the event id. Deliver does not read b after it returns.
func (s *Sink) Deliver(ctx context.Context, b *sinks.Batch) error {
	if err := ctx.Err(); err != nil {
		return s.failed(err, err)
	}
	msgs, err := Messages(b)
	var unsendable *sinks.UnsendableError
	if errors.As(err, &unsendable) {
		return err
	}
	if err != nil {
		return &sinks.DeliveryError{Outcome: schemas.GenericError, Err: fmt.Errorf("publishing to %s: %w", s.name, err)}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return &sinks.DeliveryError{Outcome: schemas.Canceled, Err: fmt.Errorf("publishing to %s: %w", s.name, errClosed)}
	}
	s.inflight.Add(1)
	s.mu.Unlock()

	// Publishers that take a context read it from the messages (AMQP, Redis); the others are
	// bounded by their own timeouts, and the select below stops waiting for them. The context
	// also carries the sink's closing, which cuts the calls still hung at Close (see cutOf).
	mctx := context.WithValue(ctx, cutKey{}, s.cut)
	for _, m := range msgs {
		m.SetContext(mctx)
	}
	done := make(chan error, 1)
	go func() {
		defer s.inflight.Done()
		done <- s.pub.Publish(s.topic, msgs...)
	}()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		if ue := s.unsendable(err, len(msgs)); ue != nil {
			return ue
		}
		return s.failed(err, ctx.Err())
	case <-ctx.Done():
		return s.failed(context.Cause(ctx), ctx.Err())
	}
}

// unsendable returns the *[sinks.UnsendableError] a failed publish of n messages amounts
// to, or nil. It is the publisher's own, when it names messages it found over the broker's
// limit (see [TooLargeError]); or, for a batch of one event, any failure classified as
// PayloadTooLarge: the broker refused that event for its size, which no retry changes, so it
// is the event's fault and not the destination's (SPEC §8).
func (s *Sink) unsendable(err error, n int) error {
	var ue *sinks.UnsendableError
	switch {
	case errors.As(err, &ue):
		faults := make([]sinks.EventFault, len(ue.Faults))
		for i, f := range ue.Faults {
			if f.Index < 0 || f.Index >= n || f.Err == nil {
				return nil // not ours to trust: a plain failure
			}
			faults[i] = sinks.EventFault{Index: f.Index, Err: fmt.Errorf("publishing to %s: %w", s.name, f.Err)}
		}
		if len(faults) == 0 {
			return nil
		}
		sent := ue.Sent
		if sent < 0 || sent > faults[0].Index {
			sent = 0 // not ours to trust either: it counts events before the first fault
		}
		return &sinks.UnsendableError{Faults: faults, Sent: sent}
	case n == 1 && classify(err, nil) == schemas.PayloadTooLarge:
		return &sinks.UnsendableError{Faults: []sinks.EventFault{{Index: 0, Err: fmt.Errorf("publishing to %s: %w", s.name, err)}}}
	}
	return nil
}

// TooLargeError says a message is over the broker's limit on the size of one message, so
// it can never be published there: the fault of its event, not of the destination.
type TooLargeError struct {
	// Broker is the broker whose limit it is.
	Broker Kind
	// Size is the message's size and Limit the broker's limit, in bytes, as the broker
	// counts them.
	Size, Limit int64
	// Setting names the broker's setting that sets Limit ("max_payload").
	Setting string
	// Part is what is over the limit when it is not the whole message, in bytes: "event id",
	// counted in characters (watermill-sql stores the message UUID, the event id, in a
	// VARCHAR(36) column).
	Part string
}

// Error says how large the message is and which limit it exceeds.
func (e *TooLargeError) Error() string {
	if e.Part != "" {
		return fmt.Sprintf("the %s is %d characters, over the %d-character limit of %s (%s); the event can never be published there", e.Part, e.Size, e.Limit, e.Broker, e.Setting)
	}
	return fmt.Sprintf("the message is %d bytes, over the %d-byte limit on one message of %s (%s); the event can never be published there", e.Size, e.Limit, e.Broker, e.Setting)
}

func (s *Sink) failed(err, parent error) error {
	return &sinks.DeliveryError{Outcome: classify(err, parent), Err: fmt.Errorf("publishing to %s: %w", s.name, err)}
}

// Close refuses further deliveries and waits for the publishes still running (those that
// outlived their attempt, and those of attempts still running), for at most 5 s. It does not
// close the publisher. After 4 s it gives up on the publishes whose calls still wait for the
// broker: the RabbitMQ publisher cuts their connection (a call may otherwise wait 10 s for an
// answer, and its channel's close 10 s more), so they return, and the next use of the publisher
// dials a new one; the other publishers are bounded by the message's context, or by their own
// timeouts. The events of such a publish are not lost: its attempt failed (or fails, Canceled),
// so they are still owed, and the subscription's next incarnation (after an update or a
// restart) delivers them again; some may have reached the broker already and arrive twice
// (consumers dedupe by message UUID, the event id). Close returns an error when a publish is
// still running at 5 s (a PostgreSQL publish whose attempt has not ended, which ends with it,
// or a publisher of the caller's own that does not honour its timeouts), and leaves it
// running. Close is idempotent.
func (s *Sink) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	defer s.releaseOnce.Do(s.release)
	defer s.cutNow()
	done := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(done)
	}()
	t := time.NewTimer(closeCutAfter)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	s.cutNow()
	t.Reset(closeWait - closeCutAfter)
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("closing the sink for %s: publishes still running after %s, which the broker has not answered; they go on until the publisher's own timeouts end them, and their events will be delivered again", s.name, closeWait)
	}
}

// Messages turns a batch into the messages [Sink.Deliver] publishes, one per event in order:
// UUID is the event id; the payload is the event alone in the batch's delivery schema (one
// JSON object, [schemas.Encoding.AppendEvent]); the metadata holds the protocol headers of
// [schemas.DeliveryHeaders] for that event alone (lower-case names, the payload's content type
// under [MetadataContentType], the event's traceparent when it has one) and its custom
// delivery headers ([sinks.Batch.EventHeaders] when set, else the batch's Headers; they
// never replace the protocol keys). Events that cannot be encoded or
// whose header values cannot be sent give an *[sinks.UnsendableError] listing every one of
// them, and no messages. It is exported for publishers that wrap [Sink] and for tests.
func Messages(b *sinks.Batch) ([]*message.Message, error) {
	enc := b.Encoding()
	msgs := make([]*message.Message, len(b.Events))
	var faults []sinks.EventFault
	var hdrs [8]schemas.Header
	for i, ev := range b.Events {
		if ev == nil {
			return nil, fmt.Errorf("event %d of the batch is nil", i)
		}
		payload, contentType, err := enc.AppendEvent(nil, ev)
		if err != nil {
			faults = append(faults, sinks.EventFault{Index: i, Err: err})
			continue
		}
		protocol, err := schemas.DeliveryHeaders{
			Schema: enc.Out, Subscription: b.Subscription, DeliveryCount: b.DeliveryCount,
			ContentType: contentType, Event: ev,
		}.Append(hdrs[:0])
		if err != nil {
			faults = append(faults, sinks.EventFault{Index: i, Err: err})
			continue
		}
		custom := b.Headers
		if len(b.EventHeaders) == len(b.Events) {
			custom = b.EventHeaders[i]
		}
		md := make(message.Metadata, len(protocol)+len(custom))
		for k, v := range custom {
			if !reserved[strings.ToLower(k)] {
				md[k] = v
			}
		}
		for _, h := range protocol {
			md[h.Name] = h.Value
		}
		m := message.NewMessage(ev.ID, payload)
		m.Metadata = md
		msgs[i] = m
	}
	if len(faults) > 0 {
		return nil, &sinks.UnsendableError{Faults: faults}
	}
	return msgs, nil
}

// reserved are the metadata keys a custom delivery header cannot set, in lower case.
var reserved = map[string]bool{
	schemas.HeaderEventType: true, schemas.HeaderSubscriptionName: true, schemas.HeaderDeliveryCount: true,
	schemas.HeaderMetadataVersion: true, schemas.HeaderDataVersion: true, schemas.HeaderOutputEventID: true,
	schemas.HeaderTraceparent: true, schemas.HeaderTracestate: true, MetadataContentType: true,
}
