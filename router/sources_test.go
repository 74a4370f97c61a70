package router_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
)

// sourceRig is a router with a NATS source feeding topic "orders", whose events a Go sink
// collects; the test publishes to the source's subject with a plain NATS client.
type sourceRig struct {
	r                 *router.Router
	brokers           *broker.Brokers
	js                jetstream.JetStream
	in, poison        string
	stream            string
	delivered         chan string
	natsURL, consumer string
}

// firstPoisoned returns the first message of the rig's poison queue, waiting for it at most
// brokerGuard.
func (rig *sourceRig) firstPoisoned(t *testing.T) jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokerGuard)
	defer cancel()
	cons, err := rig.js.CreateOrUpdateConsumer(ctx, rig.stream, jetstream.ConsumerConfig{FilterSubject: rig.poison, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(brokerGuard))
	if err != nil {
		t.Fatalf("reading the poison queue: %v", err)
	}
	return m
}

func newSourceRig(t *testing.T, log *slog.Logger) *sourceRig {
	t.Helper()
	n := brokertest.NATS(t)
	u := strings.ReplaceAll(brokertest.Unique(""), "-", "")
	rig := &sourceRig{in: "egrid.in." + u, poison: "egrid.poison." + u, stream: "EGRID_SRC_" + u, delivered: make(chan string, 64), natsURL: n.URL}
	brokertest.CreateStream(t, n, rig.stream, rig.in, rig.poison)
	rig.brokers = openBrokers(t, broker.Servers{NATS: &n})
	collect := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		for _, ev := range b.Events {
			rig.delivered <- ev.ID
		}
		return nil
	})
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{
		Publishers: rig.brokers.Publishers(), Subscribers: rig.brokers.Subscribers(),
		Sinks: map[string]sinks.Sink{"collect": collect}, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	rig.r = r
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	rig.createTopic(t)
	nc, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if rig.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	rig.consumer = broker.DefaultConsumerGroup + "_" + strings.ReplaceAll(rig.in, ".", "_")
	return rig
}

// collectingRouter starts a router reading brokers' sources into a topic made with
// sourceRig.createTopic, whose sink "collect" sends the ID of every event it gets to
// delivered.
func collectingRouter(t *testing.T, brokers *broker.Brokers) (r *router.Router, delivered chan string) {
	t.Helper()
	delivered = make(chan string, 64)
	collect := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		for _, ev := range b.Events {
			delivered <- ev.ID
		}
		return nil
	})
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{
		Subscribers: brokers.Subscribers(), Sinks: map[string]sinks.Sink{"collect": collect},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	(&sourceRig{r: r}).createTopic(t)
	return r, delivered
}

func (rig *sourceRig) createTopic(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := rig.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := rig.r.CreateSubscription(ctx, "orders", "collect", router.SubscriptionSpec{Destination: router.SinkDestination("collect")}); err != nil {
		t.Fatal(err)
	}
}

func (rig *sourceRig) send(t *testing.T, subject, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rig.js.Publish(ctx, subject, []byte(body)); err != nil {
		t.Fatalf("publishing to %s: %v", subject, err)
	}
}

func (rig *sourceRig) expect(t *testing.T, ids ...string) {
	t.Helper()
	got := map[string]bool{}
	for len(got) < len(ids) {
		select {
		case id := <-rig.delivered:
			got[id] = true
		case <-time.After(brokerGuard):
			t.Fatalf("delivered %v within %s; want %v", got, brokerGuard, ids)
		}
	}
	for _, id := range ids {
		if !got[id] {
			t.Fatalf("delivered %v; want %v", got, ids)
		}
	}
}

const validEvent = `{"id":"%s","subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-02T03:04:05Z","dataVersion":"1.0","data":{}}`

func ev(id string) string { return strings.Replace(validEvent, "%s", id, 1) }

