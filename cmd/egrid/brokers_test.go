package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/testkit/brokertest"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "egrid.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// `egrid validate` accepts broker settings, broker subscriptions and sources, and reports
// every problem with them at once, without connecting to any broker.
func TestValidateBrokerConfig(t *testing.T) {
	good := writeConfig(t, `
server:
  brokers:
    nats: {url: "nats://127.0.0.1:1"}
    redis: {addr: "127.0.0.1:1"}
topics:
  - name: orders
    eventSubscriptions:
      - name: audit
        properties:
          destination: {endpointType: natsjetstream, properties: {subject: audit.orders}}
      - name: cache
        properties:
          destination: {endpointType: RedisStream, properties: {stream: orders}}
sources:
  - {name: orders-in, broker: NatsJetStream, from: orders.in, topic: orders, poisonQueue: orders.poison}
  - {name: local-in, broker: GoChannel, from: local, topic: orders}
`)
	if code, out := cliRun(t, "validate", "--config", good); code != 0 || !strings.Contains(out, "is valid") {
		t.Fatalf("validate of a good broker config: exit %d\n%s", code, out)
	}

	bad := writeConfig(t, `
server:
  brokers:
    nats: {url: ""}
    rabbitmq: {url: "http://example.com"}
topics:
  - name: orders
    eventSubscriptions:
      - name: cache
        properties:
          destination: {endpointType: RedisStream, properties: {stream: orders}}
      - name: wrong-prop
        properties:
          destination: {endpointType: GoChannel, properties: {queue: orders}}
sources:
  - {name: pg-in, broker: PostgreSQL, from: "orders in", topic: orders}
  - {name: pg-in, broker: Kafka, from: x, topic: orders}
`)
	code, out := cliRun(t, "validate", "--config", bad)
	if code != 2 {
		t.Fatalf("validate of a bad broker config: exit %d, want 2\n%s", code, out)
	}
	for _, want := range []string{
		"server.brokers: broker nats.url", "broker rabbitmq.url",
		"server.brokers.redis", // the RedisStream subscription
		"destination.properties.queue: endpointType GoChannel does not take it",
		"sources[0]: from (the topic to read)", "cannot name a PostgreSQL topic", "add server.brokers.postgres",
		`sources[1]: source "pg-in" is declared twice`, `broker "Kafka" is not supported`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate output does not say %q:\n%s", want, out)
		}
	}
}

// `egrid serve` wires brokers from its config: a NATS source feeds a topic whose NATS
// subscription publishes every event to another subject.
func TestServeBrokerSourceAndSubscription(t *testing.T) {
	n := brokertest.NATS(t)
	u := strings.ReplaceAll(brokertest.Unique(""), "-", "")
	in, out := "egrid.in."+u, "egrid.out."+u
	stream := "EGRID_SERVE_" + u
	brokertest.CreateStream(t, n, stream, in, out)
	cfg := writeConfig(t, fmt.Sprintf(`
server:
  brokers:
    nats: {url: %q}
topics:
  - name: orders
    eventSubscriptions:
      - name: relay
        properties:
          destination: {endpointType: NatsJetStream, properties: {subject: %s}}
sources:
  - {name: orders-in, broker: NatsJetStream, from: %s, topic: orders}
`, n.URL, out, in))
	startServer(t, "--insecure-dev", "--data-dir", filepath.Join(t.TempDir(), "data"), "--config", cfg)

	nc, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, in, []byte(`{"id":"relayed-1","subject":"/o/1","eventType":"Order.Created","eventTime":"2026-01-02T03:04:05Z","dataVersion":"1","data":{}}`)); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{FilterSubject: out, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(60 * time.Second))
	if err != nil {
		t.Fatalf("reading %s: %v", out, err)
	}
	if got := m.Headers().Get("aeg-subscription-name"); got != "RELAY" || !strings.Contains(string(m.Data()), `"id":"relayed-1"`) {
		t.Fatalf("the relayed message is %s with headers %v", m.Data(), m.Headers())
	}
}
