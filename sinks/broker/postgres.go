package broker

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/lib/pq"

	"github.com/egridio/egrid/sinks"
)

// postgresPublisher publishes through watermill-sql, each publish on a connection of its own
// bounded by the attempt (see withConn): watermill-sql's Publish takes no context and runs its
// statements with none, so it is given, for each publish, a database handle that runs them
// with the first message's context (a [Sink] sets its attempt's). Its connections are bounded
// too (see pgConns).
type postgresPublisher struct {
	db    *sql.DB
	conns *pgConns
	wlog  watermill.LoggerAdapter
	// tables holds the topics whose tables this publisher created (or found).
	tables *pgTables
}

func openPostgres(s PostgresServer) (*sql.DB, *pgConns, error) {
	conns, err := newPGConns(s.DSN)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(conns)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(time.Minute)
	return db, conns, nil
}

func openPostgresPublisher(s PostgresServer, wlog watermill.LoggerAdapter) (message.Publisher, error) {
	db, conns, err := openPostgres(s)
	if err != nil {
		return nil, err
	}
	return postgresPublisher{db: db, conns: conns, wlog: wlog, tables: newPGTables()}, nil
}

// ctxConn is the database handle watermill-sql publishes with: one connection, on which it
// runs every statement with ctx in place of the background context it passes.
type ctxConn struct {
	c   *sql.Conn
	ctx context.Context
}

func (c ctxConn) ExecContext(_ context.Context, q string, args ...any) (sql.Result, error) {
	return c.c.ExecContext(c.ctx, q, args...)
}

func (c ctxConn) QueryContext(_ context.Context, q string, args ...any) (*sql.Rows, error) {
	return c.c.QueryContext(c.ctx, q, args...)
}

func (c ctxConn) QueryRowContext(_ context.Context, q string, args ...any) *sql.Row {
	return c.c.QueryRowContext(c.ctx, q, args...)
}

func (c ctxConn) Exec(q string, args ...any) (sql.Result, error) {
	return c.c.ExecContext(c.ctx, q, args...)
}

func (c ctxConn) Query(q string, args ...any) (*sql.Rows, error) {
	return c.c.QueryContext(c.ctx, q, args...)
}

func (c ctxConn) QueryRow(q string, args ...any) *sql.Row {
	return c.c.QueryRowContext(c.ctx, q, args...)
}

// pgAttemptEndedError says the attempt ended before PostgreSQL answered, so the connection was
// closed: the attempt's context's cause (classified TimedOut or Canceled), and the driver's
// error.
type pgAttemptEndedError struct{ cause, err error }

func (e *pgAttemptEndedError) Error() string {
	return fmt.Sprintf("PostgreSQL had not answered when the attempt ended, so its connection was closed (the next attempt uses another): %v (%v)", e.cause, e.err)
}

func (e *pgAttemptEndedError) Unwrap() []error { return []error{e.cause, e.err} }

// withConn runs f on a connection of the pool taken for it alone, within ctx: taking the
// connection waits no longer than ctx, f does not run when ctx ended meanwhile (a new
// connection is made without it), and when ctx ends before f returns the connection is
// closed, so f returns then even when the server stopped answering: lib/pq, told of ctx, may
// send PostgreSQL a cancel request, but it waits for the server's answer, which a hung server
// never gives, until the connection's 5-minute read bound. The connection so closed leaves the
// pool.
func (p postgresPublisher) withConn(ctx context.Context, f func(*sql.Conn) error) error {
	c, err := p.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var nc *pgConn
	_ = c.Raw(func(dc any) error { nc = p.conns.of(dc); return nil })
	cut := func() {}
	if nc != nil {
		cut = func() { _ = nc.Close() }
	}
	stop := context.AfterFunc(ctx, cut)
	if ctx.Err() != nil {
		// The attempt ended while the connection was being made (lib/pq makes it without the
		// context, and database/sql hands it out all the same): it was reported failed, so
		// nothing is sent on it, or an insert would land after its attempt, even after its
		// event was dead-lettered.
		stop()
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
		return fmt.Errorf("the attempt ended before its PostgreSQL connection was made, so nothing was sent: %w", context.Cause(ctx))
	}
	err = f(c)
	if !stop() && ctx.Err() != nil {
		// Cut (or being cut): the pool must not hand it out again.
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
		if err != nil {
			return &pgAttemptEndedError{cause: context.Cause(ctx), err: err}
		}
	}
	return err
}

