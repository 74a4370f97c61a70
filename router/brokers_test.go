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
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
)

// brokerGuard bounds every wait of the broker tests for progress: reaching it is a hang, not a
// timing assertion.
const brokerGuard = 60 * time.Second

// For each broker: 1 000 events published to a topic with a broker subscription reach a
// consumer of the broker, with the aeg-* metadata, each exactly once unless an attempt of it
// timed out (at least once: the broker may have stored what the attempt no longer waited for,
// and the retry stores it again); with the broker gone the subscription retries per its policy
// and dead-letters on exhaustion, and a dead-lettered event never arrives, since no attempt of
// it reached the broker; with the broker back, delivery resumes. Brokers that are not running
// skip (never under CI=true); NATS runs in process when none is. GoChannel is in-process and
// cannot go away, so it runs the first part.
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
	attempts := &outcomes{of: map[string][]schemas.Outcome{}}
	r, err := router.New(router.Config{TimeScale: 100, NoJitter: true, InsecureDev: true}, router.Deps{
		Publishers:   pubBrokers.Publishers(),
		OnDeadLetter: func(d *router.DeadLetter) { dead <- d },
		OnAttempt:    attempts.add,
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
	msgs := got.waitFor(t, want)
	seen := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		if !want[m.UUID] {
			t.Fatalf("the consumer read message %q, which was never published", m.UUID)
		}
		if seen[m.UUID] && !attempts.uncertain(m.UUID) {
			t.Errorf("the consumer read event %s twice, though no attempt of it timed out (attempts: %v)", m.UUID, attempts.get(m.UUID))
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
	for _, m := range got.waitFor(t, map[string]bool{"up-1": true, "up-2": true, "up-3": true}) {
		if _, ended := ended[m.UUID]; ended {
			t.Errorf("dead-lettered event %s was delivered too, though the broker was down for each of its attempts (%v)", m.UUID, attempts.get(m.UUID))
		}
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

// wait waits until n messages were read and returns them all. It fails the test when no
// message comes for brokerGuard.
func (c *collected) wait(t *testing.T, n int) []*message.Message {
	t.Helper()
	return c.waitUntil(t, func(msgs []*message.Message) (bool, string) {
		return len(msgs) >= n, fmt.Sprintf("%d messages", n)
	})
}

// waitFor waits until a message of each event of ids was read and returns all messages read.
// It fails the test when no message comes for brokerGuard.
func (c *collected) waitFor(t *testing.T, ids map[string]bool) []*message.Message {
	t.Helper()
	return c.waitUntil(t, func(msgs []*message.Message) (bool, string) {
		read := make(map[string]bool, len(ids))
		for _, m := range msgs {
			if ids[m.UUID] {
				read[m.UUID] = true
			}
		}
		var missing []string
		for id := range ids {
			if !read[id] && len(missing) < 10 {
				missing = append(missing, id)
			}
		}
		return len(read) == len(ids), fmt.Sprintf("%d events more, such as %v", len(ids)-len(read), missing)
	})
}

// waitUntil waits until done says the messages read are all it waits for, and returns them.
// It fails the test, saying what is still awaited, when no message comes for brokerGuard: the
// guard bounds a hang, and a loaded machine that is slow but moves on does not reach it.
func (c *collected) waitUntil(t *testing.T, done func([]*message.Message) (bool, string)) []*message.Message {
	t.Helper()
	timeout := time.NewTimer(brokerGuard)
	defer timeout.Stop()
	read := -1
	for {
		c.mu.Lock()
		msgs := append([]*message.Message(nil), c.msgs...)
		if c.more == nil {
			c.more = make(chan struct{})
		}
		more := c.more
		c.mu.Unlock()
		ok, awaited := done(msgs)
		if ok {
			return msgs
		}
		if len(msgs) > read {
			read = len(msgs)
			timeout.Reset(brokerGuard)
		}
		select {
		case <-more:
		case <-timeout.C:
			t.Fatalf("the consumer read no message for %s, after %d; still awaited: %s", brokerGuard, len(msgs), awaited)
		}
	}
}

// outcomes holds the outcome of every attempt of each event, as the router reports them.
type outcomes struct {
	mu sync.Mutex
	of map[string][]schemas.Outcome
}

func (o *outcomes) add(rec *router.AttemptRecord) {
	if rec.NoAttempt {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range rec.EventIDs {
		o.of[id] = append(o.of[id], rec.Outcome)
	}
}

func (o *outcomes) get(id string) []schemas.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]schemas.Outcome(nil), o.of[id]...)
}

// uncertain reports whether an attempt of event id ended without the broker's answer (timed
// out or cancelled), so the broker may have stored it.
func (o *outcomes) uncertain(id string) bool {
	for _, out := range o.get(id) {
		if out == schemas.TimedOut || out == schemas.Canceled {
			return true
		}
	}
	return false
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

// A PostgreSQL topic whose table name PostgreSQL would cut (at 63 bytes: "watermill_" and 53
// bytes of topic) is refused when the subscription is created, saying the limit: two such
// topics sharing their first 53 bytes wrote to one table.
func TestPostgresTopicLongerThanATableNameIsRefused(t *testing.T) {
	pub := gochannel.NewGoChannel(gochannel.Config{}, nil) // nothing is published
	t.Cleanup(func() { _ = pub.Close() })
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{Publishers: map[broker.Kind]message.Publisher{broker.PostgreSQL: pub}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	ctx := context.Background()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	prefix := strings.Repeat("t", broker.PostgresMaxTopicBytes)
	for _, name := range []string{prefix + "_a", prefix + "_b"} {
		err := r.CreateSubscription(ctx, "orders", "long", router.SubscriptionSpec{Destination: router.BrokerDestination(broker.PostgreSQL, name)})
		if err == nil {
			t.Fatalf("a PostgreSQL topic of %d bytes was accepted", len(name))
		}
		for _, w := range []string{"destination.properties.topic", "55 bytes", "at most 53", "63"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CreateSubscription = %v; want it to say %q", err, w)
			}
		}
	}
}
