package broker_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
	"github.com/egridio/egrid/testkit/sinktest"
)

// wantFault checks that err is an *sinks.UnsendableError naming event index alone, over the
// limit of broker k, and returns its *broker.TooLargeError.
func wantFault(t *testing.T, err error, index int, k broker.Kind) *broker.TooLargeError {
	t.Helper()
	var ue *sinks.UnsendableError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v (%s), want an *sinks.UnsendableError naming event %d", err, sinks.AsDeliveryError(err).Outcome, index)
	}
	var tl *broker.TooLargeError
	if len(ue.Faults) != 1 || ue.Faults[0].Index != index || !errors.As(ue.Faults[0].Err, &tl) || tl.Broker != k {
		t.Fatalf("faults %+v, want event %d alone, over a limit of %s", ue.Faults, index, k)
	}
	return tl
}

func unsendable(t *testing.T, err error) *sinks.UnsendableError {
	t.Helper()
	var ue *sinks.UnsendableError
	if !errors.As(err, &ue) {
		t.Fatalf("got %v, want an *sinks.UnsendableError", err)
	}
	return ue
}

// An event whose message RabbitMQ refuses for its size (over max_message_size: RabbitMQ closes
// the channel with 406 PRECONDITION_FAILED) is that event's own fault, in a batch of several
// too: Deliver names it alone in an *sinks.UnsendableError, so the subscription ends it and
// sends the others again, not counting it against the endpoint. The publisher learns the
// limit from the refusal, and from then on sends nothing of a batch that holds a message over
// it. The batch failed whole, and as Busy (the nack of the closed channel), not even
// PayloadTooLarge.
func TestRabbitMQMessageOverMaxMessageSizeIsTheEventsFault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 2000
		f := &fakeAMQP{maxBody: limit}
		defer f.stop()
		pub, err := broker.OpenRabbitMQPublisher(f.dial)
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		s := newSink(t, pub, "orders")
		small := sinktest.EventGridEvents(t, "small", 4)
		deliver := func(evs ...*schemas.Event) error {
			return s.Deliver(context.Background(), sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, evs))
		}

		err = deliver(small[0], bigEvent(t, "big-1", 5000), small[1])
		if tl := wantFault(t, err, 1, broker.RabbitMQ); tl.Limit != limit || tl.Size <= limit || tl.Setting != "max_message_size" {
			t.Errorf("limit %+v, want the broker's %d bytes, learnt from its refusal", tl, limit)
		}
		if got := len(f.bodies()); got != 1 {
			t.Fatalf("the broker took %d messages, want 1: the one before the refused message", got)
		}
		if ue := unsendable(t, err); ue.Sent != 1 || strings.Contains(err.Error(), "nothing was sent") || !strings.Contains(err.Error(), "batch event 0 was sent") {
			t.Errorf("Sent = %d, error %q; want it to say batch event 0 was sent", ue.Sent, err)
		}
		// The others of the batch, sent again, go through.
		if err := deliver(small[0], small[1]); err != nil {
			t.Fatalf("Deliver of the others: %v", err)
		}
		// The limit is known now: nothing of a batch holding a message over it is sent.
		err = deliver(small[2], bigEvent(t, "big-2", 5000), small[3])
		if tl := wantFault(t, err, 1, broker.RabbitMQ); tl.Limit != limit {
			t.Errorf("limit %d, want %d", tl.Limit, limit)
		}
		if got := len(f.bodies()); got != 3 {
			t.Fatalf("the broker holds %d messages, want 3: nothing of the last batch", got)
		}
		if ue := unsendable(t, err); ue.Sent != 0 || !strings.Contains(err.Error(), "nothing was sent") {
			t.Errorf("Sent = %d, error %q; want it to say nothing was sent", ue.Sent, err)
		}
	})
}

// The same against the real RabbitMQ, at its own max_message_size (128 MiB by default, 16 MiB
// from RabbitMQ 4): the refusal is read as the fake gives it, the other messages of the batch
// are stored, and the limit learnt is the broker's.
func TestRabbitMQRealBrokerRefusesAMessageOverItsMaxSize(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes a message of 128 MiB")
	}
	server := brokertest.RabbitMQ(t)
	b := open(t, broker.Servers{RabbitMQ: &server})
	pub, _ := b.Publisher(broker.RabbitMQ)
	queue := brokertest.Unique("egrid-maxsize-")
	conn, err := amqp.Dial(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })

	const rabbitMQ3Default = 128 << 20
	huge := message.NewMessage("huge", bytes.Repeat([]byte("x"), rabbitMQ3Default+1))
	err = pub.Publish(queue, message.NewMessage("first", []byte(`{"n":1}`)), huge, message.NewMessage("last", []byte(`{"n":3}`)))
	tl := wantFault(t, err, 1, broker.RabbitMQ)
	if tl.Limit <= 0 || tl.Limit > rabbitMQ3Default || tl.Size != rabbitMQ3Default+1 {
		t.Errorf("limit %+v, want the broker's max_message_size, and the message's %d bytes", tl, rabbitMQ3Default+1)
	}
	if !strings.Contains(err.Error(), "PRECONDITION_FAILED") {
		t.Errorf("error %q does not carry RabbitMQ's answer", err)
	}
	d, ok, err := ch.Get(queue, true)
	if err != nil || !ok || d.Headers["_watermill_message_uuid"] != "first" {
		t.Fatalf("queue %s: %v %v %v, want the message before the refused one", queue, d.Headers, ok, err)
	}
	if err := pub.Publish(queue, message.NewMessage("last", []byte(`{"n":3}`))); err != nil {
		t.Fatalf("publishing the others again: %v", err)
	}
}