// publish runs watermill-sql's Publish of msgs to topic on c, with ctx: it makes sure of the
// topic's table first (see pgTables), since watermill-sql's own creation of it, made by each
// publish that finds it not yet made, races with the others of a new topic. A table dropped
// since it was made (PostgreSQL answers the insert with 42P01, undefined table) is created
// again and the insert made once more, as a RabbitMQ queue deleted meanwhile is declared again:
// left as made, every later publish failed as NotFound until a restart.
func (p postgresPublisher) publish(ctx context.Context, c *sql.Conn, topic string, msgs []*message.Message) error {
	if err := p.tables.ensure(ctx, c, topic); err != nil {
		return err
	}
	pub, err := wmsql.NewPublisher(ctxConn{c: c, ctx: ctx}, wmsql.PublisherConfig{
		SchemaAdapter: wmsql.DefaultPostgreSQLSchema{},
	}, p.wlog)
	if err != nil {
		return err
	}
	err = pub.Publish(topic, msgs...)
	if pgCode(err) != "42P01" {
		return err
	}
	p.tables.forget(topic)
	if err := p.tables.ensure(ctx, c, topic); err != nil {
		return err
	}
	return pub.Publish(topic, msgs...)
}

// pgTables makes sure of the tables of a publisher's topics: one creation at a time per topic,
// which the publishes of that topic arriving meanwhile wait for (no longer than their
// attempts), then none once it is made. Each publish creating the table of a new topic on its
// own made PostgreSQL refuse all but one of the concurrent CREATE TABLE IF NOT EXISTS with a
// unique violation on its catalog (23505) or 42P07 (already exists), and the first, read as
// a refusal of the rows, dead-lettered their events.
type pgTables struct {
	mu     sync.Mutex
	made   map[string]bool
	making map[string]chan struct{} // closed when the creation in flight ends
}

func newPGTables() *pgTables {
	return &pgTables{made: make(map[string]bool), making: make(map[string]chan struct{})}
}

// ensure creates topic's table on c, unless it is made already or another publish is creating
// it: then it waits for that one, and creates it itself should that one fail. It returns a
// *pgTableError when the creation fails, and the cause of ctx when ctx ends first.
func (t *pgTables) ensure(ctx context.Context, c *sql.Conn, topic string) error {
	for {
		t.mu.Lock()
		if t.made[topic] {
			t.mu.Unlock()
			return nil
		}
		if wait, ok := t.making[topic]; ok {
			t.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return fmt.Errorf("waiting for the table of PostgreSQL topic %s to be created: %w", topic, context.Cause(ctx))
			}
		}
		done := make(chan struct{})
		t.making[topic] = done
		t.mu.Unlock()
		err := createPGTable(ctx, c, topic)
		t.mu.Lock()
		delete(t.making, topic)
		if err == nil {
			t.made[topic] = true
		}
		close(done)
		t.mu.Unlock()
		return err
	}
}

// forget says topic's table is gone (dropped since it was made): the next ensure creates it.
func (t *pgTables) forget(topic string) {
	t.mu.Lock()
	delete(t.made, topic)
	t.mu.Unlock()
}

// createPGTable runs watermill-sql's CREATE TABLE IF NOT EXISTS of topic on c. Another
// process creating it at the same moment (another egrid node, a consumer) makes PostgreSQL
// refuse it with 23505 or 42P07 once that one committed: the table is there then, and the
// statement is run once more to make sure.
func createPGTable(ctx context.Context, c *sql.Conn, topic string) error {
	run := func() error {
		for _, q := range (wmsql.DefaultPostgreSQLSchema{}).SchemaInitializingQueries(topic) {
			if _, err := c.ExecContext(ctx, q.Query, q.Args...); err != nil {
				return err
			}
		}
		return nil
	}
	err := run()
	if pgCode(err) == "23505" || pgCode(err) == "42P07" {
		err = run()
	}
	if err != nil {
		return &pgTableError{topic: topic, err: err}
	}
	return nil
}