// A NATS source feeds its topic: single events and batches are published to the topic and
// acknowledged; a malformed message lands in the poison queue with its validation error and
// is acknowledged too.
func TestNATSSourceFeedsTopic(t *testing.T) {
	rig := newSourceRig(t, nil)
	if err := rig.r.AddSource(router.SourceSpec{
		Name: "orders-in", Broker: "natsjetstream", From: rig.in, Topic: "orders", PoisonQueue: rig.poison,
	}); err != nil {
		t.Fatal(err)
	}
	rig.send(t, rig.in, ev("one"))
	rig.send(t, rig.in, `[`+ev("two")+`,`+ev("three")+`]`)
	rig.send(t, rig.in, `{"id":"bad","subject":"/orders/1","eventTime":"2026-01-02T03:04:05Z","data":{}}`) // no eventType
	rig.send(t, rig.in, ev("four"))
	rig.expect(t, "one", "two", "three", "four")

	// The poisoned message, with the reason.
	m := rig.firstPoisoned(t)
	if !strings.Contains(string(m.Data()), `"id":"bad"`) {
		t.Errorf("poison queue holds %s; want the malformed message", m.Data())
	}
	reason := m.Headers().Get(router.PoisonReasonKey)
	if !strings.Contains(reason, "eventType") {
		t.Errorf("poisoned message's %s = %q; want the validation error naming eventType", router.PoisonReasonKey, reason)
	}
	if got := m.Headers().Get(router.PoisonedFromKey); got != rig.in {
		t.Errorf("poisoned message's %s = %q, want %q", router.PoisonedFromKey, got, rig.in)
	}
	if got := m.Headers().Get(router.PoisonSourceKey); got != "orders-in" {
		t.Errorf("poisoned message's %s = %q, want orders-in", router.PoisonSourceKey, got)
	}

	// Everything read was acknowledged: after the router and the brokers are closed, the
	// source's durable consumer has nothing pending.
	if err := rig.r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := rig.brokers.Close(); err != nil {
		t.Fatal(err)
	}
	info := consumerInfo(t, rig)
	if info.NumAckPending != 0 || info.NumPending != 0 || info.Delivered.Consumer < 4 {
		t.Errorf("source consumer after close: %d delivered, %d awaiting ack, %d pending; want all 4 delivered and acked",
			info.Delivered.Consumer, info.NumAckPending, info.NumPending)
	}
}

// A message whose events the journal does not take is negatively acknowledged and delivered
// again by the broker; it reaches the topic once the topic can take it.
func TestNATSSourceRedeliversAfterATransientFailure(t *testing.T) {
	failed := make(chan string, 16)
	rig := newSourceRig(t, slog.New(signalHandler{msg: "source could not feed its topic", ch: failed}))
	if err := rig.r.AddSource(router.SourceSpec{Name: "orders-in", Broker: "NatsJetStream", From: rig.in, Topic: "orders"}); err != nil {
		t.Fatal(err)
	}
	rig.send(t, rig.in, ev("before"))
	rig.expect(t, "before")
	// Without its topic the source cannot feed anything: the message is nacked, and nacked
	// again on each redelivery, until the topic is back.
	if err := rig.r.DeleteTopic(context.Background(), "orders"); err != nil {
		t.Fatal(err)
	}
	rig.send(t, rig.in, ev("during"))
	select {
	case <-failed:
	case <-time.After(brokerGuard):
		t.Fatal("the source never reported failing to feed the deleted topic")
	}
	rig.createTopic(t)
	rig.expect(t, "during")
}

func TestAddSourceRefusesBadSpecs(t *testing.T) {
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec router.SourceSpec
		want []string // substrings of the error, one per problem
	}{
		{name: "everything missing", spec: router.SourceSpec{}, want: []string{"source name", "broker: required", "topic"}},
		{name: "unknown broker", spec: router.SourceSpec{Name: "src", Broker: "Kafka", From: "x", Topic: "orders"}, want: []string{`broker "Kafka" is not supported`}},
		{name: "wildcard subject", spec: router.SourceSpec{Name: "src", Broker: "NatsJetStream", From: "orders.>", Topic: "orders"}, want: []string{"from (the subject to read)"}},
		{name: "poison queue is the source", spec: router.SourceSpec{Name: "src", Broker: "RabbitMQ", From: "in", Topic: "orders", PoisonQueue: "in"}, want: []string{"poisonQueue: is the same as from"}},
		{name: "broker not configured", spec: router.SourceSpec{Name: "src", Broker: "RedisStream", From: "in", Topic: "orders", PoisonQueue: "bad"}, want: []string{"server.brokers.redis", "poisonQueue"}},
		{name: "unknown topic", spec: router.SourceSpec{Name: "src", Broker: "RedisStream", From: "in", Topic: "nope"}, want: []string{"topic", "not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.AddSource(tt.spec)
			if err == nil {
				t.Fatal("AddSource accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("AddSource = %v; want it to say %q", err, w)
				}
			}
		})
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	spec := router.SourceSpec{Name: "late", Broker: "GoChannel", From: "in", Topic: "orders"}
	if err := r.AddSource(spec); !errors.Is(err, router.ErrClosed) && (err == nil || !strings.Contains(err.Error(), "closed")) {
		t.Errorf("AddSource after Close = %v; want ErrClosed", err)
	}
}

