package router_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
)

// brokerGuard bounds every wait of the broker tests: reaching it is a hang, not a timing
// assertion.
const brokerGuard = 60 * time.Second

// For each broker: 1 000 events published to a topic with a broker subscription reach a
// consumer of the broker exactly once each, with the aeg-* metadata; with the broker gone the
// subscription retries per its policy and dead-letters on exhaustion; with the broker back,
// delivery resumes. Brokers that are not running skip (never under CI=true); NATS runs in
// process when none is. GoChannel is in-process and cannot go away, so it runs the first part.
func TestBrokerSubscriptions(t *testing.T) {
	for _, kind := range broker.Kinds {
		t.Run(kind.String(), func(t *testing.T) { testBrokerSubscription(t, kind) })
	}
}

func testBrokerSubscription(t *testing.T, kind broker.Kind) {
	direct := brokertest.Servers(t, kind)
	name := brokertest.Unique("egrid-sub-")
	if kind == broker.NATSJetStream {
		name = strings.ReplaceAll(name, "-", ".")
		brokertest.CreateStream(t, *direct.NATS, brokertest.Unique("EGRID_SUB_"), name)
	}
	// The router reaches the broker through a proxy the test can take down; the consumer
	// reads directly.
	var proxy *brokertest.Proxy
	pubSide := direct
	if kind != broker.GoChannel {
		pubSide, proxy = brokertest.Through(t, direct, kind)
	}
	pubBrokers := openBrokers(t, pubSide)
	subBrokers := pubBrokers
	if kind != broker.GoChannel {
		subBrokers = openBrokers(t, direct)
	}
	sub, _ := subBrokers.Subscriber(kind)
	got := consumeAll(t, sub, name)

	dead := make(chan *router.DeadLetter, 16)
	r, err := router.New(router.Config{TimeScale: 100, NoJitter: true, InsecureDev: true}, router.Deps{
		Publishers:   pubBrokers.Publishers(),
		OnDeadLetter: func(d *router.DeadLetter) { dead <- d },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	ctx := context.Background()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	spec := router.SubscriptionSpec{
		Destination: router.BrokerDestination(kind, name),
		RetryPolicy: router.RetryPolicy{MaxDeliveryAttempts: 3},
		DeadLetterDestination: &router.DeadLetterDestination{
			EndpointType: "StorageBlob",
		},
	}
	spec.Destination.Properties.ResponseTimeoutInSeconds = 5
	spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
	if err := r.CreateSubscription(ctx, "orders", "to-broker", spec); err != nil {
		t.Fatal(err)
	}

	// 1 000 events, in publishes of 100.
	want := make(map[string]bool, 1000)
	for p := range 10 {
		evs := make([]any, 100)
		for i := range evs {
			id := fmt.Sprintf("evt-%d", p*100+i)
			want[id] = true
			evs[i] = event(id)
		}
		if err := r.Publish(ctx, "orders", evs...); err != nil {
			t.Fatal(err)
		}
	}
	msgs := got.wait(t, len(want))
	if len(msgs) != len(want) {
		t.Errorf("the consumer read %d messages for %d events", len(msgs), len(want))
	}
	seen := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		if !want[m.UUID] {
			t.Fatalf("the consumer read message %q, which was never published", m.UUID)
		}
		if seen[m.UUID] {
			t.Errorf("the consumer read event %s twice", m.UUID)
		}
		seen[m.UUID] = true
		requireDeliveryMetadata(t, m)
	}
	if t.Failed() || proxy == nil {
		return
	}

	// The broker goes away: each event is attempted 3 times, then dead-lettered.
	proxy.Down()
	for _, id := range []string{"down-1", "down-2"} {
		if err := r.Publish(ctx, "orders", event(id)); err != nil {
			t.Fatal(err)
		}
	}
	ended := map[string]*router.DeadLetter{}
	for len(ended) < 2 {
		select {
		case d := <-dead:
			ended[d.Event.ID] = d
		case <-time.After(brokerGuard):
			t.Fatalf("dead letters after %s with the broker down: %v; want down-1 and down-2", brokerGuard, ended)
		}
	}
	for id, d := range ended {
		if d.Reason != schemas.MaxDeliveryAttemptsExceeded || d.DeliveryAttempts != 3 {
			t.Errorf("event %s ended with %s after %d attempts; want MaxDeliveryAttemptsExceeded after 3", id, d.Reason, d.DeliveryAttempts)
		}
		if d.LastOutcome != schemas.SocketError && d.LastOutcome != schemas.TimedOut {
			t.Errorf("event %s last failed with %s; want SocketError (or TimedOut) for a broker that is gone", id, d.LastOutcome)
		}
	}

	// It comes back: new events are delivered.
	proxy.Up()
	for _, id := range []string{"up-1", "up-2", "up-3"} {
		if err := r.Publish(ctx, "orders", event(id)); err != nil {
			t.Fatal(err)
		}
	}
	after := got.wait(t, len(want)+3)
	ids := map[string]bool{}
	for _, m := range after[len(msgs):] {
		ids[m.UUID] = true
	}
	for _, id := range []string{"up-1", "up-2", "up-3"} {
		if !ids[id] {
			t.Errorf("event %s did not arrive after the broker came back (got %v)", id, ids)
		}
	}
	if ids["down-1"] || ids["down-2"] {
		t.Errorf("a dead-lettered event was delivered too: %v", ids)
	}
	select {
	case d := <-dead:
		t.Errorf("event %s was dead-lettered after the broker came back (%s)", d.Event.ID, d.Reason)
	default:
	}
}

func event(id string) map[string]any {
	return map[string]any{
		"id": id, "subject": "/orders/" + id, "eventType": "Order.Created",
		"eventTime": "2026-01-02T03:04:05Z", "dataVersion": "1.0", "data": map[string]any{"id": id},
	}
}

func requireDeliveryMetadata(t *testing.T, m *message.Message) {
	t.Helper()
	want := map[string]string{
		schemas.HeaderEventType: schemas.EventTypeNotification, schemas.HeaderSubscriptionName: "TO-BROKER",
		schemas.HeaderMetadataVersion: "1", schemas.HeaderDataVersion: "1.0", schemas.HeaderOutputEventID: m.UUID,
		broker.MetadataContentType: schemas.ContentTypeJSON,
	}
	for k, v := range want {
		if got := m.Metadata.Get(k); got != v {
			t.Fatalf("message %s: metadata %s = %q, want %q (all: %v)", m.UUID, k, got, v, m.Metadata)
		}
	}
	if n, err := strconv.Atoi(m.Metadata.Get(schemas.HeaderDeliveryCount)); err != nil || n < 0 {
		t.Fatalf("message %s: aeg-delivery-count %q is not a count", m.UUID, m.Metadata.Get(schemas.HeaderDeliveryCount))
	}
	if !strings.Contains(string(m.Payload), `"id":"`+m.UUID+`"`) || m.Payload[0] != '{' {
		t.Fatalf("message %s: payload is not the event object: %s", m.UUID, m.Payload)
	}
}

func openBrokers(t *testing.T, s broker.Servers) *broker.Brokers {
	t.Helper()
	b, err := broker.Open(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// collected is what a consumer read, in order.
type collected struct {
	mu   sync.Mutex
	msgs []*message.Message
	more chan struct{}
}

// consumeAll reads topic until the test ends, acking every message.
func consumeAll(t *testing.T, sub message.Subscriber, topic string) *collected {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		t.Fatalf("subscribing to %s: %v", topic, err)
	}
	c := &collected{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ch {
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			if c.more != nil {
				close(c.more)
				c.more = nil
			}
			c.mu.Unlock()
			m.Ack()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// wait waits until n messages were read and returns them all.
func (c *collected) wait(t *testing.T, n int) []*message.Message {
	t.Helper()
	timeout := time.NewTimer(brokerGuard)
	defer timeout.Stop()
	for {
		c.mu.Lock()
		if len(c.msgs) >= n {
			out := append([]*message.Message(nil), c.msgs...)
			c.mu.Unlock()
			return out
		}
		if c.more == nil {
			c.more = make(chan struct{})
		}
		more, have := c.more, len(c.msgs)
		c.mu.Unlock()
		select {
		case <-more:
		case <-timeout.C:
			t.Fatalf("the consumer read %d messages within %s; want %d", have, brokerGuard, n)
		}
	}
}

// TestBrokerMessagesCarryTheirOwnEventsDynamicHeaders delivers a batch of events to a broker,
// which sends each as a message of its own: each message carries the dynamic delivery
// attribute resolved from its own event (none when its event lacks the field), not the
// batch's first event's, and every one the static attribute.
func TestBrokerMessagesCarryTheirOwnEventsDynamicHeaders(t *testing.T) {
	kind := broker.GoChannel
	name := brokertest.Unique("egrid-sub-")
	b := openBrokers(t, brokertest.Servers(t, kind))
	sub, ok := b.Subscriber(kind)
	if !ok {
		t.Fatalf("no %s subscriber", kind)
	}
	got := consumeAll(t, sub, name)
	r, err := router.New(router.Config{TimeScale: 100, NoJitter: true, InsecureDev: true}, router.Deps{Publishers: b.Publishers()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	ctx := context.Background()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	spec := router.SubscriptionSpec{Destination: router.BrokerDestination(kind, name)}
	spec.Destination.Properties.MaxEventsPerBatch = 10
	spec.Destination.Properties.DeliveryAttributeMappings = []router.DeliveryAttributeMapping{
		{Name: "tenant", Type: router.MappingDynamic, Properties: router.DeliveryAttributeMappingProperties{SourceField: "data.id"}},
		{Name: "team", Type: router.MappingStatic, Properties: router.DeliveryAttributeMappingProperties{Value: "orders"}},
	}
	if err := r.CreateSubscription(ctx, "orders", "to-broker", spec); err != nil {
		t.Fatal(err)
	}
	evs := make([]any, 5)
	for i := range evs {
		evs[i] = event(fmt.Sprintf("evt-%d", i))
	}
	evs[3].(map[string]any)["data"] = map[string]any{"other": "x"} // no data.id
	if err := r.Publish(ctx, "orders", evs...); err != nil {
		t.Fatal(err)
	}
	for _, m := range got.wait(t, len(evs)) {
		want := m.UUID
		if m.UUID == "evt-3" {
			want = ""
		}
		if tenant := m.Metadata.Get("tenant"); tenant != want {
			t.Errorf("message of event %s carries tenant %q, want %q", m.UUID, tenant, want)
		}
		if team := m.Metadata.Get("team"); team != "orders" {
			t.Errorf("message of event %s carries team %q, want orders", m.UUID, team)
		}
	}
}