// pgCode returns the SQLSTATE of err, or "".
func pgCode(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return string(pqErr.Code)
	}
	return ""
}

// pgTableError says the table of a topic could not be created. It is never the fault of the
// events being published, whatever PostgreSQL's code: a unique violation or "already exists"
// there is another creation's, at the same moment, and is classified Busy, so the attempt is
// retried; the others are classified by their code (42501, no privilege: Forbidden).
type pgTableError struct {
	topic string
	err   error
}

func (e *pgTableError) Error() string {
	return fmt.Sprintf("creating the table of PostgreSQL topic %s: %v", e.topic, e.err)
}

func (e *pgTableError) Unwrap() error { return e.err }

// raced reports whether PostgreSQL refused the creation with a code that is read elsewhere as
// the data's fault (classes 22 and 23) or as the table's being there (42P07): at a creation
// of the table, another's at the same moment.
func (e *pgTableError) raced() bool {
	code := pgCode(e.err)
	return code == "42P07" || strings.HasPrefix(code, "22") || strings.HasPrefix(code, "23")
}

// pgUUIDLimit is the length, in characters, of watermill-sql's uuid column (VARCHAR(36) in
// its DefaultPostgreSQLSchema), which holds the message UUID: the event id.
const pgUUIDLimit = 36

// Publish implements [message.Publisher]: the messages are inserted in one statement, so all
// or none are stored.
//
// A message whose UUID (the event id) is longer than watermill-sql's uuid column takes can
// never be stored: the server refuses the whole statement (22001, value too long). Publish
// then inserts nothing and returns an *[sinks.UnsendableError] naming every such message by
// its index in msgs, each with a *[TooLargeError]. A payload is far under PostgreSQL's own
// limit on a value (1 GB): an event is at most 1 MiB.
//
// A statement PostgreSQL refuses for the data of a row (see pgRowRefusal) does not say which
// row: Publish then inserts the messages again one by one in a transaction it rolls back, and
// returns an *[sinks.UnsendableError] naming each message refused alone. Nothing is stored.
func (p postgresPublisher) Publish(topic string, msgs ...*message.Message) error {
	var faults []sinks.EventFault
	for i, m := range msgs {
		if n := utf8.RuneCountInString(m.UUID); n > pgUUIDLimit {
			faults = append(faults, sinks.EventFault{Index: i, Err: &TooLargeError{
				Broker: PostgreSQL, Part: "event id", Size: int64(n), Limit: pgUUIDLimit,
				Setting: "watermill-sql's uuid column, VARCHAR(36)",
			}})
		}
	}
	if len(faults) > 0 {
		return &sinks.UnsendableError{Faults: faults}
	}
	ctx := msgs[0].Context()
	err := p.withConn(ctx, func(c *sql.Conn) error { return p.publish(ctx, c, topic, msgs) })
	if err == nil || !pgRowRefusal(err) {
		return err
	}
	if len(msgs) == 1 {
		return &sinks.UnsendableError{Faults: []sinks.EventFault{{Index: 0, Err: pgRefused(err)}}}
	}
	if ue := p.refusedRows(topic, msgs); ue != nil {
		return ue
	}
	return err
}

// pgRowRefusal reports whether err is PostgreSQL's refusal of the data of a row: a data
// exception (class 22: a value too long, a byte sequence the database encoding does not take,
// JSON it does not parse) or a constraint (class 23, such as a CHECK the operator added to the
// table), from the insert itself. The statement inserts nothing else than the events' ids, payloads and metadata, so
// such a refusal is an event's fault; but it does not say which row of the batch.
func pgRowRefusal(err error) bool {
	var pqErr *pq.Error
	var tableErr *pgTableError
	if !errors.As(err, &pqErr) || errors.As(err, &tableErr) {
		return false // a failed creation of the table is no row's
	}
	class := pqErr.Code.Class()
	return class == "22" || class == "23"
}

