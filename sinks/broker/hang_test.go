package broker_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/sinktest"
)

// hangGuard bounds the waits of the hung-server tests: reaching it is a hang, not a timing
// assertion.
const hangGuard = 30 * time.Second

// silentServer is a TCP listener that accepts connections and never answers: a broker that
// stopped. closed receives once for each connection the client closed.
type silentServer struct {
	ln       net.Listener
	accepted chan struct{}
	closed   chan struct{}
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{ln: ln, accepted: make(chan struct{}, 64), closed: make(chan struct{}, 64)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.accepted <- struct{}{}
			s.wg.Add(1)
			go func() { // read what the client sends, answer nothing, see it close
				defer s.wg.Done()
				_, _ = io.Copy(io.Discard, c)
				s.closed <- struct{}{}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *silentServer) addr() string { return s.ln.Addr().String() }

// wait receives from ch within the guard, or fails the test with what did not happen.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangGuard):
		t.Fatalf("%s: not within %s", what, hangGuard)
	}
}

// A PostgreSQL server that accepts the connection and never answers holds neither the
// attempt, nor the connection, nor Close: the attempt ends at its deadline (TimedOut); the
// client gives the connection up (each read waits a bounded time, where lib/pq waited for
// good); and Close, with the insert still in flight, returns (watermill-sql's Close waited
// for the insert, so the Brokers' Close, and egrid's shutdown, hung).
func TestPostgresServerThatNeverAnswers(t *testing.T) {
	t.Run("connection given up", func(t *testing.T) {
		srv := newSilentServer(t)
		b, err := broker.Open(broker.Servers{Postgres: &broker.PostgresServer{DSN: "postgres://egrid:secret@" + srv.addr() + "/egrid?sslmode=disable"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer closeWithin(t, b)
		pub, _ := b.Publisher(broker.PostgreSQL)
		s := newSink(t, pub, "egrid_hung")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "hung", 1)))
		if got := sinks.AsDeliveryError(err).Outcome; got != schemas.TimedOut {
			t.Fatalf("Deliver = %v (%s), want TimedOut", err, got)
		}
		wait(t, srv.accepted, "the publisher connecting")
		wait(t, srv.closed, "the publisher giving up the connection to a server that never answers")
	})
	t.Run("close returns", func(t *testing.T) {
		srv := newSilentServer(t)
		b, err := broker.Open(broker.Servers{Postgres: &broker.PostgresServer{DSN: "postgres://egrid:secret@" + srv.addr() + "/egrid?sslmode=disable"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := b.Publisher(broker.PostgreSQL)
		s, err := broker.New(pub, broker.Config{Topic: "egrid_hung"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		delivered := make(chan error, 1)
		go func() {
			delivered <- s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "hung", 1)))
		}()
		wait(t, srv.accepted, "the publisher connecting")
		cancel()
		if got := sinks.AsDeliveryError(<-delivered).Outcome; got != schemas.Canceled {
			t.Fatalf("Deliver outcome %s, want Canceled", got)
		}
		_ = s.Close() // gives up on the publish after its bound
		closeWithin(t, b)
	})
}

// closeWithin closes b, failing the test when Close does not return within the guard (the
// Close goes on in the background then: the test's servers end it as they close).
func closeWithin(t *testing.T, b *broker.Brokers) {
	t.Helper()
	closed := make(chan struct{})
	go func() {
		_ = b.Close()
		close(closed)
	}()
	wait(t, closed, "closing the brokers with a request in flight to a server that never answers")
}

// A PostgreSQL server that keeps the connection and stops answering a statement (the table's
// creation or the insert) holds no publish past its attempt: at the attempt's deadline the
// connection is closed, so the publish ends with an error saying so (TimedOut, retried on the
// schedule), and the sink's Close finds nothing still running. watermill-sql runs its statements without
// a context: the publish went on, holding its connection, until the connection's 5-minute read
// bound, and the sink's Close gave up on it after 5 s.
func TestPostgresStatementUnansweredEndsAtTheAttemptsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answerDDL bool
	}{
		{name: "table creation unanswered"},
		{name: "insert unanswered", answerDDL: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakePostgres(t, tc.answerDDL)
			b := open(t, broker.Servers{Postgres: &broker.PostgresServer{DSN: srv.dsn()}})
			pub, _ := b.Publisher(broker.PostgreSQL)
			s, err := broker.New(pub, broker.Config{Topic: "egrid_hung"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err = s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "hung", 1)))
			if got := sinks.AsDeliveryError(err).Outcome; got != schemas.TimedOut {
				t.Fatalf("Deliver = %v (%s), want TimedOut", err, got)
			}
			wait(t, srv.unanswered, "the statement reaching the server")
			wait(t, srv.closed, "the connection of the attempt closed at its deadline")
			if err := s.Close(); err != nil {
				t.Errorf("Close = %v, want nil: the publish ended at its attempt's deadline", err)
			}

			// The publisher's own error says what happened.
			ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
			defer cancel2()
			m := message.NewMessage("event-2", []byte(`{}`))
			m.SetContext(ctx2)
			published := make(chan error, 1)
			go func() { published <- pub.Publish("egrid_hung", m) }()
			var perr error
			select {
			case perr = <-published:
			case <-time.After(hangGuard):
				t.Fatalf("Publish: still waiting after %s", hangGuard)
			}
			if got := broker.Classify(perr, nil); got != schemas.TimedOut {
				t.Errorf("Publish = %v (%s), want TimedOut", perr, got)
			}
			if perr == nil || !strings.Contains(perr.Error(), "had not answered when the attempt ended") {
				t.Errorf("Publish = %v, want it to say PostgreSQL had not answered when the attempt ended", perr)
			}
		})
	}
}

