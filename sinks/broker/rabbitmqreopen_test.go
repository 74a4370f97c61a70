package broker_test

import (
	"testing"
	"testing/synctest"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/egridio/egrid/sinks/broker"
)

// A queue that does not exist yet (the passive declare answered 404, which closes the
// channel) and a new channel RabbitMQ then does not open: the publish and the subscribe fail
// with an error saying so. The failed open left the channel nil, and closing it panicked in
// the delivery's own goroutine, which ended the process.
func TestQueueDeclareWhoseChannelDoesNotReopenFails(t *testing.T) {
	t.Run("publish", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeAMQP{passive404: true, ignoreReopen: true}
			defer f.stop()
			pub, err := broker.OpenRabbitMQPublisher(f.dial)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			err, _ = within(t, "Publish", func() error {
				return pub.Publish("orders", message.NewMessage("event-1", []byte(`{"n":1}`)))
			})
			if err == nil {
				t.Fatal("Publish succeeded on a channel RabbitMQ never opened")
			}
		})
	})
	t.Run("subscribe", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeAMQP{passive404: true, ignoreReopen: true}
			defer f.stop()
			sub, err := broker.OpenRabbitMQSubscriber(f.dial)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			err, _ = within(t, "Subscribe", func() error {
				_, err := sub.Subscribe(t.Context(), "orders")
				return err
			})
			if err == nil {
				t.Fatal("Subscribe succeeded on a channel RabbitMQ never opened")
			}
		})
	})
}
