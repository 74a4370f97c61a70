package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/store"
)

// ErrNotConnected is returned (wrapped) by every call made while the connection to NATS is
// down: the store fails at once rather than waiting for a server that is not there. The
// router answers a publish that gets it with 503 and a Retry-After; the NATS client keeps
// reconnecting, and calls succeed again once it has.
var ErrNotConnected = errors.New("jetstream store: not connected to NATS; retry once the server is reachable")

// MinMaxPayload is the smallest max_payload [Open] accepts from the NATS server: a journal
// message or a parked event's copy holds one event, which a topic accepts up to 1 MiB and
// which takes up to about twice that encoded (its attributes are stored beside its JSON).
// Configure the servers with max_payload: 4MB.
const MinMaxPayload = 4 << 20

// Options configures [Open] and [Dial]. The zero value is usable.
type Options struct {
	// Prefix starts the name of every stream, subject and bucket the store uses, so several
	// routers (or tests) can share one JetStream domain without seeing each other's state.
	// Letters, digits, '-' and '_' only. Default "EGRID".
	Prefix string
	// Replicas is the number of copies JetStream keeps of every stream and bucket: 1 (the
	// default) on a single server, 3 in production on a cluster of at least three servers, so
	// a write is acknowledged only once a majority of the replicas has it and the store
	// survives the loss of one server.
	Replicas int
	// Memory keeps streams and buckets in the servers' memory instead of files: for tests and
	// caches, not for a durable router.
	Memory bool
	// Timeout bounds every call whose context has no deadline (ExpireHistory: each of its
	// requests, see there; Open: each of its tries, see there). Default 10 seconds.
	Timeout time.Duration
	// Logger receives the damage a read passes over (a journal message that does not
	// decode, see [Store.Read]; a parked event's copy that does not decode or is missing, see
	// [Store.ParkedEvents]; a definition or a subscription's state in the meta bucket that
	// does not decode, see [Store.Topics] and [Store.LoadSubscription]), as ERROR. Default:
	// discarded.
	Logger *slog.Logger
	// OnCorruption, when set, is called once for each piece of damage the store finds, with
	// its kind ([DamageEntry], [DamageDefinition]), as the disk store's Options.OnCorruption is: egrid counts it
	// in the metric StoreCorruptionCount. [Store.Health] counts it too.
	OnCorruption func(kind string)
}

// DamageEntry is the kind of damage ([Options.OnCorruption], the metric
// egrid_store_corruption_count) of a stored message that does not decode — a journal message
// passed over, a parked event's copy, a subscription's state (its record's definition
// decoding) — or of a parked event's copy missing although the subscription's record names
// the event. It is the disk store's kind of the same damage.
const DamageEntry = "entry"

