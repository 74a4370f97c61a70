package router_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
)

// redisSourceRig is a router with a RedisStream source feeding topic "orders", whose events a
// Go sink collects; the test writes to the stream with a plain Redis client.
type redisSourceRig struct {
	r         *router.Router
	rc        *redis.Client
	pub       message.Publisher
	in        string
	delivered chan string
}

func newRedisSourceRig(t *testing.T, log *slog.Logger) *redisSourceRig {
	t.Helper()
	rs := brokertest.Redis(t)
	brokers := openBrokers(t, broker.Servers{Redis: &rs})
	pub, ok := brokers.Publisher(broker.RedisStream)
	if !ok {
		t.Fatal("no RedisStream publisher")
	}
	rig := &redisSourceRig{pub: pub, in: brokertest.Unique("egrid-src-"), delivered: make(chan string, 64)}
	collect := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		for _, ev := range b.Events {
			rig.delivered <- ev.ID
		}
		return nil
	})
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{
		Publishers: brokers.Publishers(), Subscribers: brokers.Subscribers(),
		Sinks: map[string]sinks.Sink{"collect": collect}, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	rig.r = r
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	(&sourceRig{r: r}).createTopic(t)
	rig.rc = redis.NewClient(&redis.Options{Addr: rs.Addr, Username: rs.Username, Password: rs.Password, DB: rs.DB})
	t.Cleanup(func() { _ = rig.rc.Close() })
	return rig
}

// xadd appends an entry with fields (name, value, ...) to stream, as a producer other than
// watermill does, and returns its ID.
func (rig *redisSourceRig) xadd(t *testing.T, stream string, fields ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := rig.rc.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: fields}).Result()
	if err != nil {
		t.Fatalf("XADD %s: %v", stream, err)
	}
	return id
}

// expect waits for the events ids, in any order, among whatever is delivered, and returns
// everything delivered meanwhile.
func (rig *redisSourceRig) expect(t *testing.T, ids ...string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for _, id := range ids {
		for !got[id] {
			select {
			case d := <-rig.delivered:
				got[d] = true
			case <-time.After(brokerGuard):
				t.Fatalf("delivered %v within %s; want %v", got, brokerGuard, ids)
			}
		}
	}
	return got
}