// An event whose id is longer than watermill-sql's uuid column (VARCHAR(36)) can never be
// stored on PostgreSQL: Deliver names it alone in an *sinks.UnsendableError before inserting
// anything, and the others of its batch go through without it. The server refused the whole
// statement (22001), so the batch failed as BadRequest, against the endpoint.
func TestPostgresEventIDLongerThanTheUUIDColumnIsTheEventsFault(t *testing.T) {
	server := brokertest.Postgres(t)
	b := open(t, broker.Servers{Postgres: &server})
	pub, _ := b.Publisher(broker.PostgreSQL)
	topic := brokertest.Unique("egrid_longid_")
	s := newSink(t, pub, topic)
	ctx := context.Background()
	small := sinktest.EventGridEvents(t, "id", 2)
	long := bigEvent(t, strings.Repeat("l", 37), 10)

	err := s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, []*schemas.Event{small[0], long, small[1]}))
	if tl := wantFault(t, err, 1, broker.PostgreSQL); tl.Size != 37 || tl.Limit != 36 || !strings.Contains(err.Error(), "event id") {
		t.Errorf("fault %+v (%v), want the id's 37 characters over 36", tl, err)
	}
	if err := s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, small)); err != nil {
		t.Fatalf("Deliver of the others: %v", err)
	}
	db, err := sql.Open("postgres", server.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS "watermill_` + topic + `"`) })
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM "watermill_` + topic + `"`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("the table holds %d rows, want the 2 other events", n)
	}
}

// A row PostgreSQL refuses for its data (here a CHECK the operator added to the table; a
// payload the json column does not parse is another) fails the statement without saying which
// row: the publisher finds the refused events by inserting the rows again one by one in a
// transaction it rolls back, and Deliver names them alone in an *sinks.UnsendableError, nothing
// stored, so the others of the batch go through without them. The whole batch failed as
// BadRequest, against the endpoint, and was dead-lettered with the bad event.
func TestPostgresRowRefusedForItsDataIsTheEventsFault(t *testing.T) {
	server := brokertest.Postgres(t)
	b := open(t, broker.Servers{Postgres: &server})
	pub, _ := b.Publisher(broker.PostgreSQL)
	topic := brokertest.Unique("egrid_refused_")
	s := newSink(t, pub, topic)
	ctx := context.Background()
	evs := sinktest.EventGridEvents(t, "row", 4)
	bad := bigEvent(t, "forbidden-1", 10)
	bad2 := bigEvent(t, "forbidden-2", 10)
	deliver := func(evs ...*schemas.Event) error {
		return s.Deliver(ctx, sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, evs))
	}
	if err := deliver(evs[0]); err != nil { // creates the table
		t.Fatal(err)
	}
	db, err := sql.Open("postgres", server.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	table := `"watermill_` + topic + `"`
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS ` + table) })
	if _, err := db.Exec(`ALTER TABLE ` + table + ` ADD CONSTRAINT no_forbidden CHECK (uuid NOT LIKE 'forbidden%')`); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	err = deliver(evs[1], bad, evs[2], bad2)
	var ue *sinks.UnsendableError
	if !errors.As(err, &ue) {
		t.Fatalf("Deliver = %v (%s), want an *sinks.UnsendableError naming events 1 and 3", err, sinks.AsDeliveryError(err).Outcome)
	}
	if len(ue.Faults) != 2 || ue.Faults[0].Index != 1 || ue.Faults[1].Index != 3 || ue.Sent != 0 {
		t.Fatalf("faults %+v, sent %d; want events 1 and 3, nothing sent", ue.Faults, ue.Sent)
	}
	if !strings.Contains(err.Error(), "no_forbidden") || !strings.Contains(err.Error(), "nothing was sent") {
		t.Errorf("error %q does not carry PostgreSQL's refusal, or say nothing was sent", err)
	}
	if n := count(); n != 1 {
		t.Fatalf("the table holds %d rows, want 1: nothing of the refused batch", n)
	}
	if err := deliver(evs[1], evs[2]); err != nil {
		t.Fatalf("Deliver of the others: %v", err)
	}
	// A batch of one refused event is named at once.
	if err := deliver(bad); !errors.As(err, &ue) || len(ue.Faults) != 1 || ue.Faults[0].Index != 0 {
		t.Fatalf("Deliver of the refused event alone = %v, want an *sinks.UnsendableError naming it", err)
	}
	// A payload the json column does not parse, published by another watermill user of the
	// publisher: the same.
	err = pub.Publish(topic, message.NewMessage("ok-1", []byte(`{"n":1}`)), message.NewMessage("ok-2", []byte(`{not json`)))
	if !errors.As(err, &ue) || len(ue.Faults) != 1 || ue.Faults[0].Index != 1 {
		t.Fatalf("Publish with a payload that is not JSON = %v, want an *sinks.UnsendableError naming it", err)
	}
	if n := count(); n != 3 {
		t.Fatalf("the table holds %d rows, want 3", n)
	}
}
