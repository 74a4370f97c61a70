package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
	"github.com/egridio/egrid/testkit/sinktest"
)

// rabbitGuard bounds each wait of the RabbitMQ subscriber's test: reaching it is a hang.
const rabbitGuard = 30 * time.Second

// next returns the next message of msgs, failing the test when none comes within the guard
// or the channel closes.
func next(t *testing.T, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatal("the subscription ended")
		}
		return m
	case <-time.After(rabbitGuard):
		t.Fatalf("no message within %s", rabbitGuard)
		return nil
	}
}

// The RabbitMQ subscriber hands out one message at a time and answers RabbitMQ as its reader
// answers it: a nacked message comes back, an acked one does not, and a message in hand when
// the subscription ends goes back to the queue for the next one. A message whose headers are
// not strings (not watermill-amqp's format) still comes through, its headers printed.
func TestRabbitMQSubscriber(t *testing.T) {
	server := brokertest.RabbitMQ(t)
	b, err := broker.Open(broker.Servers{RabbitMQ: &server}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	pub, _ := b.Publisher(broker.RabbitMQ)
	sub, _ := b.Subscriber(broker.RabbitMQ)
	queue := brokertest.Unique("egrid-rmq-sub-")

	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := sub.Subscribe(ctx, queue) // declares the queue
	if err != nil {
		t.Fatal(err)
	}
	one := message.NewMessage("one", []byte(`{"n":1}`))
	one.Metadata.Set("aeg-event-type", "Notification")
	if err := pub.Publish(queue, one, message.NewMessage("two", []byte(`{"n":2}`))); err != nil {
		t.Fatal(err)
	}
	m := next(t, msgs)
	if m.UUID != "one" || string(m.Payload) != `{"n":1}` || m.Metadata.Get("aeg-event-type") != "Notification" {
		t.Fatalf("first message %s %s %v, want one with its payload and metadata", m.UUID, m.Payload, m.Metadata)
	}
	select {
	case extra := <-msgs:
		t.Fatalf("message %s handed out while %s was unanswered", extra.UUID, m.UUID)
	default:
	}
	m.Nack()
	// RabbitMQ requeues a nacked message at its place: "one" again, then "two".
	if m = next(t, msgs); m.UUID != "one" {
		t.Fatalf("after the nack got %s, want one again", m.UUID)
	}
	m.Ack()
	if m = next(t, msgs); m.UUID != "two" {
		t.Fatalf("after the ack got %s, want two", m.UUID)
	}
	cancel() // "two" is in hand, unanswered
	for range msgs {
	}

	// A producer that is not watermill: headers of other types.
	conn, err := amqp.Dial(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), rabbitGuard)
	defer pcancel()
	err = ch.PublishWithContext(pctx, "", queue, false, false, amqp.Publishing{
		Headers: amqp.Table{"_watermill_message_uuid": int32(3), "attempt": int64(2)},
		Body:    []byte(`{"n":3}`),
	})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	if msgs, err = sub.Subscribe(ctx, queue); err != nil {
		t.Fatal(err)
	}
	if m = next(t, msgs); m.UUID != "two" {
		t.Fatalf("first after resubscribing got %s, want two (in hand when the subscription ended)", m.UUID)
	}
	m.Ack()
	m = next(t, msgs)
	if m.UUID != "3" || m.Metadata.Get("attempt") != "2" || string(m.Payload) != `{"n":3}` {
		t.Fatalf("foreign message %q %s %v, want UUID 3, attempt 2 and its body", m.UUID, m.Payload, m.Metadata)
	}
	m.Ack()
}

// A queue deleted after the publisher declared it does not swallow the messages published to
// it: RabbitMQ confirms a message that reaches no queue and drops it, so the publisher
// publishes mandatory and, when RabbitMQ returns the message, declares the queue again and
// publishes it again. The event was reported delivered and lost.
func TestRabbitMQPublishToADeletedQueue(t *testing.T) {
	server := brokertest.RabbitMQ(t)
	b := open(t, broker.Servers{RabbitMQ: &server})
	pub, _ := b.Publisher(broker.RabbitMQ)
	queue := brokertest.Unique("egrid-deleted-")
	s := newSink(t, pub, queue)
	conn, err := amqp.Dial(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	ctx, cancel := context.WithTimeout(context.Background(), rabbitGuard)
	defer cancel()

	first := sinktest.EventGridEvents(t, "first", 1)
	if err := s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, first)); err != nil {
		t.Fatalf("first Deliver: %v", err)
	}
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		t.Fatalf("deleting queue %s: %v", queue, err)
	}
	second := sinktest.EventGridEvents(t, "second", 2)
	if err := s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, second)); err != nil {
		t.Fatalf("Deliver after the queue was deleted: %v", err)
	}
	for _, ev := range second {
		d, ok, err := ch.Get(queue, true)
		if err != nil || !ok {
			t.Fatalf("event %s, reported delivered, is not in queue %s (ok %v): %v", ev.ID, queue, ok, err)
		}
		if id := d.Headers["_watermill_message_uuid"]; id != ev.ID {
			t.Fatalf("queue %s holds message %v, want event %s", queue, id, ev.ID)
		}
	}
}