// signalHandler is a slog handler that reports records whose message is msg.
type signalHandler struct {
	msg string
	ch  chan string
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.msg) {
		select {
		case h.ch <- r.Message:
		default:
		}
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

func consumerInfo(t *testing.T, rig *sourceRig) *jetstream.ConsumerInfo {
	t.Helper()
	nc, err := nats.Connect(rig.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, rig.stream, rig.consumer)
	if err != nil {
		t.Fatalf("looking up the source's durable consumer %s: %v", rig.consumer, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// A source reads through a connection the test can cut, on every broker that can go away:
// events published while the broker is out of reach reach the topic once it is back, without
// a restart, whether the subscriber reconnects by itself or the source subscribes again. Run
// under -race, it also guards each subscriber's reconnect against data races.
func TestSourcesResumeAfterAnOutage(t *testing.T) {
	for _, kind := range broker.Kinds {
		if kind == broker.GoChannel {
			continue // in process: it cannot go away
		}
		t.Run(kind.String(), func(t *testing.T) { testSourceOutage(t, kind) })
	}
}

func testSourceOutage(t *testing.T, kind broker.Kind) {
	direct := brokertest.Servers(t, kind)
	from := brokertest.Unique("egrid-src-")
	if kind == broker.NATSJetStream {
		from = strings.ReplaceAll(from, "-", ".")
		brokertest.CreateStream(t, *direct.NATS, brokertest.Unique("EGRID_SRC_"), from)
	}
	routed, proxy := brokertest.Through(t, direct, kind)
	brokers := openBrokers(t, routed)
	pub, ok := openBrokers(t, direct).Publisher(kind)
	if !ok {
		t.Fatalf("no %s publisher", kind)
	}
	r, delivered := collectingRouter(t, brokers)
	send := func(id string) {
		t.Helper()
		if err := pub.Publish(from, message.NewMessage(id, []byte(ev(id)))); err != nil {
			t.Fatalf("publishing %s to %s %s: %v", id, kind, from, err)
		}
	}
	// The first event goes out before the source starts, so the publisher makes the queue,
	// stream or table alone (two first uses of a PostgreSQL topic at once can both try to
	// create its table, and one fails); every source reads from the start.
	send("before")
	if err := r.AddSource(router.SourceSpec{Name: "orders-in", Broker: kind.String(), From: from, Topic: "orders"}); err != nil {
		t.Fatal(err)
	}
	// Delivery from a broker is at least once: an ack lost with the connection brings a
	// message back, so the waits below look for their events among whatever arrives. On
	// Redis a read in flight when the connection drops can leave the next message pending
	// with no reader: it comes back when the subscriber claims it, within about 20 s.
	await := func(id string) {
		t.Helper()
		for {
			select {
			case got := <-delivered:
				if got == id {
					return
				}
			case <-time.After(brokerGuard):
				t.Fatalf("event %s not delivered within %s", id, brokerGuard)
			}
		}
	}
	await("before")

	proxy.Down() // cuts the source's connections and refuses new ones
	send("during")
	select { // the source's subscriber noticed, and tried to connect again
	case <-proxy.Refused():
	case <-time.After(brokerGuard):
		t.Fatalf("the source did not try to reach %s again within %s of losing its connection", kind, brokerGuard)
	}
	proxy.Up()
	await("during")
	send("after")
	await("after")
}

// A malformed message close to the broker's size limit fits on the way in, but not with its
// reason beside it on the way to the poison queue. The source sends it again with a shortened
// reason; when even that does not fit, it drops the message, saying so at ERROR, and acks it:
// either way the message is not redelivered, and the messages behind it are not held up.
func TestNATSSourcePoisonsOrDropsAMessageTooLargeForItsReason(t *testing.T) {
	dropped := make(chan string, 16)
	rig := newSourceRig(t, slog.New(signalHandler{msg: "source dropped a malformed message: its poison queue can never take it", ch: dropped}))
	nc, err := nats.Connect(rig.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	limit := int(nc.MaxPayload())
	if err := rig.r.AddSource(router.SourceSpec{
		Name: "orders-in", Broker: "natsjetstream", From: rig.in, Topic: "orders", PoisonQueue: rig.poison,
	}); err != nil {
		t.Fatal(err)
	}
	// padded returns body, a JSON array or object ending in "}" or "}]", with a data member
	// added to its first event so that it is size bytes long.
	padded := func(body string, size int) string {
		t.Helper()
		i := strings.Index(body, `"data":{}`)
		fill := size - len(body) - len(`"pad":""`)
		if i < 0 || fill < 0 {
			t.Fatalf("cannot pad %d bytes to %d", len(body), size)
		}
		i += len(`"data":{`)
		return body[:i] + `"pad":"` + strings.Repeat("x", fill) + `"` + body[i:]
	}
	// Twenty events, each with a member the Event Grid schema does not have: twenty problems,
	// whose reason (about 6 KB) does not fit beside the message, but whose first does.
	var batch []string
	for i := range 20 {
		batch = append(batch, strings.Replace(ev(fmt.Sprintf("batch-%d", i)), `"data":{}`, `"data":{},"extra":1`, 1))
	}
	rig.send(t, rig.in, padded("["+strings.Join(batch, ",")+"]", limit-2000))
	// One event without eventType, 60 bytes below the limit: not even a shortened reason fits.
	rig.send(t, rig.in, padded(`{"id":"huge","subject":"/orders/1","eventTime":"2026-01-02T03:04:05Z","data":{}}`, limit-60))
	rig.send(t, rig.in, ev("after"))
	rig.expect(t, "after")
	select {
	case <-dropped:
	case <-time.After(brokerGuard):
		t.Fatal("the source never reported dropping the message its poison queue cannot take")
	}

	m := rig.firstPoisoned(t)
	if !strings.Contains(string(m.Data()), `"id":"batch-0"`) {
		t.Errorf("poison queue holds %.200s; want the batch", m.Data())
	}
	reason := m.Headers().Get(router.PoisonReasonKey)
	if !strings.Contains(reason, `field "extra"`) || !strings.Contains(reason, "19 more problems") {
		t.Errorf("poisoned message's %s = %q; want the first problem and the count of the others", router.PoisonReasonKey, reason)
	}

	if err := rig.r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := rig.brokers.Close(); err != nil {
		t.Fatal(err)
	}
	info := consumerInfo(t, rig)
	if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 || info.Delivered.Consumer != 3 {
		t.Errorf("source consumer after close: %d delivered, %d redelivered, %d awaiting ack, %d pending; want all 3 delivered once and acked",
			info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending, info.NumPending)
	}
}

// A message is decoded as the publish request it stands for, one event object being taken as
// itself: two objects separated by a comma are malformed JSON, which the publish API would
// answer 400, and go to the poison queue; one object as large as a publish may be is fed to
// the topic, not refused for the two bytes an array around it would add.
func TestNATSSourceDecodesAMessageAsOnePublish(t *testing.T) {
	rig := newSourceRig(t, nil)
	nc, err := nats.Connect(rig.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if max := nc.MaxPayload(); max < 1<<20 {
		t.Fatalf("the test server's max_payload is %d bytes; want at least 1 MiB", max)
	}
	if err := rig.r.AddSource(router.SourceSpec{
		Name: "orders-in", Broker: "natsjetstream", From: rig.in, Topic: "orders", PoisonQueue: rig.poison,
	}); err != nil {
		t.Fatal(err)
	}
	rig.send(t, rig.in, ev("pair-a")+","+ev("pair-b"))
	big := strings.Replace(ev("big"), `"data":{}`, `"data":{"pad":""}`, 1)
	big = strings.Replace(big, `"pad":""`, `"pad":"`+strings.Repeat("x", 1<<20-len(big))+`"`, 1) // exactly 1 MiB, the request limit
	rig.send(t, rig.in, big)
	rig.send(t, rig.in, ev("after"))
	got := map[string]bool{}
	for !got["big"] || !got["after"] {
		select {
		case id := <-rig.delivered:
			got[id] = true
		case <-time.After(brokerGuard):
			t.Fatalf("delivered %v within %s; want big and after", got, brokerGuard)
		}
	}
	if got["pair-a"] || got["pair-b"] {
		t.Errorf("delivered %v; want big and after, and neither event of the malformed pair", got)
	}

	m := rig.firstPoisoned(t)
	if !strings.Contains(string(m.Data()), `"id":"pair-a"`) {
		t.Errorf("poison queue holds %.200s; want the malformed pair", m.Data())
	}
	if reason := m.Headers().Get(router.PoisonReasonKey); !strings.Contains(reason, "not valid JSON") {
		t.Errorf("poisoned message's %s = %q; want it to say the message is not valid JSON", router.PoisonReasonKey, reason)
	}
}
