package broker_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/go-redis/v9"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
	"github.com/egridio/egrid/testkit/sinktest"
)

// Every broker sink passes the sink conformance suite against its real server (GoChannel in
// process). Servers that are not running skip, except under CI=true; NATS runs in-process
// when none is.
func TestConformance(t *testing.T) {
	for _, kind := range broker.Kinds {
		t.Run(kind.String(), func(t *testing.T) {
			sinktest.RunSink(t, sinktest.SinkSuite{
				New:      func(t *testing.T) *sinktest.Destination { return destination(t, kind) },
				Failures: func(t *testing.T) []sinktest.Failure { return failures(t, kind) },
			})
		})
	}
}

// open opens the brokers of s, closed when the test ends.
func open(t *testing.T, s broker.Servers) *broker.Brokers {
	t.Helper()
	b, err := broker.Open(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// topicFor returns a fresh topic on kind (with a JetStream stream capturing it on NATS).
func topicFor(t *testing.T, kind broker.Kind, s broker.Servers) string {
	t.Helper()
	topic := brokertest.Unique("egrid-test-")
	if kind == broker.NATSJetStream {
		topic = strings.ReplaceAll(topic, "-", ".")
		brokertest.CreateStream(t, *s.NATS, brokertest.Unique("EGRID_TEST_"), topic)
	}
	return topic
}

// consume records what a subscriber reads from topic, until the test ends. While held is
// set, it holds messages unacknowledged (GoChannel's Publish waits for the ack).
type consumer struct {
	rec     sinktest.Recorder
	mu      sync.Mutex
	hold    chan struct{} // non-nil while holding; closed on the first held message
	release chan struct{} // closed to stop holding
	once    bool
}

func consume(t *testing.T, sub message.Subscriber, topic string) *consumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		cancel()
		t.Fatalf("subscribing to %s: %v", topic, err)
	}
	c := &consumer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			c.mu.Lock()
			hold, release := c.hold, c.release
			if hold != nil && !c.once {
				c.once = true
				close(hold)
			}
			c.mu.Unlock()
			if hold != nil {
				select { // unacknowledged until released
				case <-release:
				case <-ctx.Done():
				}
				m.Ack()
				continue
			}
			header := make(map[string]string, len(m.Metadata))
			for k, v := range m.Metadata {
				header[strings.ToLower(k)] = v
			}
			c.rec.Add(sinktest.Received{ID: m.UUID, Header: header})
			m.Ack()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func (c *consumer) stall(t *testing.T) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold, c.release = make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(c.release) })
	return c.hold
}

// consumerLoops are the goroutines the destinations' consumers start and end as they read
// (each JetStream fetch runs in its own); they are the consumer's, not the sink's.
var consumerLoops = []string{
	"github.com/nats-io/nats.go/jetstream.(*pullConsumer).fetch.func1",
}

func destination(t *testing.T, kind broker.Kind) *sinktest.Destination {
	t.Helper()
	direct := brokertest.Servers(t, kind)
	topic := topicFor(t, kind, direct)
	if kind == broker.GoChannel {
		b := open(t, direct)
		pub, _ := b.Publisher(kind)
		sub, _ := b.Subscriber(kind)
		c := consume(t, sub, topic)
		return &sinktest.Destination{
			Sink: newSink(t, pub, topic), Received: c.rec.Wait, Headers: true,
			Stall: c.stall,
		}
	}
	// The sink goes through a proxy that can stall the broker; the consumer reads directly.
	proxied, proxy := brokertest.Through(t, direct, kind)
	pub, _ := open(t, proxied).Publisher(kind)
	sub, _ := open(t, direct).Subscriber(kind)
	c := consume(t, sub, topic)
	return &sinktest.Destination{
		Sink: newSink(t, pub, topic), Received: c.rec.Wait, Headers: true, Background: consumerLoops,
		Stall: func(t *testing.T) <-chan struct{} {
			held := proxy.Stall()
			t.Cleanup(proxy.Up)
			return held
		},
	}
}

func newSink(t *testing.T, pub message.Publisher, topic string) *broker.Sink {
	t.Helper()
	s, err := broker.New(pub, broker.Config{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func failures(t *testing.T, kind broker.Kind) []sinktest.Failure {
	t.Helper()
	direct := brokertest.Servers(t, kind)
	if kind == broker.GoChannel {
		gc := gochannel.NewGoChannel(gochannel.Config{}, nil)
		_ = gc.Close()
		return []sinktest.Failure{{Name: "closed pubsub", Sink: newSink(t, gc, "orders"), Outcome: schemas.SocketError}}
	}
	dead, _ := open(t, brokertest.DeadPort(t, direct, kind)).Publisher(kind)
	fs := []sinktest.Failure{{Name: "connection refused", Sink: newSink(t, dead, topicFor(t, kind, direct)), Outcome: schemas.SocketError}}
	pub, _ := open(t, direct).Publisher(kind)
	switch kind {
	case broker.NATSJetStream:
		// No stream captures the subject: the destination does not exist.
		fs = append(fs, sinktest.Failure{Name: "subject without a stream", Sink: newSink(t, pub, brokertest.Unique("egrid.nostream.")), Outcome: schemas.NotFound})
	case broker.RedisStream:
		// The key exists but is not a stream.
		key := brokertest.Unique("egrid-test-string-")
		rc := redis.NewClient(&redis.Options{Addr: direct.Redis.Addr})
		defer rc.Close()
		if err := rc.Set(context.Background(), key, "not a stream", 0).Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			rc := redis.NewClient(&redis.Options{Addr: direct.Redis.Addr})
			defer rc.Close()
			rc.Del(context.Background(), key)
		})
		fs = append(fs, sinktest.Failure{Name: "key of another type", Sink: newSink(t, pub, key), Outcome: schemas.InvalidDestination})
	}
	return fs
}
