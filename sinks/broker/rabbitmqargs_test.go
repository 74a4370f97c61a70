package broker_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
	"github.com/egridio/egrid/testkit/sinktest"
)

// A RabbitMQ queue that exists already, declared with other arguments than egrid's (a length
// limit, a quorum queue, a dead-letter exchange, not durable), is published to and read from
// as it is: egrid declared it with its own arguments, RabbitMQ refused the declaration (406
// PRECONDITION_FAILED, inequivalent arg), and every event to it was dropped as
// InvalidDestination.
func TestRabbitMQQueueDeclaredWithOtherArgumentsIsUsedAsItIs(t *testing.T) {
	server := brokertest.RabbitMQ(t)
	conn, err := amqp.Dial(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	admin, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, broker.Servers{RabbitMQ: &server})
	pub, _ := b.Publisher(broker.RabbitMQ)
	sub, _ := b.Subscriber(broker.RabbitMQ)
	tests := []struct {
		name    string
		durable bool
		args    amqp.Table
	}{
		{name: "length limit", durable: true, args: amqp.Table{"x-max-length": int32(1000)}},
		{name: "quorum", durable: true, args: amqp.Table{"x-queue-type": "quorum"}},
		{name: "dead-letter exchange", durable: true, args: amqp.Table{"x-dead-letter-exchange": "egrid-test-dlx"}},
		{name: "not durable", durable: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue := brokertest.Unique("egrid-rmq-args-")
			if _, err := admin.QueueDeclare(queue, tt.durable, false, false, false, tt.args); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = admin.QueueDelete(queue, false, false, false) })
			s := newSink(t, pub, queue)
			evs := sinktest.EventGridEvents(t, "args", 2)
			for _, ev := range evs {
				if err := s.Deliver(context.Background(), sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, []*schemas.Event{ev})); err != nil {
					t.Fatalf("Deliver to a queue declared with other arguments: %v", err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			msgs, err := sub.Subscribe(ctx, queue)
			if err != nil {
				t.Fatalf("Subscribe to a queue declared with other arguments: %v", err)
			}
			for _, ev := range evs {
				m := next(t, msgs)
				if m.UUID != ev.ID {
					t.Errorf("read %s, want %s", m.UUID, ev.ID)
				}
				m.Ack()
			}
		})
	}
}
