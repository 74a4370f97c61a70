package deadletter

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/sinks"
)

// Defaults of a [Config] (SPEC §5, eventgrid-behaviour.md §7.1 and §7.5).
const (
	// DefaultDelay is how long a record waits after its event's last attempt before
	// it is written: Event Grid batches blob writes this way.
	DefaultDelay = 5 * time.Minute
	// DefaultGiveUp is how long a record may stay unwritten after its first write
	// attempt before it is dropped (see [Config.GiveUpAfter]).
	DefaultGiveUp = 4 * time.Hour
	// DefaultMaxRecordsPerObject bounds the records of one object; a larger flush of one
	// subscription is split.
	DefaultMaxRecordsPerObject = 5000
	// DefaultMaxObjectBytes bounds the bytes of one object's records (counted by
	// schemas.DeadLetterSizeBound, an upper bound of their encoding); a larger flush of one
	// subscription is split, and a record larger than the bound is written alone. It bounds the
	// memory one object write builds (5000 records of 1 MB events would be 5 GB) and the
	// memory a reader needs for one object: see [Config.ReadLimit].
	DefaultMaxObjectBytes = 64 << 20
	// ReadMargin is what [Config.ReadLimit] adds to the object bound: room for a record larger
	// than the bound, written alone (an event of the 1 MB publish limit encodes to at most
	// about 2 MB), and for objects written under a bound a little larger.
	ReadMargin = 16 << 20
	// DefaultWriteTimeout bounds one write (it is not scaled by TimeScale).
	DefaultWriteTimeout = time.Minute
	// MaxConcurrentWrites bounds the object writes — encoding the records, then the store's
	// Put — that the dead-letter actor runs at once; the others wait their turn in the order
	// they came due. Each write builds its object in memory (up to MaxObjectBytes), so after
	// an object store outage the retries of many subscriptions, all due together, take at
	// most this many objects' memory and connections at a time.
	MaxConcurrentWrites = 4
)

// DefaultBackoff is the delay after the n-th failed write (the last value repeats):
// 10 s, 1 min, then every 5 min, the dead-letter write retries of eventgrid-behaviour.md §7.5.
var DefaultBackoff = []time.Duration{10 * time.Second, time.Minute, 5 * time.Minute}

// Config is what the dead-letter actor needs. Durations are policy durations:
// divided by TimeScale, like the retry schedule (WriteTimeout is not).
type Config struct {
	// Store is where objects are written. Required.
	Store sinks.ObjectStore
	// Outbox keeps the unwritten records; nil means a new [MemoryOutbox].
	Outbox Outbox
	// Volatile says the outbox dies with the process although it is not a [MemoryOutbox] (a
	// [StoreOutbox] on a store.Memory): records still in it when the actor stops for good are
	// counted as dropped, as for a MemoryOutbox.
	Volatile bool
	// Delay is how long a record waits after its event's last attempt (default
	// DefaultDelay).
	Delay time.Duration
	// Slack is how much longer the first record due waits for others to share its object
	// (default Delay/10): records that fail close together land in one object, each written
	// between Delay and Delay+Slack after its last attempt.
	Slack time.Duration
	// Backoff is the delay after the n-th failed write; the last repeats (default
	// DefaultBackoff).
	Backoff []time.Duration
	// GiveUpAfter is how long after its first write attempt an unwritten record is dropped
	// (default DefaultGiveUp). A record is dropped only once a write of it fails that was tried
	// at or after that limit, by this actor: the last retry is made at the limit, and an object
	// read back from the outbox (a restart, a hand-over) is tried again as it is read, so a
	// router that was down past the limit still writes the records it holds when the
	// destination is up (or finds the object a write before the restart landed), and drops
	// them only when that write fails too. The limit counts from the first attempt ever made
	// ([Record.FirstWriteAttempt]), not from the restart: a router that restarts again and
	// again while the destination is down gives up at the limit all the same, after one try
	// per restart: it neither keeps the records for ever nor writes objects ever longer after
	// the time their keys name ([Config.WriteLag]).
	GiveUpAfter time.Duration
	// TimeScale divides the durations above (0 means 1).
	TimeScale float64
	// MaxRecordsPerObject bounds one object (default DefaultMaxRecordsPerObject).
	MaxRecordsPerObject int
	// MaxObjectBytes bounds the bytes of one object's records (default
	// DefaultMaxObjectBytes); a record larger than it is written alone.
	MaxObjectBytes int
	// WriteTimeout bounds one write (default DefaultWriteTimeout).
	WriteTimeout time.Duration
	// NewID names objects; nil means uuid.NewString.
	NewID   func() string
	Metrics *metrics.Set
	Logger  *slog.Logger
	// OnWritten, when set, is called after each object whose target asks for it is written,
	// before its records leave the outbox; it runs off the mailbox (ctx ends when the actor
	// stops) and must be safe for concurrent use. The router publishes the BlobCreated
	// notification from it.
	OnWritten func(ctx context.Context, o *Object)
	// OnDropped, when set, is called with each batch of records the actor drops, one call per
	// subscription: the router records their end in the events' delivery histories, so
	// explain tells the drop. It is called from the actor: it must not block.
	OnDropped func(d *Dropped)
	// Owns, when set, says whether this actor writes the records of a subscription: in
	// cluster mode, the node running the subscription does, and the node holding the
	// cluster's duty writes those of a subscription deleted before they were written. A
	// record of another's that comes due is forgotten here (not deleted from the outbox: its
	// owner writes it) until [StoreOutbox.Adopt] hands it back. It is called from the actor,
	// must not block and must take no lock.
	Owns func(topic, subscription string) bool
	// Stops, when set, tells when the actor's stop work has ended (see [Stops]): its owner
	// waits for it before it closes the store the outbox is in. Props makes one when it is
	// nil; the actor's incarnations share it.
	Stops *Stops
}