// A NATS server that keeps the connection and stops reading it holds no publish past its
// attempt: nats.go writes a message itself, under its connection's lock and without the
// context, bounded only by its 1-minute write timeout, so the publish (and every other publish
// of the connection behind it) waited up to a minute. At the attempt's deadline the stuck
// write's connection is now closed, so the publish ends then (TimedOut, saying NATS had not
// taken the message) and nats.go reconnects.
func TestNATSServerThatStopsReadingEndsThePublishAtItsDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stalled := make(chan struct{}, 64)
	halt := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(halt); _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { // INFO, then PONG to the client's first PING, then nothing read
				defer wg.Done()
				defer c.Close()
				_, _ = io.WriteString(c, `INFO {"server_id":"fake","version":"2.10.0","proto":1,"headers":true,"max_payload":67108864}`+"\r\n")
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						break
					}
				}
				_, _ = io.WriteString(c, "PONG\r\n")
				stalled <- struct{}{}
				<-halt
			}()
		}
	}()
	b := open(t, broker.Servers{NATS: &broker.NATSServer{URL: "nats://" + ln.Addr().String()}})
	pub, _ := b.Publisher(broker.NATSJetStream)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// Far more than the sockets buffer: the write is stuck until the connection is closed.
	m := message.NewMessage("event-1", make([]byte, 32<<20))
	m.SetContext(ctx)
	published := make(chan error, 1)
	go func() { published <- pub.Publish("orders.created", m) }()
	wait(t, stalled, "the client connecting")
	var perr error
	select {
	case perr = <-published:
	case <-time.After(hangGuard):
		t.Fatalf("Publish to a NATS server that stopped reading: still waiting after %s", hangGuard)
	}
	if got := broker.Classify(perr, nil); got != schemas.TimedOut {
		t.Errorf("Publish = %v (%s), want TimedOut", perr, got)
	}
	if perr == nil || !strings.Contains(perr.Error(), "NATS had not taken the message when the attempt ended") {
		t.Errorf("Publish = %v, want it to say NATS had not taken the message when the attempt ended", perr)
	}
}

// A PostgreSQL publish whose attempt ends while its connection is still being made sends no
// statement once the connection is made: the attempt was already reported failed, and an
// insert sent then would land after it (delivered as well, or even after the event was
// dead-lettered). lib/pq makes a connection without the context, and database/sql hands out
// a connection made after its context ended, so the insert went out unless the connection's
// cut came first.
func TestPostgresPublishSendsNothingAfterItsAttemptEnded(t *testing.T) {
	hold := make(chan struct{})
	srv := newFakePostgresHolding(t, false, hold)
	b := open(t, broker.Servers{Postgres: &broker.PostgresServer{DSN: srv.dsn()}})
	pub, _ := b.Publisher(broker.PostgreSQL)
	s := newSink(t, pub, "egrid_late")
	ctx, cancel := context.WithCancel(context.Background())
	delivered := make(chan error, 1)
	go func() {
		delivered <- s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, sinktest.EventGridEvents(t, "late", 1)))
	}()
	wait(t, srv.starting, "the publisher connecting")
	cancel()
	if got := sinks.AsDeliveryError(<-delivered).Outcome; got != schemas.Canceled {
		t.Fatalf("Deliver outcome %s, want Canceled", got)
	}
	close(hold) // the connection is made now, after its attempt ended
	wait(t, srv.closed, "the connection made after its attempt ended closed")
	select {
	case <-srv.unanswered:
		t.Fatal("the publish sent a statement on a connection made after its attempt ended")
	default:
	}
}
