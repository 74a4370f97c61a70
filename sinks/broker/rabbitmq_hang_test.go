package broker_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/sinktest"
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
	}{
		{ignore: "channel.open", what: "opening a channel"},
		{ignore: "queue.declare", what: `declaring queue "orders"`},
		{ignore: "confirm.select", what: "putting the channel in confirm mode"},
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
				if err := publish(pub); broker.Classify(err, nil) != schemas.SocketError {
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

// A sink's Close ends within its 5 s bound even when a RabbitMQ publish it waits for is hung
// (a call may wait 10 s for its answer, and its channel's close 10 s more): at 4 s the
// connections whose calls still wait for RabbitMQ are cut, so the publish returns and Close
// reports nothing left running. The attempt had failed, so its events are still owed and
// delivered again; the next publish dials a new connection. Close gave up at 5 s with the
// publish still running, and said the publisher did not honour its timeouts.
func TestSinkCloseCutsARabbitMQPublishThatHangs(t *testing.T) {
	for _, ignore := range []string{"channel.open", "queue.declare", "confirm.select", "basic.publish"} {
		t.Run(ignore+" unanswered", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeAMQP{ignore: ignore}
				defer f.stop()
				pub, err := broker.OpenRabbitMQPublisher(f.dial)
				if err != nil {
					t.Fatal(err)
				}
				defer pub.Close()
				s, err := broker.New(pub, broker.Config{Topic: "orders"})
				if err != nil {
					t.Fatal(err)
				}
				// The attempt is still running when Close begins (a subscription stopping).
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				delivered := make(chan error, 1)
				go func() {
					delivered <- s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "hung", 2)))
				}()
				synctest.Wait() // the publish waits for RabbitMQ
				err, took := within(t, "Close", s.Close)
				if err != nil {
					t.Errorf("Close = %v, want nil: the hung publish cut and ended", err)
				}
				if want := 4 * time.Second; took != want {
					t.Errorf("Close took %s, want %s (its cut, within its 5s bound)", took, want)
				}
				err = <-delivered
				if err == nil {
					t.Fatal("the cut attempt succeeded; want it failed, its events still owed")
				}
				if got := sinks.AsDeliveryError(err).Outcome; got != schemas.Canceled {
					t.Errorf("the cut attempt = %v (%s), want Canceled", err, got)
				}
				if !strings.Contains(err.Error(), "had not answered when the sink closed") {
					t.Errorf("the cut attempt's error %q does not say the sink closed while RabbitMQ had not answered", err)
				}
				// The connection was cut: the next use fails at once (Brokers dials anew).
				if err := pub.Publish("orders", message.NewMessage("event-9", []byte(`{}`))); broker.Classify(err, nil) != schemas.SocketError {
					t.Errorf("Publish after the cut = %v, want SocketError", err)
				}
			})
		})
	}
}

// A RabbitMQ broker that stops taking what the client writes holds a source's ack or nack for
// rabbitMQAnswerTimeout at most: the connection is then cut, so the subscription ends (its
// channel closes; the source subscribes again on a new connection) and RabbitMQ redelivers the
// message, unacknowledged on a lost connection. The write of the ack waited for good, and the
// subscriber's Close with it.
func TestRabbitMQSourceAnswerToABrokerThatStopsReading(t *testing.T) {
	for _, answer := range []string{"ack", "nack"} {
		t.Run(answer, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Without heartbeats (see OpenRabbitMQSubscriberWithoutHeartbeats): a broker that
				// stops reading takes no heartbeat either, and sending heartbeats ends no
				// connection whose peer still sends them.
				f := &fakeAMQP{deliver: []string{`{"n":1}`}, stallAfterDeliver: true, noHeartbeats: true}
				defer f.stop()
				sub, err := broker.OpenRabbitMQSubscriberWithoutHeartbeats(f.dial)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				msgs, err := sub.Subscribe(ctx, "orders")
				if err != nil {
					t.Fatal(err)
				}
				var m *message.Message
				select {
				case m = <-msgs:
				case <-time.After(hangGuard):
					t.Fatal("no message delivered")
				}
				synctest.Wait() // the broker has stopped reading
				start := time.Now()
				if answer == "ack" {
					m.Ack()
				} else {
					m.Nack()
				}
				ended := make(chan struct{})
				go func() {
					for range msgs {
					}
					close(ended)
				}()
				wait(t, ended, "the subscription ending after its unanswered "+answer)
				if took, bound := time.Since(start), broker.RabbitMQAnswerTimeout; took != bound {
					t.Errorf("the subscription ended %s after the %s, want %s", took, answer, bound)
				}
				if _, took := within(t, "the subscriber's Close", sub.Close); took != 0 {
					t.Errorf("the subscriber's Close took %s, want none: the connection was cut", took)
				}
			})
		})
	}
}

// Each sink of the Brokers' RabbitMQ publisher publishes on a connection of its own, so a
// sink's Close, which cuts the connection of a publish still waiting for RabbitMQ, ends no
// other sink's publish: the other one goes on until its own bound (the confirm RabbitMQ does
// not send: TimedOut at 10 s). On the connection the sinks shared, the cut failed it at 4 s.
func TestRabbitMQSinkCloseCutsOnlyItsOwnConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeAMQP{ignore: "basic.publish"}
		defer f.stop()
		pub := broker.NewPerSinkLazyPublisher(broker.RabbitMQ, func() (message.Publisher, error) {
			return broker.OpenRabbitMQPublisher(f.dial)
		})
		defer pub.Close()
		closing, err := broker.New(pub, broker.Config{Topic: "a"})
		if err != nil {
			t.Fatal(err)
		}
		other, err := broker.New(pub, broker.Config{Topic: "b"})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		otherDone := make(chan error, 1)
		go func() {
			otherDone <- other.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "other", 1)))
		}()
		closingDone := make(chan error, 1)
		go func() {
			closingDone <- closing.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "closing", 1)))
		}()
		synctest.Wait() // both publishes wait for their confirms
		if err, took := within(t, "Close", closing.Close); err != nil || took != 4*time.Second {
			t.Errorf("Close = %v after %s, want nil after 4s (its cut)", err, took)
		}
		if got := sinks.AsDeliveryError(<-closingDone).Outcome; got != schemas.Canceled {
			t.Errorf("the closed sink's attempt: %s, want Canceled", got)
		}
		err = <-otherDone
		if took := time.Since(start); took != broker.RabbitMQAnswerTimeout {
			t.Errorf("the other sink's attempt ended after %s (%v), want %s: its own bound, not the other sink's Close", took, err, broker.RabbitMQAnswerTimeout)
		}
		if got := sinks.AsDeliveryError(err).Outcome; got != schemas.TimedOut {
			t.Errorf("the other sink's attempt = %v (%s), want TimedOut", err, got)
		}
	})
}
