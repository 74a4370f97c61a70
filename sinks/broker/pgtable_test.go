package broker_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/testkit/brokertest"
	"github.com/egridio/egrid/testkit/sinktest"
)

// pgCount returns the rows of topic's table, which is dropped when the test ends.
func pgTable(t *testing.T, dsn, topic string) (count func() int, db *sql.DB) {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	table := `"watermill_` + topic + `"`
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS ` + table); _ = db.Close() })
	return func() int {
		t.Helper()
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}, db
}

// The first deliveries to a new PostgreSQL topic, made at once, all land: each used to create
// the table, and those that lost the race got PostgreSQL's unique violation on its catalog
// (23505), which was taken for a refusal of the row, so their events were dead-lettered as
// the events' fault (most of the first ten of every new table).
func TestPostgresConcurrentFirstDeliveriesToANewTableAllLand(t *testing.T) {
	server := brokertest.Postgres(t)
	b := open(t, broker.Servers{Postgres: &server})
	pub, _ := b.Publisher(broker.PostgreSQL)
	const rounds, senders = 3, 10
	for range rounds {
		topic := brokertest.Unique("egrid_first_")
		count, _ := pgTable(t, server.DSN, topic)
		s := newSink(t, pub, topic)
		evs := sinktest.EventGridEvents(t, "first", senders)
		start := make(chan struct{})
		errs := make([]error, senders)
		var wg sync.WaitGroup
		for i, ev := range evs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = s.Deliver(context.Background(), sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, []*schemas.Event{ev}))
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				var ue *sinks.UnsendableError
				t.Errorf("delivery %d to the new table: %v (%s, the event's fault: %t)", i, err, sinks.AsDeliveryError(err).Outcome, errors.As(err, &ue))
			}
		}
		if n := count(); n != senders {
			t.Fatalf("the new table holds %d rows, want %d", n, senders)
		}
	}
}

// A PostgreSQL topic's table dropped while egrid runs is created again by the next delivery,
// which lands: the publisher kept it as created, so every later delivery failed as NotFound
// (the table does not exist), which put the subscription on probation until a restart.
func TestPostgresTableDroppedWhileRunningIsCreatedAgain(t *testing.T) {
	server := brokertest.Postgres(t)
	b := open(t, broker.Servers{Postgres: &server})
	pub, _ := b.Publisher(broker.PostgreSQL)
	topic := brokertest.Unique("egrid_dropped_")
	count, db := pgTable(t, server.DSN, topic)
	s := newSink(t, pub, topic)
	evs := sinktest.EventGridEvents(t, "dropped", 3)
	deliver := func(ev *schemas.Event) error {
		return s.Deliver(context.Background(), sinktest.NewBatch(t, schemas.EventGrid, schemas.EventGrid, []*schemas.Event{ev}))
	}
	if err := deliver(evs[0]); err != nil { // creates the table
		t.Fatal(err)
	}
	for i, ev := range evs[1:] {
		if _, err := db.Exec(`DROP TABLE "watermill_` + topic + `"`); err != nil {
			t.Fatal(err)
		}
		if err := deliver(ev); err != nil {
			t.Fatalf("delivery %d after the table was dropped: %v (%s)", i+1, err, sinks.AsDeliveryError(err).Outcome)
		}
		if n := count(); n != 1 {
			t.Fatalf("the table created again holds %d rows, want 1", n)
		}
	}
}