func (o Options) withDefaults() Options {
	if o.Prefix == "" {
		o.Prefix = "EGRID"
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate reports every problem of the options at once.
func (o Options) Validate() error {
	var errs []error
	if o.Prefix != "" && strings.TrimLeft(o.Prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
		errs = append(errs, fmt.Errorf("jetstream store: prefix %q: use only letters, digits, '-' and '_'", o.Prefix))
	}
	if o.Replicas < 0 || o.Replicas > 5 {
		errs = append(errs, fmt.Errorf("jetstream store: replicas %d: JetStream keeps 1 to 5 replicas (3 in production)", o.Replicas))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("jetstream store: timeout %v: must not be negative", o.Timeout))
	}
	return errors.Join(errs...)
}

// Store is a [store.Store] on NATS JetStream: a stream per topic journal and key-value buckets
// for definitions, subscription state and the dead-letter outbox (see the package
// documentation). Open one with [Open] or [Dial]; several Stores (in one process or on
// several nodes) may be open on the same prefix, and every state write is a compare-and-set,
// so a Store whose view is stale gets [store.ErrFenced] instead of overwriting another's.
type Store struct {
	nc            *nats.Conn
	ownsNC        bool
	js            jetstream.JetStream
	meta          jetstream.KeyValue // topic definitions and subscription records
	metaStream    *bucketStream      // meta's stream, for complete listings (scan)
	deadStream    *bucketStream      // dead's stream, likewise
	historyStream *bucketStream      // history's stream, whose keys go without markers (purgeKey)
	parked        jetstream.Stream   // parked events' copies of their events
	dead          jetstream.KeyValue // the dead-letter outbox
	history       jetstream.KeyValue // delivery histories (history.go)
	opts          Options
	closed        atomic.Bool

	mu      sync.Mutex
	writers map[string]*writer   // journal writers by topic
	subs    map[string]*subEntry // subscription records this store last read or wrote, by key
	// purging holds the parked events' subjects whose copies an update is purging (dropBodies),
	// each with a channel closed when the purge is done: an update that parks one of them
	// again waits for it before it writes the new copy.
	purging map[string]chan struct{}
	stopped bool // set by Close: no new writers

	passedMu sync.Mutex
	passed   map[string]uint64 // by topic: the last journal message passed over (decodeJournal)

	corruptions atomic.Int64 // the damage found, for Health (damaged)
	downMu      sync.Mutex
	downSince   int64  // unix nanoseconds when the current outage was first found (connectionDown); 0 when none is known
	downAt      uint64 // the connection's reconnect count then: an outage found after it moved is a new one
	lostMu      sync.Mutex
	lost        map[string]bool // the parked events' copies reported damaged, once each (copyDamage)

	readParkedHook func() // set by a test of this package only: called by readParked first
	dropBodiesHook func() // set by a test of this package only: called by dropBodies first
	purgeWaitHook  func() // set by a test of this package only: called before waiting for a purge
}

// bound gives ctx the store's timeout when it has no deadline.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// enter checks the store is open and bounds ctx.
func (s *Store) enter(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.closed.Load() {
		return nil, nil, store.ErrClosed
	}
	if !s.nc.IsConnected() {
		s.connectionDown()
		return nil, nil, fmt.Errorf("%w (status %v)", ErrNotConnected, s.nc.Status())
	}
	ctx, cancel := s.bound(ctx)
	return ctx, cancel, nil
}

// Error mapping: what JetStream says, in the store's sentinels.

func isWrongLastSeq(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

func isStreamNotFound(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamNotFound
}

func topicNotFound(topic string) error { return fmt.Errorf("topic %q: %w", topic, store.ErrNotFound) }

func subNotFound(topic, sub string) error {
	return fmt.Errorf("subscription %q of topic %q: %w", sub, topic, store.ErrNotFound)
}

func fenced(what string, err error) error {
	return fmt.Errorf("jetstream store: writing %s: %w (%v)", what, store.ErrFenced, err)
}

// damaged counts one piece of damage of kind.
func (s *Store) damaged(kind string) {
	s.corruptions.Add(1)
	if s.opts.OnCorruption != nil {
		s.opts.OnCorruption(kind)
	}
}

// Health implements [store.HealthReporter]. The store keeps nothing on a disk of its own: it
// is Healthy while connected to NATS, and Failed while the connection is down (every call
// fails with [ErrNotConnected] meanwhile), with a reason saying what is refused and what to
// do, and Since the time the current outage was first found (by a call to Health or a call
// refused); the NATS client reconnects by itself, and the store is Healthy again once it has.
// An outage found after the client reconnected is a new one, although nothing asked while it
// was connected: Since is never the start of an outage that ended (before, it was, when nobody
// had called Health between the two outages).
// Before, it was Healthy throughout an outage: GET /admin/health answered 200 while every
// publish got 503. Corruptions counts the damage it found, each logged as an ERROR: journal
// messages passed over ([Store.Read]), parked events' copies lost ([Store.ParkedEvents]),
// definitions left out of the listings ([Store.Topics], [Store.Subscriptions]) and
// subscriptions' states lost ([Store.LoadSubscription]).
func (s *Store) Health() store.Health {
	h := store.Health{State: store.Healthy, Corruptions: int(s.corruptions.Load())}
	if s.nc.IsConnected() {
		return h
	}
	h.State, h.Since = store.Failed, time.Unix(0, s.connectionDown())
	h.Reason = fmt.Sprintf("not connected to NATS (status %v", s.nc.Status())
	if err := s.nc.LastError(); err != nil {
		h.Reason += ": " + RedactError(err).Error()
	}
	h.Reason += "): publishes, definition changes and state writes are refused (503) and this node delivers nothing; check that the NATS servers this node was given are up and reachable from it: the node reconnects by itself, and takes writes again once it has"
	return h
}

// connectionDown records that the connection to NATS was found down and returns since when
// (unix nanoseconds): the time recorded before, unless the client has reconnected since (its
// reconnect count moved), which ended that outage; then now. The count is read, not a
// reconnect handler set: the connection may be the caller's, and is live (setting its handlers
// races with the client reading them).
//
// A reconnect whose handshake the server refused (the client connected, then failed before it
// was usable) moves the count too: such an outage is then dated from the first call that found
// it down after that reconnect, not from its start.
func (s *Store) connectionDown() int64 {
	n := s.nc.Stats().Reconnects
	s.downMu.Lock()
	defer s.downMu.Unlock()
	if s.downSince == 0 || s.downAt != n {
		s.downSince, s.downAt = time.Now().UnixNano(), n
	}
	return s.downSince
}

var _ store.HealthReporter = (*Store)(nil)

// Close implements [store.Store]: it stops the journal writers (an Append waiting in one
// fails with [store.ErrClosed]) and closes the connection when [Dial] made it. Data stays
// in JetStream.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	s.stopped = true
	ws := s.writers
	s.writers = make(map[string]*writer)
	s.mu.Unlock()
	for _, w := range ws {
		w.stop(store.ErrClosed)
	}
	if s.ownsNC {
		s.nc.Close()
	}
	return nil
}

var _ store.Store = (*Store)(nil)
