package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/sinks/broker"
)

// Addresses of the servers the build machines run.
const (
	defaultNATS     = "nats://127.0.0.1:4222"
	defaultRabbitMQ = "amqp://guest:guest@127.0.0.1:5672/"
	defaultRedis    = "127.0.0.1:6379"
	defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// Unique returns prefix followed by a random suffix of letters and digits: a subject, queue,
// stream, table or consumer name that no earlier run used.
func Unique(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Servers returns broker settings with kind's server configured for t (see [NATS],
// [RabbitMQ], [Redis], [Postgres]); GoChannel needs none.
func Servers(t testing.TB, kind broker.Kind) broker.Servers {
	t.Helper()
	var s broker.Servers
	switch kind {
	case broker.NATSJetStream:
		n := NATS(t)
		s.NATS = &n
	case broker.RabbitMQ:
		r := RabbitMQ(t)
		s.RabbitMQ = &r
	case broker.RedisStream:
		r := Redis(t)
		s.Redis = &r
	case broker.PostgreSQL:
		p := Postgres(t)
		s.Postgres = &p
	}
	return s
}

// NATS returns a NATS server with JetStream: the one at EGRID_TEST_NATS_URL or
// nats://127.0.0.1:4222 when it answers, else a new in-process server (with its store in a
// temporary directory) that stops when the test ends.
func NATS(t testing.TB) broker.NATSServer {
	t.Helper()
	u := envOr("EGRID_TEST_NATS_URL", defaultNATS)
	if reachable(hostOf(u)) {
		return broker.NATSServer{URL: u}
	}
	return broker.NATSServer{URL: StartNATS(t)}
}

// StartNATS starts an in-process NATS server with JetStream on a free loopback port, stopped
// when the test ends, and returns its URL.
func StartNATS(t testing.TB) string {
	t.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("starting an in-process NATS server: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		t.Fatal("the in-process NATS server did not accept connections within 10s")
	}
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv.ClientURL()
}

// RabbitMQ returns the RabbitMQ server at EGRID_TEST_RABBITMQ_URL or
// amqp://guest:guest@127.0.0.1:5672/, or skips the test when it does not answer.
func RabbitMQ(t testing.TB) broker.RabbitMQServer {
	t.Helper()
	u := envOr("EGRID_TEST_RABBITMQ_URL", defaultRabbitMQ)
	require(t, "RabbitMQ", hostOf(u), "EGRID_TEST_RABBITMQ_URL")
	return broker.RabbitMQServer{URL: u}
}

// Redis returns the Redis server at EGRID_TEST_REDIS_ADDR or 127.0.0.1:6379, or skips the
// test when it does not answer.
func Redis(t testing.TB) broker.RedisServer {
	t.Helper()
	a := envOr("EGRID_TEST_REDIS_ADDR", defaultRedis)
	require(t, "Redis", a, "EGRID_TEST_REDIS_ADDR")
	return broker.RedisServer{Addr: a}
}

// Postgres returns the PostgreSQL database at EGRID_TEST_POSTGRES_DSN or
// postgres://postgres@127.0.0.1:5432/test, or skips the test when it does not answer.
func Postgres(t testing.TB) broker.PostgresServer {
	t.Helper()
	d := envOr("EGRID_TEST_POSTGRES_DSN", defaultPostgres)
	require(t, "PostgreSQL", hostOf(d), "EGRID_TEST_POSTGRES_DSN")
	return broker.PostgresServer{DSN: d}
}

// require skips (or, under CI=true, fails) the test when nothing listens at addr.
func require(t testing.TB, name, addr, env string) {
	t.Helper()
	if reachable(addr) {
		return
	}
	msg := name + " is not running at " + addr + ": start it, or point " + env + " at one"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: broker tests never skip)")
	}
	t.Skip(msg)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// hostOf returns host:port of a URL, or s itself when it is not one.
func hostOf(s string) string {
	if u, err := url.Parse(strings.Split(s, ",")[0]); err == nil && u.Host != "" {
		return u.Host
	}
	return s
}

// reachable reports whether something listens at addr. A server that is not running refuses
// at once; the timeout only bounds a listener too busy to accept, which on a loaded machine
// took over a second and made a running broker read as absent (a failure under CI=true).
func reachable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// CreateStream creates (or updates) a JetStream stream named name capturing subjects, with
// in-memory storage, deleted when the test ends.
func CreateStream(t testing.TB, s broker.NATSServer, name string, subjects ...string) {
	t.Helper()
	nc, err := nats.Connect(s.URL)
	if err != nil {
		t.Fatalf("connecting to NATS at %s: %v", s.URL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: subjects, Storage: jetstream.MemoryStorage, Duplicates: time.Minute,
	}); err != nil {
		t.Fatalf("creating JetStream stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		nc, err := nats.Connect(s.URL)
		if err != nil {
			return
		}
		defer nc.Close()
		if js, err := jetstream.New(nc); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = js.DeleteStream(ctx, name)
		}
	})
}