func pgRefused(err error) error {
	return fmt.Errorf("PostgreSQL refuses the event's row, whatever is sent again: %w", err)
}

// refusedRows finds the rows of a batch PostgreSQL refused whole for the data of a row (see
// pgRowRefusal), by inserting them again one by one, each under a savepoint, in a transaction
// that is rolled back: nothing is stored. It returns an *[sinks.UnsendableError] naming every
// refused row, or nil when it finds none, or cannot tell (a row refused for another reason,
// the connection lost, the message's context done): the batch then fails with its own error.
func (p postgresPublisher) refusedRows(topic string, msgs []*message.Message) *sinks.UnsendableError {
	ctx := msgs[0].Context()
	var ue *sinks.UnsendableError
	_ = p.withConn(ctx, func(c *sql.Conn) error { ue = p.refusedRowsOn(ctx, c, topic, msgs); return nil })
	return ue
}

func (p postgresPublisher) refusedRowsOn(ctx context.Context, c *sql.Conn, topic string, msgs []*message.Message) *sinks.UnsendableError {
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		return nil
	}
	defer func() { _ = tx.Rollback() }()
	var faults []sinks.EventFault
	for i, m := range msgs {
		q, err := wmsql.DefaultPostgreSQLSchema{}.InsertQuery(topic, message.Messages{m})
		if err != nil {
			return nil
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT egrid_row"); err != nil {
			return nil
		}
		if _, err := tx.ExecContext(ctx, q.Query, q.Args...); err != nil {
			if !pgRowRefusal(err) {
				return nil
			}
			faults = append(faults, sinks.EventFault{Index: i, Err: pgRefused(err)})
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT egrid_row"); err != nil {
				return nil
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT egrid_row"); err != nil {
			return nil
		}
	}
	if len(faults) == 0 {
		return nil
	}
	return &sinks.UnsendableError{Faults: faults}
}

// Close implements [message.Publisher]. It cuts the connections first, so the inserts in
// flight end at once, even on a server that stopped answering.
func (p postgresPublisher) Close() error {
	p.conns.close()
	return p.db.Close()
}

type postgresSubscriber struct {
	*wmsql.Subscriber
	db    *sql.DB
	conns *pgConns
}

func openPostgresSubscriber(s PostgresServer, group string, wlog watermill.LoggerAdapter) (message.Subscriber, error) {
	db, conns, err := openPostgres(s)
	if err != nil {
		return nil, err
	}
	sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
		ConsumerGroup:    group,
		SchemaAdapter:    postgresSchema{},
		OffsetsAdapter:   wmsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     100 * time.Millisecond,
		ResendInterval:   time.Second,
	}, wlog)
	if err != nil {
		db.Close()
		return nil, err
	}
	return postgresSubscriber{Subscriber: sub, db: db, conns: conns}, nil
}

// postgresSchema is watermill-sql's PostgreSQL schema, but a message read with an
// UnreadableKey in its metadata column has it dropped (see dropReserved).
type postgresSchema struct{ wmsql.DefaultPostgreSQLSchema }

func (s postgresSchema) UnmarshalMessage(row wmsql.Scanner) (wmsql.Row, error) {
	r, err := s.DefaultPostgreSQLSchema.UnmarshalMessage(row)
	if err == nil && r.Msg != nil {
		dropReserved(r.Msg)
	}
	return r, err
}

// Close implements [message.Subscriber]. It cuts the connections first, as the publisher's
// Close does: watermill-sql's Close waits for its subscriptions' queries. A message in hand
// whose acknowledgement is cut is read again (sources are at least once).
func (s postgresSubscriber) Close() error {
	s.conns.close()
	err := s.Subscriber.Close()
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}
