package router

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
)

// SourceSpec declares a source (egrid; DESIGN.md §7): a topic fed from a broker through a
// watermill subscriber, as if each message were published to the topic. `sources:` in the
// YAML config lists them:
//
//	sources:
//	  - name: orders-in
//	    broker: NatsJetStream     # or RabbitMQ, RedisStream, PostgreSQL, GoChannel
//	    from: orders.incoming     # the subject, queue, stream or topic to read
//	    topic: orders             # the egrid topic it feeds
//	    poisonQueue: orders.poison
//
// A message's payload is decoded in the topic's input schema (and input mapping), exactly as
// the body of a publish request: a JSON array of events, or, in every input schema, one event
// object, measured against the limits as itself and with nothing after it. The source
// acknowledges a message only after its events are in the topic's journal (what a publish's
// 200 promises, SPEC §6); when the journal refuses them (the store is unavailable, the router
// is closing), it negatively acknowledges the message so the broker delivers it again, after
// a pause that grows while the failures last. A malformed message — one the publish API would
// answer 400 — can never succeed: it is published to the poison queue on the same broker, with
// the validation error in its metadata, and then acknowledged. Without a poison queue it is
// logged, counted (PublishFailCount, Error BadRequest) and acknowledged. A malformed message
// near the broker's size limit may fit without its metadata but not with it: it goes to the
// poison queue with a shortened reason (its first problem and how many others there are), and
// when even that does not fit it is dropped as without a poison queue, logged at ERROR.
//
// Every message a broker holds reaches the source this way, whatever else is wrong with it:
// an entry of a Redis stream not written by watermill (no UUID field) is named by its entry
// ID and read from its payload field, or from its only field; one with neither is malformed,
// with a reason saying so. A NATS message with a header sent more than once has the values
// joined by ", " in its metadata (a source reads nothing from a message's metadata, and a
// poisoned message keeps them all). A RabbitMQ header that is not a string is taken in its
// printed form. A message whose metadata carries [broker.UnreadableKey] is poisoned with its
// value as the reason, unread: only egrid's own subscribers set it, as they drop a header of
// that name a message arrives with.
//
// A source consumes one message at a time and is not built for the publish path's throughput:
// each message costs one journal append.
type SourceSpec struct {
	// Name names the source in logs and metrics: 3-64 letters, digits, '-' and '_'.
	Name string `json:"name" yaml:"name"`
	// Broker is NatsJetStream, RabbitMQ, RedisStream, PostgreSQL or GoChannel (ignoring case).
	Broker string `json:"broker" yaml:"broker"`
	// From is the subject (NatsJetStream; a JetStream stream must capture it), queue
	// (RabbitMQ), stream (RedisStream) or topic (PostgreSQL, GoChannel) to read.
	From string `json:"from" yaml:"from"`
	// Topic is the egrid topic the messages feed. It must exist when the source is added.
	Topic string `json:"topic" yaml:"topic"`
	// PoisonQueue is where malformed messages go, on the same broker and named as From is.
	// Optional.
	PoisonQueue string `json:"poisonQueue,omitempty" yaml:"poisonQueue,omitempty"`
}

// Metadata keys of a poisoned message, besides the original message's own. The first two are
// the keys watermill's PoisonQueue middleware uses, so existing poison-queue tooling reads
// them.
const (
	// PoisonReasonKey holds why the message was refused: the validation error.
	PoisonReasonKey = "reason_poisoned"
	// PoisonedFromKey holds the subject, queue, stream or topic the message was read from.
	PoisonedFromKey = "topic_poisoned"
	// PoisonSourceKey holds the name of the source that refused it.
	PoisonSourceKey = "egrid-source"
	// PoisonTopicKey holds the egrid topic it was meant for.
	PoisonTopicKey = "egrid-topic"
)

var sourceNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{3,64}$`)

// Validate reports every problem of the spec at once.
func (s SourceSpec) Validate() error {
	var errs []error
	if !sourceNameRE.MatchString(s.Name) {
		errs = append(errs, fmt.Errorf("source name %q is invalid: use 3-64 characters, letters, digits, '-' and '_'", clip.String(s.Name)))
	}
	k, ok := broker.ParseKind(s.Broker)
	switch {
	case s.Broker == "":
		errs = append(errs, errors.New("broker: required (NatsJetStream, RabbitMQ, RedisStream, PostgreSQL or GoChannel)"))
	case !ok:
		errs = append(errs, fmt.Errorf("broker %q is not supported: use NatsJetStream, RabbitMQ, RedisStream, PostgreSQL or GoChannel", clip.String(s.Broker)))
	default:
		if err := k.ValidateSourceName(s.From); err != nil {
			errs = append(errs, fmt.Errorf("from (the %s to read): %w", k.Property(), err))
		}
		if s.PoisonQueue != "" {
			if err := k.ValidateName(s.PoisonQueue); err != nil {
				errs = append(errs, fmt.Errorf("poisonQueue: %w", err))
			}
			if s.PoisonQueue == s.From {
				errs = append(errs, errors.New("poisonQueue: is the same as from; a poisoned message would come straight back"))
			}
		}
	}
	if err := ValidateTopicName(s.Topic); err != nil {
		errs = append(errs, fmt.Errorf("topic: %w", err))
	}
	return errors.Join(errs...)
}

// AddSource starts feeding spec.Topic from the broker, for the router's lifetime: [Router.Close]
// stops the sources first, before anything else. The topic must exist and the broker must be
// configured ([Deps.Subscribers], and [Deps.Publishers] for a poison queue). A broker that is
// down does not fail AddSource: the source subscribes as soon as it is back, logging each
// failed try.
func (r *Router) AddSource(spec SourceSpec) error {
	err := spec.Validate()
	if err != nil {
		return fmt.Errorf("source %q: %w", clip.String(spec.Name), err)
	}
	k, _ := broker.ParseKind(spec.Broker)
	var errs []error
	if _, err := r.topic(spec.Topic); err != nil {
		errs = append(errs, fmt.Errorf("topic: %w", err))
	}
	sub := r.deps.Subscribers[k]
	if sub == nil {
		errs = append(errs, errors.New(notConfigured(k, "read from")))
	}
	var poison message.Publisher
	if spec.PoisonQueue != "" {
		if poison = r.deps.Publishers[k]; poison == nil {
			errs = append(errs, fmt.Errorf("poisonQueue: %s", notConfigured(k, "publish")))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("source %q: %w", spec.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	src := &source{r: r, spec: spec, kind: k, sub: sub, poison: poison, stop: ctx, cancel: cancel, done: make(chan struct{})}
	if err := r.srcs.add(src); err != nil {
		cancel()
		return fmt.Errorf("source %q: %w", spec.Name, err)
	}
	go src.run()
	r.log.Info("source started", "source", spec.Name, "broker", k.String(), "from", spec.From, logattr.Topic, spec.Topic)
	return nil
}

// sourceSet holds the running sources. The zero value is ready.
type sourceSet struct {
	mu      sync.Mutex
	sources map[string]*source
	closed  bool
}

func (s *sourceSet) add(src *source) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, dup := s.sources[src.spec.Name]; dup {
		return errors.New("a source with this name is already running")
	}
	if s.sources == nil {
		s.sources = make(map[string]*source)
	}
	s.sources[src.spec.Name] = src
	return nil
}

// stop stops every source and waits for them: each finishes the message in hand (acked once
// durable, or nacked) and unsubscribes. It is idempotent.
func (s *sourceSet) stop() {
	s.mu.Lock()
	s.closed = true
	srcs := make([]*source, 0, len(s.sources))
	for _, src := range s.sources {
		srcs = append(srcs, src)
	}
	s.mu.Unlock()
	for _, src := range srcs {
		src.cancel()
	}
	for _, src := range srcs {
		<-src.done
	}
}

// Pauses of a source after failures: doubling from the first to the last.
const (
	sourceFirstPause = 100 * time.Millisecond
	sourceLastPause  = 10 * time.Second
	// poisonTimeout bounds publishing one message to the poison queue.
	poisonTimeout = 30 * time.Second
)

// source is one running source.
type source struct {
	r      *Router
	spec   SourceSpec
	kind   broker.Kind
	sub    message.Subscriber
	poison message.Publisher
	stop   context.Context // done when the source must stop
	cancel context.CancelFunc
	done   chan struct{}
	pause  time.Duration // the next pause after a failure
}

func (s *source) run() {
	defer close(s.done)
	log := s.r.log.With("source", s.spec.Name)
	for s.stop.Err() == nil {
		// The subscription outlives s.stop by the message in hand: some subscribers drop an
		// unacknowledged message when their context ends, and it is acked after that.
		subCtx, unsubscribe := context.WithCancel(context.Background())
		msgs, err := s.sub.Subscribe(subCtx, s.spec.From)
		if err != nil {
			unsubscribe()
			log.Warn("source cannot subscribe; trying again", "broker", s.kind.String(), "from", s.spec.From, "err", err, "in", s.pause)
			s.wait()
			continue
		}
		s.consume(msgs)
		unsubscribe()
		if s.stop.Err() == nil {
			log.Warn("source subscription ended; subscribing again", "broker", s.kind.String(), "from", s.spec.From, "in", s.pause)
			s.wait()
		}
	}
}

// consume handles messages until the subscription ends or the source must stop.
func (s *source) consume(msgs <-chan *message.Message) {
	for {
		select {
		case <-s.stop.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			s.handle(m)
		}
	}
}

// wait pauses after a failure (until the source must stop) and lengthens the next pause.
func (s *source) wait() {
	if s.pause == 0 {
		s.pause = sourceFirstPause
	}
	t := time.NewTimer(s.pause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop.Done():
	}
	s.pause = min(2*s.pause, sourceLastPause)
}

// handle feeds one message to the topic and acks, nacks or poisons it.
func (s *source) handle(m *message.Message) {
	r := s.r
	t, err := r.topic(s.spec.Topic)
	if err == nil {
		if unreadable := m.Metadata.Get(broker.UnreadableKey); unreadable != "" {
			s.poisoned(m, errors.New(unreadable))
			return
		}
		evs, decodeErr := r.decodeMessage(t, t.load(), m.Payload)
		if decodeErr != nil {
			s.poisoned(m, decodeErr)
			return
		}
		// Once queued, an append is answered whether or not the source is stopping.
		if err = r.ingest(context.WithoutCancel(s.stop), t, evs); err == nil {
			m.Ack()
			s.pause = 0
			return
		}
	}
	r.log.Warn("source could not feed its topic; the broker will redeliver", "source", s.spec.Name, logattr.Topic, s.spec.Topic, "message", m.UUID, "err", err, "in", s.pause)
	s.wait()
	m.Nack()
}

// poisoned sends a malformed message to the poison queue with the reason, then acks it. A
// message the poison queue refuses for a while (the broker is down) is nacked to try again. A
// message it can never take (*[sinks.UnsendableError]: the original fitted the broker, but not
// with the reason beside it) is sent again once with a shortened reason; refused again, it is
// dropped, as without a poison queue, and acked: redelivering it would only fail again.
func (s *source) poisoned(m *message.Message, reason error) {
	r := s.r
	log := r.log.With("source", s.spec.Name, logattr.Topic, s.spec.Topic, "message", m.UUID)
	r.metrics.Add(metrics.Key{Name: metrics.PublishFailCount, Scope: s.spec.Topic, Dim: "BadRequest"}, 1)
	if s.poison == nil {
		log.Error("source dropped a malformed message (no poisonQueue)", "err", reason)
		m.Ack()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), poisonTimeout)
	defer cancel()
	err := s.poison.Publish(s.spec.PoisonQueue, s.poisonMessage(ctx, m, reason.Error()))
	var unsendable *sinks.UnsendableError
	shortened := false
	if errors.As(err, &unsendable) {
		shortened = true
		err = s.poison.Publish(s.spec.PoisonQueue, s.poisonMessage(ctx, m, shortReason(reason)))
		if errors.As(err, &unsendable) {
			log.Error("source dropped a malformed message: its poison queue can never take it, even with a shortened reason; the message is acknowledged and lost. Raise the broker's message size limit, or have the publisher keep its messages further below it",
				"poisonQueue", s.spec.PoisonQueue, "bytes", len(m.Payload), "poisonErr", err, "err", reason)
			m.Ack()
			return
		}
	}
	if err != nil {
		log.Warn("source could not publish a malformed message to its poison queue; the broker will redeliver", "poisonQueue", s.spec.PoisonQueue, "err", err, "in", s.pause)
		s.wait()
		m.Nack()
		return
	}
	if shortened {
		log.Warn("source poisoned a malformed message with a shortened reason: the whole reason did not fit the broker beside it", "poisonQueue", s.spec.PoisonQueue, "err", reason)
	} else {
		log.Warn("source poisoned a malformed message", "poisonQueue", s.spec.PoisonQueue, "err", reason)
	}
	m.Ack()
}

// poisonMessage is m as it goes to the poison queue: its payload and metadata, with the reason
// and where it came from.
func (s *source) poisonMessage(ctx context.Context, m *message.Message, reason string) *message.Message {
	pm := message.NewMessage(m.UUID, m.Payload)
	for k, v := range m.Metadata {
		pm.Metadata[k] = v
	}
	delete(pm.Metadata, broker.UnreadableKey) // the reason says it
	pm.Metadata[PoisonReasonKey] = reason
	pm.Metadata[PoisonedFromKey] = s.spec.From
	pm.Metadata[PoisonSourceKey] = s.spec.Name
	pm.Metadata[PoisonTopicKey] = s.spec.Topic
	pm.SetContext(ctx)
	return pm
}

// shortReasonBytes bounds the problem a shortened reason quotes.
const shortReasonBytes = 200

// shortReason is the reason a poisoned message carries when the whole one does not fit: its
// first problem, clipped, and how many others were left out — all of them, not only those a
// decoder lists ([schemas.ProblemsError] lists the first 20 and counts every one).
func shortReason(reason error) string {
	first, more := reason.Error(), 0
	if ves := schemas.ValidationErrors(reason); len(ves) > 0 {
		first, more = ves[0].Error(), len(ves)-1
	}
	if pe := (*schemas.ProblemsError)(nil); errors.As(reason, &pe) && pe.Total > more+1 {
		more = pe.Total - 1
	}
	short := clip.N(first, shortReasonBytes)
	if more > 0 {
		short += fmt.Sprintf(" (and %d more problems, left out so that the message fits the broker; egrid's log lists the first of them)", more)
	}
	return short
}