// A Redis stream entry not written by watermill (no UUID field) reaches the source like any
// other message and is not held up, nor does it hold up the messages behind it: read from its
// payload field, or from its only field, it is fed to the topic or poisoned by what it holds;
// with neither it is poisoned with a reason saying so. A poisoned entry is named by its entry
// ID. Everything read is acknowledged.
func TestRedisSourceReadsForeignEntries(t *testing.T) {
	rig := newRedisSourceRig(t, nil)
	poison := rig.in + "-poison"
	if err := rig.r.AddSource(router.SourceSpec{
		Name: "orders-in", Broker: "RedisStream", From: rig.in, Topic: "orders", PoisonQueue: poison,
	}); err != nil {
		t.Fatal(err)
	}
	badID := rig.xadd(t, rig.in, "payload", `{"not":"an event"}`)
	rig.xadd(t, rig.in, "data", ev("only-field"))
	twoID := rig.xadd(t, rig.in, "a", ev("a"), "b", ev("b"))
	if err := rig.pub.Publish(rig.in, message.NewMessage("good", []byte(ev("good")))); err != nil {
		t.Fatal(err)
	}
	if got := rig.expect(t, "only-field", "good"); got["a"] || got["b"] {
		t.Errorf("delivered %v; want nothing of the entry with two fields", got)
	}

	// The source handles one message at a time, so the poisoned ones went out before "good"
	// was read.
	ctx, cancel := context.WithTimeout(context.Background(), brokerGuard)
	defer cancel()
	entries, err := rig.rc.XRange(ctx, poison, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("poison stream holds %d entries (%v); want the 2 malformed ones", len(entries), entries)
	}
	want := []struct{ uuid, payload, reason string }{
		{badID, `{"not":"an event"}`, "eventType"},
		{twoID, "", "no field payload, and more than one other (a, b)"},
	}
	for i, w := range want {
		pm, err := (redisstream.DefaultMarshallerUnmarshaller{}).Unmarshal(entries[i].Values)
		if err != nil {
			t.Fatalf("poisoned entry %d: %v", i, err)
		}
		if pm.UUID != w.uuid || string(pm.Payload) != w.payload {
			t.Errorf("poisoned message %d is %s %q; want %s %q", i, pm.UUID, pm.Payload, w.uuid, w.payload)
		}
		if reason := pm.Metadata.Get(router.PoisonReasonKey); !strings.Contains(reason, w.reason) {
			t.Errorf("poisoned message %d's %s = %q; want it to say %q", i, router.PoisonReasonKey, reason, w.reason)
		}
		if got := pm.Metadata.Get(broker.UnreadableKey); got != "" {
			t.Errorf("poisoned message %d carries %s = %q; want it left out (the reason says it)", i, broker.UnreadableKey, got)
		}
	}
	if pm, _ := (redisstream.DefaultMarshallerUnmarshaller{}).Unmarshal(entries[1].Values); pm.Metadata.Get("a") != ev("a") {
		t.Errorf("poisoned entry with two fields has metadata %v; want its fields kept", pm.Metadata)
	}

	// Every entry is acknowledged: none stays pending for the consumer group.
	for {
		p, err := rig.rc.XPending(ctx, rig.in, broker.DefaultConsumerGroup).Result()
		if err != nil {
			t.Fatal(err)
		}
		if p.Count == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d entries still pending for consumer group %s; want all acknowledged", p.Count, broker.DefaultConsumerGroup)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Without a poison queue, an entry with no payload to read is dropped, logged and counted as
// a malformed message is, and the messages behind it are delivered.
func TestRedisSourceDropsAnUnreadableEntryWithoutPoisonQueue(t *testing.T) {
	dropped := make(chan string, 4)
	rig := newRedisSourceRig(t, slog.New(signalHandler{msg: "source dropped a malformed message", ch: dropped}))
	if err := rig.r.AddSource(router.SourceSpec{Name: "orders-in", Broker: "RedisStream", From: rig.in, Topic: "orders"}); err != nil {
		t.Fatal(err)
	}
	rig.xadd(t, rig.in, "a", "1", "b", "2")
	if err := rig.pub.Publish(rig.in, message.NewMessage("good", []byte(ev("good")))); err != nil {
		t.Fatal(err)
	}
	rig.expect(t, "good")
	select {
	case <-dropped:
	default:
		t.Error("the source did not log dropping the unreadable entry")
	}
	if got := rig.r.Metrics().Get(metrics.Key{Name: metrics.PublishFailCount, Scope: "orders", Dim: "BadRequest"}); got != 1 {
		t.Errorf("PublishFailCount BadRequest = %d; want 1", got)
	}
}

// A NATS message with a header sent more than once reaches the source with the values joined:
// a source reads only the payload, so it is fed to the topic, or poisoned keeping every
// value, as its payload decides; nothing is dropped unanswered.
func TestNATSSourceTakesARepeatedHeader(t *testing.T) {
	rig := newSourceRig(t, nil)
	if err := rig.r.AddSource(router.SourceSpec{
		Name: "orders-in", Broker: "NatsJetStream", From: rig.in, Topic: "orders", PoisonQueue: rig.poison,
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), brokerGuard)
	defer cancel()
	sendTagged := func(body string) {
		t.Helper()
		m := nats.NewMsg(rig.in)
		m.Header.Add("x-tag", "a")
		m.Header.Add("x-tag", "b")
		m.Data = []byte(body)
		if _, err := rig.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	sendTagged(ev("tagged"))
	sendTagged(`{"id":"bad-tagged"}`)
	rig.send(t, rig.in, ev("good"))
	rig.expect(t, "tagged", "good")

	m := rig.firstPoisoned(t)
	if !strings.Contains(string(m.Data()), "bad-tagged") {
		t.Errorf("poison queue holds %s; want the malformed tagged message", m.Data())
	}
	if got := m.Headers().Get("x-tag"); got != "a, b" {
		t.Errorf("poisoned message's x-tag = %q; want both values, %q", got, "a, b")
	}
	if got := rig.r.Metrics().Get(metrics.Key{Name: metrics.PublishFailCount, Scope: "orders", Dim: "BadRequest"}); got != 1 {
		t.Errorf("PublishFailCount BadRequest = %d; want 1", got)
	}
}

// A message that arrives with an egrid-unreadable header (metadata entry, field) of its own
// is fed to its topic by its payload, on every broker whose messages carry headers: the key
// is reserved to egrid's own subscribers, which set it on a message they could read no
// payload from, and a source poisons a message carrying it without reading its payload. It
// was taken as set by egrid, so anyone who could publish to the broker had a good message
// dropped (or poisoned) unread.
func TestSourcesDropAnOutsideUnreadableHeader(t *testing.T) {
	for _, kind := range []broker.Kind{broker.NATSJetStream, broker.RabbitMQ, broker.RedisStream, broker.PostgreSQL} {
		t.Run(kind.String(), func(t *testing.T) {
			servers := brokertest.Servers(t, kind)
			from := brokertest.Unique("egrid-src-")
			if kind == broker.NATSJetStream {
				from = strings.ReplaceAll(from, "-", ".")
				brokertest.CreateStream(t, *servers.NATS, brokertest.Unique("EGRID_SRC_"), from)
			}
			brokers := openBrokers(t, servers)
			pub, ok := brokers.Publisher(kind)
			if !ok {
				t.Fatalf("no %s publisher", kind)
			}
			r, delivered := collectingRouter(t, brokers)
			marked := message.NewMessage("marked", []byte(ev("marked")))
			marked.Metadata.Set(broker.UnreadableKey, "set by a publisher")
			// Both go out before the source starts, so the publisher makes the queue, stream
			// or table alone.
			for _, m := range []*message.Message{marked, message.NewMessage("after", []byte(ev("after")))} {
				if err := pub.Publish(from, m); err != nil {
					t.Fatalf("publishing %s to %s %s: %v", m.UUID, kind, from, err)
				}
			}
			if err := r.AddSource(router.SourceSpec{Name: "orders-in", Broker: kind.String(), From: from, Topic: "orders"}); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for !got["after"] || !got["marked"] {
				select {
				case id := <-delivered:
					got[id] = true
				case <-time.After(brokerGuard):
					t.Fatalf("delivered %v within %s; want marked, which has an %s header of its own, and after", got, brokerGuard, broker.UnreadableKey)
				}
			}
		})
	}
}
