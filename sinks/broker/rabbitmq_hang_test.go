package broker_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/broker"
)

// within runs op and returns its error and how long it took in the bubble's virtual time,
// failing the test when op has not returned after the hang guard.
func within(t *testing.T, what string, op func() error) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err, time.Since(start)
	case <-time.After(hangGuard):
		t.Fatalf("%s: still waiting after %s", what, hangGuard)
		return nil, 0
	}
}

// A RabbitMQ broker that keeps the connection, and its heartbeats, and stops answering holds
// a publish, a subscribe or a Close for rabbitMQAnswerTimeout at most: the call that waits
// fails as TimedOut, saying what RabbitMQ did not answer, and the connection is cut so the
// next use dials a new one. amqp091 bounds none of these waits: they lasted until the
// heartbeats stopped, or for good.
func TestRabbitMQBrokerThatStopsAnswering(t *testing.T) {
	bound := broker.RabbitMQAnswerTimeout
	publish := func(pub message.Publisher) error {
		return pub.Publish("orders", message.NewMessage("event-1", []byte(`{"n":1}`)))
	}
	for _, tc := range []struct {
		ignore, what string
		cut          bool // the connection is cut (a confirm that does not come is not)
	}{
		{ignore: "channel.open", what: "opening a channel", cut: true},
		{ignore: "queue.declare", what: `declaring queue "orders"`, cut: true},
		{ignore: "confirm.select", what: "putting the channel in confirm mode", cut: true},
		{ignore: "basic.publish", what: "waiting for RabbitMQ to confirm message event-1"},
	} {
		t.Run("publish, "+tc.ignore+" unanswered", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeAMQP{ignore: tc.ignore}
				defer f.stop()
				pub, err := broker.OpenRabbitMQPublisher(f.dial)
				if err != nil {
					t.Fatal(err)
				}
				defer pub.Close()
				err, took := within(t, "Publish", func() error { return publish(pub) })
				assertNoAnswer(t, err, took, tc.what)
				// The connection was cut: the next use fails at once (Brokers dials anew).
				if err := publish(pub); tc.cut && broker.Classify(err, nil) != schemas.SocketError {
					t.Errorf("Publish after the cut = %v, want SocketError", err)
				}
			})
		})
	}
	t.Run("publish, channel.close unanswered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeAMQP{ignore: "channel.close"}
			defer f.stop()
			pub, err := broker.OpenRabbitMQPublisher(f.dial)
			if err != nil {
				t.Fatal(err)
			}
			defer pub.Close()
			// The message was confirmed: delivered, once the channel's close gave up.
			if err, took := within(t, "Publish", func() error { return publish(pub) }); err != nil || took != bound {
				t.Fatalf("Publish = %v after %s, want nil after %s", err, took, bound)
			}
			if err := publish(pub); broker.Classify(err, nil) != schemas.SocketError {
				t.Errorf("Publish after the cut = %v, want SocketError", err)
			}
		})
	})
	for _, tc := range []struct{ ignore, what string }{
		{ignore: "channel.open", what: "opening a channel"},
		{ignore: "queue.declare", what: `declaring queue "orders"`},
		{ignore: "basic.qos", what: `setting the prefetch of queue "orders"`},
		{ignore: "basic.consume", what: `consuming queue "orders"`},
	} {
		t.Run("subscribe, "+tc.ignore+" unanswered", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeAMQP{ignore: tc.ignore}
				defer f.stop()
				sub, err := broker.OpenRabbitMQSubscriber(f.dial)
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Close()
				err, took := within(t, "Subscribe", func() error {
					_, err := sub.Subscribe(context.Background(), "orders")
					return err
				})
				assertNoAnswer(t, err, took, tc.what)
			})
		})
	}
	t.Run("close, connection.close unanswered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fakeAMQP{ignore: "connection.close"}
			defer f.stop()
			pub, err := broker.OpenRabbitMQPublisher(f.dial)
			if err != nil {
				t.Fatal(err)
			}
			sub, err := broker.OpenRabbitMQSubscriber(f.dial)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			msgs, err := sub.Subscribe(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			if err := publish(pub); err != nil {
				t.Fatal(err)
			}
			if _, took := within(t, "the publisher's Close", pub.Close); took != bound {
				t.Errorf("the publisher's Close took %s, want %s", took, bound)
			}
			if _, took := within(t, "the subscriber's Close", sub.Close); took != bound {
				t.Errorf("the subscriber's Close took %s, want %s", took, bound)
			}
			for range msgs {
			}
		})
	})
}

func assertNoAnswer(t *testing.T, err error, took time.Duration, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s to time out", what)
	}
	if got := broker.Classify(err, nil); got != schemas.TimedOut {
		t.Errorf("outcome %s (%v), want TimedOut", got, err)
	}
	if !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), "RabbitMQ did not answer") {
		t.Errorf("error %q does not say RabbitMQ did not answer %s", err, what)
	}
	if bound := broker.RabbitMQAnswerTimeout; took != bound {
		t.Errorf("gave up after %s, want %s", took, bound)
	}
}
