package router

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
)

// BrokerProperties are the destination properties of a broker endpointType (egrid; DESIGN.md
// §7): where on the broker a subscription publishes. Each endpoint type takes its own property
// and refuses the others:
//
//	NatsJetStream  subject  a NATS subject captured by a JetStream stream
//	RabbitMQ       queue    a queue, used as it is, or declared durable on first publish
//	RedisStream    stream   a Redis stream (created by the first message)
//	PostgreSQL     topic    a watermill-sql topic (table watermill_<topic>, created on first use;
//	                        at most 53 bytes, as PostgreSQL cuts table names at 63)
//	GoChannel      topic    a topic of the router's in-process GoChannel
//
// The connection settings are the server's (server.brokers in the YAML config, or
// [Deps.Publishers] in Go); see package sinks/broker for the message shape.
type BrokerProperties struct {
	Subject string `json:"subject,omitempty" yaml:"subject,omitempty"`
	Queue   string `json:"queue,omitempty" yaml:"queue,omitempty"`
	Stream  string `json:"stream,omitempty" yaml:"stream,omitempty"`
	Topic   string `json:"topic,omitempty" yaml:"topic,omitempty"`
}

// name returns the property endpoint type k reads.
func (p BrokerProperties) name(k broker.Kind) string {
	switch k.Property() {
	case "subject":
		return p.Subject
	case "queue":
		return p.Queue
	case "stream":
		return p.Stream
	}
	return p.Topic
}

// BrokerDestination returns a destination that publishes to name (a subject, queue, stream or
// topic, as k takes) on broker k.
func BrokerDestination(k broker.Kind, name string) Destination {
	d := Destination{EndpointType: k.String()}
	switch k.Property() {
	case "subject":
		d.Properties.Subject = name
	case "queue":
		d.Properties.Queue = name
	case "stream":
		d.Properties.Stream = name
	default:
		d.Properties.Topic = name
	}
	return d
}

// isBrokerEndpoint reports whether an endpointType names a broker.
func isBrokerEndpoint(endpointType string) bool {
	_, ok := broker.ParseKind(endpointType)
	return ok
}

// validateBrokerDestination checks a broker destination, appending every problem to errs, and
// returns the canonical endpoint type.
func validateBrokerDestination(d Destination, errs []error) (string, []error) {
	k, _ := broker.ParseKind(d.EndpointType)
	p := d.Properties
	if err := k.ValidateName(p.BrokerProperties.name(k)); err != nil {
		errs = append(errs, fmt.Errorf("destination.properties.%s: %w", k.Property(), err))
	}
	for prop, v := range map[string]string{"subject": p.Subject, "queue": p.Queue, "stream": p.Stream, "topic": p.Topic} {
		if v != "" && prop != k.Property() {
			errs = append(errs, fmt.Errorf("destination.properties.%s: endpointType %s does not take it: use %s", prop, k, k.Property()))
		}
	}
	if p.EndpointURL != "" || p.SinkName != "" {
		errs = append(errs, fmt.Errorf("destination.properties: endpointUrl and sinkName apply to WebHook and Sink destinations, not %s", k))
	}
	return k.String(), errs
}

// brokerSink builds the sink of a broker destination on the publisher [Deps.Publishers] holds
// for its broker.
func (r *Router) brokerSink(endpointType string, p DestinationProperties) (sinks.Sink, error) {
	k, ok := broker.ParseKind(endpointType)
	if !ok { // validate refuses it first
		return nil, fmt.Errorf("destination.endpointType %q is not a broker", clip.String(endpointType))
	}
	pub, ok := r.deps.Publishers[k]
	if !ok || pub == nil {
		return nil, errors.New(notConfigured(k, "publish"))
	}
	name := p.BrokerProperties.name(k)
	cfg := broker.Config{Topic: name, Name: fmt.Sprintf("%s %s %s", k, k.Property(), name)}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &brokerDestination{open: func() (*broker.Sink, error) { return broker.New(pub, cfg) }}, nil
}

// brokerDestination is a subscription's broker destination: a [broker.Sink], made on the first
// delivery, which the NATS and RabbitMQ publishers give a connection of its own, and closed
// when the actor delivering through it stops ([actors.ReleasingSink]) — at once when no
// delivery is running, else as the last one returns, never under one — which gives that
// connection back. A delivery after that (the actor's next run, after a restart) makes a new
// one. Without it, every subscription deleted or updated left its connection open for the
// life of the process.
type brokerDestination struct {
	open func() (*broker.Sink, error)

	mu  sync.Mutex
	cur *brokerRun // nil until a delivery makes it, and once released
}

// brokerRun is one [broker.Sink] of a destination, and the deliveries running on it.
type brokerRun struct {
	s        *broker.Sink
	running  int
	released bool // the destination let it go: the last delivery to return closes it
}

// Deliver implements [sinks.Sink].
func (d *brokerDestination) Deliver(ctx context.Context, b *sinks.Batch) error {
	d.mu.Lock()
	if d.cur == nil {
		s, err := d.open()
		if err != nil {
			d.mu.Unlock()
			return err
		}
		d.cur = &brokerRun{s: s}
	}
	run := d.cur
	run.running++
	d.mu.Unlock()
	defer d.returned(run)
	return run.s.Deliver(ctx, b)
}

func (d *brokerDestination) returned(run *brokerRun) {
	d.mu.Lock()
	run.running--
	last := run.released && run.running == 0
	d.mu.Unlock()
	if last {
		_ = run.s.Close() // bounded: see broker.Sink.Close
	}
}

// Release implements [actors.ReleasingSink]: it closes the destination's sink, which gives its
// connection back, once no delivery runs on it.
func (d *brokerDestination) Release() {
	d.mu.Lock()
	run := d.cur
	d.cur = nil
	idle := false
	if run != nil {
		run.released = true
		idle = run.running == 0
	}
	d.mu.Unlock()
	if idle {
		_ = run.s.Close()
	}
}

// notConfigured says what to do when a broker has no connection.
func notConfigured(k broker.Kind, verb string) string {
	if k.Setting() == "" {
		return fmt.Sprintf("broker %s: the router has no in-process GoChannel to %s to; pass one in router.Deps.Publishers and router.Deps.Subscribers (broker.Open makes them)", k, verb)
	}
	return fmt.Sprintf("broker %s: no %s server is configured to %s to; set server.brokers.%s in the config, or pass its publisher and subscriber in router.Deps (broker.Open makes them)", k, k, verb, k.Setting())
}