// Stops tells when the stop work of a dead-letter actor has ended. A stopping or restarting
// actor does not wait inside its last turn: it cancels its writes, takes the outbox changes
// it has not saved yet and terminates at once; its stop work then waits, off the mailbox, for
// its object writes (whose OnWritten may publish behind a journal's fsync) and for the outbox
// save in flight, each at most WriteTimeout, and saves those last changes after it, bounded
// the same way. So a restart after a failed save (a slow store) or a stop holds neither the
// status requests nor the router's shutdown behind the store. The next incarnation reads the
// outbox, and saves its own changes, only once the stop work before it has ended: it loads
// the last changes, and they land after the saves queued before them. The zero value is
// ready to use; it is safe for concurrent use.
type Stops struct {
	mu   sync.Mutex
	last chan struct{} // closed when the latest stop work has ended (and so every earlier one); nil before the first
}

// closedChan is what idle returns when no stop work ever began.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// begin starts a stop work: prev is the end of the one before (which it waits for first, so
// that its saves land after that one's), and end, called once, ends it.
func (s *Stops) begin() (prev <-chan struct{}, end func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev = s.last
	if prev == nil {
		prev = closedChan
	}
	done := make(chan struct{})
	s.last = done
	var once sync.Once
	return prev, func() { once.Do(func() { close(done) }) }
}

// idle returns a channel closed once every stop work begun so far has ended.
func (s *Stops) idle() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return closedChan
	}
	return s.last
}

// Wait waits until every stop work begun so far has ended, or ctx ends (its error then). Each
// stop work takes at most 3 × WriteTimeout (its object writes, the save in flight, its last
// save), after the one before it.
func (s *Stops) Wait(ctx context.Context) error {
	select {
	case <-s.idle():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the stopping dead-letter actor to save its outbox: %w", ctx.Err())
	}
}

func (c *Config) scale(d time.Duration) time.Duration {
	if c.TimeScale <= 1 {
		return d
	}
	return time.Duration(float64(d) / c.TimeScale)
}

// ReadLimit is the largest dead-letter object a reader should take (list, show and replay
// pass it to sinks.ObjectStore.Get): the bound of the objects this actor writes,
// MaxObjectBytes, plus [ReadMargin]. A larger object was not written by egrid with this
// configuration.
func (c *Config) ReadLimit() int64 {
	n := c.MaxObjectBytes
	if n <= 0 {
		n = DefaultMaxObjectBytes
	}
	return int64(n) + ReadMargin
}

// WriteLag bounds how long after the time its key names ([Key]) an object is written, by the
// writer's clock, while the router runs: the key is named at the object's first write attempt,
// and the writes are retried for GiveUpAfter, each taking at most WriteTimeout. Readers that
// look for objects written from some time on list the keys from that long before it. An
// object still unwritten when the router stopped is tried once more when it starts again
// ([Config.GiveUpAfter]): it may land later than that, by as long as the router was down.
func (c *Config) WriteLag() time.Duration {
	d := c.withDefaults()
	return d.GiveUpAfter + d.WriteTimeout
}

func (c *Config) withDefaults() *Config {
	d := *c
	if d.Delay <= 0 {
		d.Delay = DefaultDelay
	}
	if d.Slack <= 0 {
		d.Slack = d.Delay / 10
	}
	if len(d.Backoff) == 0 {
		d.Backoff = DefaultBackoff
	}
	if d.GiveUpAfter <= 0 {
		d.GiveUpAfter = DefaultGiveUp
	}
	if d.MaxRecordsPerObject <= 0 {
		d.MaxRecordsPerObject = DefaultMaxRecordsPerObject
	}
	if d.MaxObjectBytes <= 0 {
		d.MaxObjectBytes = DefaultMaxObjectBytes
	}
	if d.WriteTimeout <= 0 {
		d.WriteTimeout = DefaultWriteTimeout
	}
	if d.NewID == nil {
		d.NewID = uuid.NewString
	}
	if d.Metrics == nil {
		d.Metrics = new(metrics.Set)
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Outbox == nil {
		d.Outbox = NewMemoryOutbox()
	}
	return &d
}
