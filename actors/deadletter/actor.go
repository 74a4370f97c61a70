package deadletter

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// This file is the dead-letter actor (SPEC §5, DESIGN.md §1 step 4): one per router, a sibling of
// the topic actors. Subscription actors hand it the events that ended without delivery
// ([Enqueue]); it keeps them in an outbox, waits the dead-letter delay after each
// event's last attempt, and writes the records that are due together as one object per
// subscription per flush. Writes run off the mailbox, at most [MaxConcurrentWrites] at once
// (the others queue in the actor and start as earlier ones end); a failed write is retried
// with back-off, and records whose write still fails four hours after their first write
// attempt are dropped, counted and logged. Records are dropped only when a write this actor
// tried has failed: after a restart every object read back from the outbox is tried again
// (and looked for under its key) first, however long ago its first attempt was.
//
// The outbox is written off the mailbox too (a durable outbox syncs every change): one change
// at a time, in the order the actor made them, the changes made meanwhile merged into the next
// one. An object is written only once the outbox change that assigns its records to it is
// saved, and its records leave the outbox only after the object is written, so after a crash
// every record is either in the outbox or in an object.

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

// Target says where and how one subscription's dead letters are written.
type Target struct {
	// Bucket is the subscription's blobContainerName.
	Bucket string
	// Prefix starts every object key: see [Prefix].
	Prefix string
	// Format is the record layout (SPEC §5).
	Format schemas.DeadLetterFormat
	// Notify asks for a notification ([Config.OnWritten]) once an object is written.
	Notify bool
}

// Enqueue hands the dead-letter actor one event that ended without delivery.
type Enqueue struct {
	Letter *actors.DeadLetter
	Target Target
}

// Flush asks the dead-letter actor to write every record now, whatever its delay or
// back-off (the router's shutdown does this). The answer, a *[Status], comes once no
// write is running any more; records whose write failed are still counted in it. One that
// arrives while the actor reads its outbox (at start) flushes once the outbox is in. At most
// [MaxFlushers] wait for their answer at once: another Flush still writes everything now, but
// is answered at once, with the status of that instant.
type Flush struct{}

// MaxFlushers bounds the [Flush] requests the dead-letter actor keeps waiting for their answer:
// a caller that asks again and again while the object store hangs grows nothing.
const MaxFlushers = 64

// MaxEarlyRecords bounds the records the dead-letter actor keeps while it reads its outbox at
// start. Records arriving meanwhile (an [Enqueue], a subscription's hand-off, an adoption) are
// put in the outbox at once, when not there already; past MaxEarlyRecords those already in the
// outbox are let go, and the actor reads the outbox again once the first read is in, taking
// in the records it does not know yet, before it writes any (its memory then grows with the
// pending records, by their metadata, as after its start). A record whose put is still under
// way is kept: it is in no other place.
const MaxEarlyRecords = 4096

// GetStatus asks the dead-letter actor for its state; the answer is a
// *[Status]. It is answered at once, also while the actor still reads its outbox at start: the
// answer then says so ([Status.Loading]).
type GetStatus struct{}

// Status is the dead-letter actor's state at one instant.
type Status struct {
	// Waiting counts records waiting out their delay; Writing those in a write now or waiting
	// for one of the [MaxConcurrentWrites]; Retrying those whose write failed and waits for
	// its next try.
	Waiting, Writing, Retrying int
	// ObjectsWritten, RecordsWritten and RecordsDropped count since the actor started.
	ObjectsWritten, RecordsWritten, RecordsDropped int
	// Loading is set while the actor still reads its outbox at start: the answer comes at
	// once, without waiting for the read, and the counts of records (Waiting, Writing,
	// Retrying) are not known yet: they are zero, and say nothing of the outbox.
	Loading bool
	// LoadingSince is when the actor started reading its outbox (zero unless Loading).
	LoadingSince time.Time
}

// Pending counts the records not yet written.
func (s *Status) Pending() int { return s.Waiting + s.Writing + s.Retrying }

// Object describes a written dead-letter object; [Config.OnWritten]
// receives it.
type Object struct {
	Topic, Subscription string
	Target              Target
	Info                sinks.ObjectInfo
	Records             int
}

// Record is one dead letter in the outbox. ID is stable for the record's life, so a
// durable outbox can key it.
type Record struct {
	ID     uint64
	Letter *actors.DeadLetter
	Target Target
	// Due is when the record may be written: its event's last attempt plus the delay.
	Due time.Time
	// FirstWriteAttempt is when a write of the record was first tried (zero before); the
	// four-hour limit ([Config.GiveUpAfter]) counts from it, across restarts.
	FirstWriteAttempt time.Time
	// WriteAttempts counts the writes tried.
	WriteAttempts int
	// ObjectKey is the key of the object the record is written in, fixed (with the other records
	// of that object) before the first write is tried. Every later try writes the same object
	// with the same records; after a restart, an object found under the key is kept (its records
	// may have left the outbox in part): a write whose success was not recorded before a crash is
	// neither duplicated nor replaced by part of itself.
	ObjectKey string
	// EventID is the id of the letter's event, and Size bounds the bytes of the record in its
	// object (schemas.DeadLetterSizeBound in Target.Format). The dead-letter actor sets both
	// from the event; an [EventOutbox] gives them with the records it gives without their
	// events.
	EventID string
	Size    int
}

// Outbox keeps the records the dead-letter actor has not written yet. The actor
// calls Load when it starts and, one call at a time and in order, Put when a record arrives
// or its write state changes and Delete once its object is written or it is dropped. Put and
// Delete are done when they return (durable for a durable outbox). A Put may run while that
// Load does (a record that arrives meanwhile is put at once), and Load may be called a second
// time, while Puts run, when the actor let go of records that arrived during the first
// ([MaxEarlyRecords]). NewID is safe for concurrent use. Returned records are owned by the
// caller.
//
// [MemoryOutbox] is the default; it survives actor restarts but not the process.
// [StoreOutbox] keeps the records in the router's store, so they survive the process too.
type Outbox interface {
	Load(ctx context.Context) ([]Record, error)
	Put(ctx context.Context, recs []Record) error
	Delete(ctx context.Context, ids []uint64) error
	// NewID returns an id for a new record: greater than every id the outbox held when it was
	// made and than every id it returned before.
	NewID() uint64
}

// EventOutbox is an [Outbox] that keeps its records' events itself, out of the dead-letter
// actor's memory ([StoreOutbox]): Load gives records without their events (Letter.Event nil,
// EventID and Size set), a Put of a record without its event changes the record's other
// fields and keeps its stored event, and Events reads the events back. The actor keeps only
// each pending record's metadata, dropping a record's event once the outbox holds it, and
// reads the events of an object's records when it writes the object: its memory grows with
// the pending records' count, by a few hundred bytes each, and with the object writes under
// way ([MaxConcurrentWrites], each at most [Config.MaxObjectBytes]), not with the events the
// outbox holds.
type EventOutbox interface {
	Outbox
	// Events returns the events of the records among ids, by id; a record no longer in the
	// outbox is left out. It is safe for concurrent use with the other methods.
	Events(ctx context.Context, ids []uint64) (map[uint64]*schemas.Event, error)
}

// MemoryOutbox is an [Outbox] in memory. Its records are lost when the process ends:
// the dead-letter actor counts those still unwritten when it stops as dropped. It holds every
// pending record's event (it is no [EventOutbox]): its memory grows with them, which is why a
// router with a dead-letter destination keeps its outbox in its store ([StoreOutbox]), in
// memory too when the store is.
type MemoryOutbox struct {
	mu   sync.Mutex
	recs map[uint64]Record
	last uint64
}

// NewMemoryOutbox returns an empty in-memory outbox.
func NewMemoryOutbox() *MemoryOutbox { return &MemoryOutbox{recs: make(map[uint64]Record)} }

// Load implements [Outbox].
func (m *MemoryOutbox) Load(context.Context) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Collect(maps.Values(m.recs))
	slices.SortFunc(out, func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Put implements [Outbox].
func (m *MemoryOutbox) Put(_ context.Context, recs []Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		m.recs[r.ID] = r
		m.last = max(m.last, r.ID)
	}
	return nil
}

// NewID implements [Outbox].
func (m *MemoryOutbox) NewID() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last++
	return m.last
}

// Delete implements [Outbox].
func (m *MemoryOutbox) Delete(_ context.Context, ids []uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		delete(m.recs, id)
	}
	return nil
}

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

// Props returns the props of a dead-letter actor. The outbox is created here (when
// cfg has none), so a restarted actor finds its records again.
func Props(cfg *Config) *actor.Props {
	if cfg.Store == nil {
		panic("actors: Config.Store is required")
	}
	c := cfg.withDefaults()
	if c.Stops == nil {
		c.Stops = new(Stops)
	}
	return actor.PropsFromProducer(func() actor.Actor { return &deadLetters{cfg: c} })
}

// pendingObject is a group of records assigned to one object key; it keeps the key across
// retries, so a write that did land but whose answer was lost is replaced, not duplicated.
type pendingObject struct {
	id         uint64
	key        string
	topic, sub string
	target     Target
	recs       []*Record
	first      time.Time // the first write attempt, by this actor or (read back from the outbox) an earlier one
	attempts   int       // the write attempts since first
	// tried is when this actor (this incarnation) first tried the write, and triedHere counts
	// its tries: attempts > triedHere when earlier ones were made before a restart or by
	// another node.
	tried     time.Time
	triedHere int
	next      time.Time
	writing   bool
	// reread: the key was read back from the outbox (a restart, an adoption), whose records
	// may have left it only in part after the object was written whole; an object under the key
	// is then kept, not replaced by the records that are left of it.
	reread bool
}

// dlWritten is the result of one object write, sent by the goroutine that ran it.
type dlWritten struct {
	id        uint64
	info      sinks.ObjectInfo
	err       error
	permanent bool // the records cannot be encoded: retrying cannot help
	// missing counts the records the outbox no longer held when their events were read:
	// another writer (a node that adopted them) took them. They are left out of the object,
	// and no object is written when none is left.
	missing int
}

// dlWake is sent by the actor's timer.
type dlWake struct{ gen uint64 }

// dlSaved is the result of one outbox change, sent by the goroutine that wrote it.
type dlSaved struct {
	id  uint64 // of the change (see dlSaveIDs)
	err error
	put []Record // the change, written again as the actor restarts when it failed
	del []uint64
}

// dlLoaded is the outbox as the actor's start read it, sent by the goroutine that read it.
type dlLoaded struct {
	id   uint64
	recs []Record
	err  error
}

// earlyRecord is a record that arrived while the outbox was loading, kept for after it.
type earlyRecord struct {
	rec    *Record
	stored bool // it is in the outbox: past MaxEarlyRecords it is let go, and read back
}

// dlLoadIDs numbers outbox loads across incarnations, so a restarted actor ignores the load
// its predecessor started.
var dlLoadIDs atomic.Uint64

// dlObjectIDs and dlSaveIDs number object writes and outbox changes across incarnations, so a
// restarted actor ignores the results of those its predecessor started: taken for its own,
// the success of an older write would forget records that are in no object.
var dlObjectIDs, dlSaveIDs atomic.Uint64

// deadLetters is the dead-letter actor. All fields are owned by Receive.
type deadLetters struct {
	cfg    *Config
	self   *actor.PID
	system *actor.ActorSystem
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// after is closed once the stop work of the incarnations before this one has ended
	// ([Stops]): the outbox read and saves wait for it.
	after <-chan struct{}
	// events is the outbox when it keeps the events ([EventOutbox]): the records here then
	// have none, but for those not in the outbox yet.
	events EventOutbox

	// loading is the id of the outbox load in flight (0 once loaded), started at
	// loadingSince. Meanwhile status requests are answered at once (a poller's would otherwise
	// wait for as long as the store does not answer); records that arrive are put in the
	// outbox at once and kept in early, at most MaxEarlyRecords of them
	// ([deadLetters.keepEarly]); a Flush is remembered (flushAfter) with its sender among the
	// flushers; the results of a predecessor's writes and timers are dropped.
	loading      uint64
	loadingSince time.Time
	early        []earlyRecord
	earlyStored  int // of early, those in the outbox
	// readAgain: records in the outbox were let go from early, so the outbox is read again
	// (catchUp, the id of that read) once the first read is in; until that read is in too
	// no write starts, and a Flush waits.
	readAgain  bool
	catchUp    uint64
	flushAfter bool

	recs map[uint64]*Record
	// loaded holds the ids loaded at start, until their record leaves the outbox: a hand-off
	// of one of them comes late. An id left the outbox may be given again (a cluster node
	// started again numbers after the records of its base still there), and another node's
	// record under it is adopted here.
	loaded  map[uint64]bool
	waiting recordHeap
	objects map[uint64]*pendingObject
	stats   Status

	// The outbox change being saved (saving) and the changes made since, saved next;
	// afterSave and afterNext are the objects whose write waits for either.
	saving     uint64 // the id of the change being saved; 0 when none
	saveWG     sync.WaitGroup
	pendingPut map[uint64]Record
	pendingDel []uint64
	afterSave  []uint64
	afterNext  []uint64

	// putting counts the object writes running (at most MaxConcurrentWrites); putQueue holds,
	// in order, the objects whose write waits for one of them to end.
	putting  int
	putQueue []uint64

	flushers []*actor.PID
	timer    *time.Timer
	timerAt  time.Time
	timerGen uint64
}

// Receive implements actor.Actor.
func (d *deadLetters) Receive(c actor.Context) {
	switch msg := c.Message().(type) {
	case *actor.Started:
		d.start(c)
	case *dlLoaded:
		switch msg.id {
		case d.loading:
			d.applyLoad(c, msg)
		case d.catchUp:
			d.applyCatchUp(c, msg)
		}
	case *actor.Restarting:
		d.stop(false)
	case *actor.Stopping:
		d.stop(true)
	case *GetStatus:
		if c.Sender() != nil {
			c.Send(c.Sender(), d.status())
		}
	default:
		if d.loading != 0 {
			d.keepEarly(c, msg, c.Sender())
			return
		}
		d.handle(c, msg, c.Sender())
	}
	d.cfg.Metrics.SetOutbox(len(d.recs)) // read by the Prometheus collector, never by asking
}

// handle handles one message from sender once the outbox is loaded.
func (d *deadLetters) handle(c actor.Context, msg any, sender *actor.PID) {
	switch msg := msg.(type) {
	case *Enqueue:
		d.enqueue(msg)
		d.arm(time.Now())
	case *deadLettersHanded:
		d.handed(msg)
		d.arm(time.Now())
	case *dlWake:
		if msg.gen != d.timerGen {
			return
		}
		d.timerAt = time.Time{}
		if d.catchUp != 0 {
			return // no write before the outbox is read again: the read's end runs what is due
		}
		d.run(time.Now(), false)
	case *dlWritten:
		d.written(msg)
		d.answerFlushers(c)
		d.arm(time.Now())
	case *dlSaved:
		d.saved(msg)
		d.answerFlushers(c)
		d.arm(time.Now())
	case *Flush:
		d.addFlusher(c, sender)
		if d.catchUp != 0 {
			d.flushAfter = true
			return
		}
		d.run(time.Now(), true)
		d.answerFlushers(c)
	}
}

// addFlusher keeps sender to answer once the flush is done, unless MaxFlushers wait already:
// then it is answered at once, with the status of now.
func (d *deadLetters) addFlusher(c actor.Context, sender *actor.PID) {
	if sender == nil {
		return
	}
	if len(d.flushers) >= MaxFlushers {
		c.Send(sender, d.status())
		return
	}
	d.flushers = append(d.flushers, sender)
}

// keepEarly handles a message that arrives while the outbox loads. A record is put in the
// outbox at once (unless a subscription put it there) and kept for after the load, bounded by
// MaxEarlyRecords ([deadLetters.keep]); a Flush is remembered; a predecessor's results are
// dropped (nothing of this incarnation runs before its outbox is in).
func (d *deadLetters) keepEarly(c actor.Context, msg any, sender *actor.PID) {
	switch msg := msg.(type) {
	case *Enqueue:
		if r := d.record(msg); r != nil {
			d.save([]Record{*r}, nil)
			d.keep(r, false)
		}
	case *deadLettersHanded:
		if msg.save {
			d.save(msg.recs, nil)
		}
		for i := range msg.recs {
			d.keep(&msg.recs[i], !msg.save)
		}
	case *dlSaved:
		d.saved(msg)
	case *Flush:
		d.addFlusher(c, sender)
		d.flushAfter = true
	}
}

// keep keeps a record that arrived while the outbox loads. Past MaxEarlyRecords the records
// already in the outbox are let go, and so is every later one in it: the outbox is read again
// after the load ([deadLetters.readAgain]).
func (d *deadLetters) keep(r *Record, stored bool) {
	if stored && d.readAgain {
		return
	}
	d.early = append(d.early, earlyRecord{rec: r, stored: stored})
	if stored {
		d.earlyStored++
	}
	if len(d.early) > MaxEarlyRecords && d.earlyStored > 0 {
		d.letGoStored()
	}
}

// letGoStored lets go of the early records in the outbox: the outbox is read again after the
// load.
func (d *deadLetters) letGoStored() {
	d.readAgain = true
	kept := d.early[:0]
	for _, e := range d.early {
		if !e.stored {
			kept = append(kept, e)
		}
	}
	clear(d.early[len(kept):])
	d.early, d.earlyStored = kept, 0
}

// earlySaved marks the early records among put as in the outbox (dropping their events, for an
// [EventOutbox]), or lets them go when the outbox is to be read again.
func (d *deadLetters) earlySaved(put []Record) {
	if len(d.early) == 0 || len(put) == 0 {
		return
	}
	ids := make(map[uint64]bool, len(put))
	for _, p := range put {
		ids[p.ID] = true
	}
	for i := range d.early {
		e := &d.early[i]
		if e.stored || !ids[e.rec.ID] {
			continue
		}
		e.stored = true
		d.earlyStored++
		if d.events != nil {
			lighten(e.rec)
		}
	}
	if d.readAgain || len(d.early) > MaxEarlyRecords {
		d.letGoStored()
	}
}

func (d *deadLetters) start(c actor.Context) {
	d.self, d.system = c.Self(), c.ActorSystem()
	d.log = d.cfg.Logger.With("component", "dead-letters")
	d.ctx, d.cancel = context.WithCancel(context.Background())
	d.events, _ = d.cfg.Outbox.(EventOutbox)
	d.recs = make(map[uint64]*Record)
	d.loaded = make(map[uint64]bool)
	d.objects = make(map[uint64]*pendingObject)
	d.pendingPut = make(map[uint64]Record)
	d.putting, d.putQueue = 0, nil
	d.waiting = d.waiting[:0]
	d.stats = Status{}
	d.after = d.cfg.Stops.idle()
	// The outbox is read off the mailbox: a store may wait behind a publish's fsync.
	d.loading, d.loadingSince, d.early = d.read(), time.Now(), nil
}

// read reads the outbox off the mailbox and returns the id of the read, whose [dlLoaded]
// comes back. It reads once the stop work of the incarnation before has ended: its last
// changes are in the outbox then, or its WriteTimeouts passed.
func (d *deadLetters) read() uint64 {
	id := dlLoadIDs.Add(1)
	outbox, root, self, ctx, after := d.cfg.Outbox, d.system.Root, d.self, d.ctx, d.after
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		select {
		case <-after:
		case <-ctx.Done():
			return // stopped before: nobody reads the answer
		}
		recs, err := outbox.Load(ctx)
		sendUnlessStopped(ctx, root, self, &dlLoaded{id: id, recs: recs, err: err})
	}()
	return id
}

// applyLoad takes in the records loaded at start, then those that arrived meanwhile; when it
// let some of those go, it reads the outbox again ([deadLetters.applyCatchUp]) before it runs.
func (d *deadLetters) applyLoad(c actor.Context, m *dlLoaded) {
	if m.err != nil {
		panic(fmt.Errorf("loading the dead-letter outbox: %w", m.err))
	}
	early := d.early
	d.loading, d.early, d.earlyStored = 0, nil, 0
	now := time.Now()
	if n := d.takeInLoaded(m.recs, now); n > 0 {
		d.log.Info("dead-letter outbox loaded", "records", n)
	}
	recs := make([]*Record, 0, len(early))
	for _, e := range early {
		if _, ok := d.recs[e.rec.ID]; !ok && !d.loaded[e.rec.ID] {
			recs = append(recs, e.rec)
		}
	}
	d.takeIn(recs, now)
	if d.readAgain {
		d.readAgain = false
		d.catchUp = d.read()
		return
	}
	d.ready(c, now)
}

// applyCatchUp takes in the records of the outbox's second read that the actor does not know:
// those let go while it loaded ([MaxEarlyRecords]). No write ran since the first read, so none
// of them left the outbox since.
func (d *deadLetters) applyCatchUp(c actor.Context, m *dlLoaded) {
	if m.err != nil {
		panic(fmt.Errorf("reading the dead-letter outbox again: %w", m.err))
	}
	d.catchUp = 0
	now := time.Now()
	if n := d.takeInLoaded(m.recs, now); n > 0 {
		d.log.Info("dead-letter outbox read again for the records that arrived while it loaded", "records", n)
	}
	d.ready(c, now)
}

// takeInLoaded takes in the records read from the outbox that the actor does not know yet,
// noting them as loaded, and returns how many.
func (d *deadLetters) takeInLoaded(recs []Record, now time.Time) int {
	loaded := make([]*Record, 0, len(recs))
	for i := range recs {
		r := &recs[i]
		if _, ok := d.recs[r.ID]; ok || d.loaded[r.ID] {
			continue
		}
		loaded = append(loaded, r)
		d.loaded[r.ID] = true
	}
	d.takeIn(loaded, now)
	return len(loaded)
}

// ready starts the actor's work once its outbox is in: the flush asked for meanwhile, or the
// timer of the next write.
func (d *deadLetters) ready(c actor.Context, now time.Time) {
	if d.flushAfter {
		d.flushAfter = false
		d.run(now, true)
		d.answerFlushers(c)
		return
	}
	d.arm(now)
}

// stop cancels what runs, takes the changes the outbox has not saved yet and starts the stop
// work ([Stops]) that saves them once the writes and the save in flight have returned: the
// actor terminates at once (the waits would hold its mailbox, up to 3 × WriteTimeout, exactly
// when the store is slow), and the next incarnation reads the outbox after that stop work.
func (d *deadLetters) stop(final bool) {
	if d.cancel != nil {
		d.cancel()
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timerGen++
	if _, inMemory := d.cfg.Outbox.(*MemoryOutbox); final && (inMemory || d.cfg.Volatile) {
		// The in-memory outbox dies with the process: what is still in it is lost, and said
		// so; its records leave the outbox with the last changes. Those that arrived while it
		// loaded count too. (The results of the writes and the save in flight never reach this
		// incarnation: it counts the records as it has them now.)
		for _, e := range d.early {
			if _, ok := d.recs[e.rec.ID]; !ok {
				d.recs[e.rec.ID] = e.rec
			}
		}
		d.early = nil
		ids := slices.Sorted(maps.Keys(d.recs))
		for _, id := range ids {
			d.drop(d.recs[id], "the router stopped before the record could be written")
			delete(d.pendingPut, id)
		}
		d.pendingDel = append(d.pendingDel, ids...)
	}
	// What the actor decided is saved before the next incarnation loads, off the mailbox.
	save := d.pendingSave()
	prev, end := d.cfg.Stops.begin()
	wg, saveWG, timeout, log := &d.wg, &d.saveWG, d.cfg.WriteTimeout, d.log
	go func() {
		defer end()
		<-prev // the stop work before, bounded the same way: its last save lands first
		if !actors.WaitBounded(wg, timeout) {
			log.Error("dead-letter writes did not return after their context was cancelled; abandoning them, their records stay in the outbox")
		}
		// The save in flight gets WriteTimeout; a store stuck longer than that must not hold
		// the next incarnation or the router's shutdown, so the last changes are then written
		// beside it (at worst a record's older state lands last, and its object is written
		// again: at least once).
		if !actors.WaitBounded(saveWG, timeout) {
			log.Error("the dead-letter outbox save did not finish in time; writing the latest changes beside it", "timeout", timeout)
		}
		// The last changes, bounded the same way (an outbox may ignore its context).
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var last sync.WaitGroup
		last.Add(1)
		var err error
		go func() {
			defer last.Done()
			err = save(ctx)
		}()
		if !actors.WaitBounded(&last, timeout) {
			log.Error("the dead-letter outbox did not take the last changes in time; records made since the last save may be lost", "timeout", timeout)
		} else if err != nil {
			log.Error("saving the dead-letter outbox before stopping", "err", err)
		}
	}()
}

// sendUnlessStopped sends a result of work off the mailbox to the actor, unless the actor
// has stopped (or restarted) meanwhile, its context ended: no incarnation takes a result of
// another's, and one sent after the actor terminated would only be logged as a protoactor
// dead letter.
func sendUnlessStopped(ctx context.Context, root *actor.RootContext, self *actor.PID, msg any) {
	if ctx.Err() == nil {
		root.Send(self, msg)
	}
}

// save queues outbox changes: records to put (their latest state) and ids to delete. They are
// written off the mailbox, after the changes queued before them.
func (d *deadLetters) save(put []Record, del []uint64) {
	for _, r := range put {
		d.pendingPut[r.ID] = r
	}
	for _, id := range del {
		delete(d.pendingPut, id)
	}
	d.pendingDel = append(d.pendingDel, del...)
	d.startSave()
}

// startSave writes the queued outbox changes, unless a change is being written: then they go
// when it is done.
func (d *deadLetters) startSave() {
	if d.saving != 0 || (len(d.pendingPut) == 0 && len(d.pendingDel) == 0) {
		return
	}
	put := slices.SortedFunc(maps.Values(d.pendingPut), func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	del := d.pendingDel
	clear(d.pendingPut)
	d.pendingDel = nil
	d.afterSave, d.afterNext = d.afterNext, nil
	id := dlSaveIDs.Add(1)
	d.saving = id
	outbox, root, self, after, actx := d.cfg.Outbox, d.system.Root, d.self, d.after, d.ctx
	d.saveWG.Add(1)
	go func() {
		defer d.saveWG.Done()
		<-after // the last changes of the incarnation before land first ([Stops])
		// Not the actor's context: a change the actor made is saved even when it stops.
		err := writeOutbox(context.Background(), outbox, put, del)
		sendUnlessStopped(actx, root, self, &dlSaved{id: id, err: err, put: put, del: del})
	}()
}

// pendingSave takes the queued outbox changes and returns the function that writes them (the
// actor is stopping); it touches no actor state, so it may run off the mailbox.
func (d *deadLetters) pendingSave() func(ctx context.Context) error {
	put := slices.SortedFunc(maps.Values(d.pendingPut), func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	del := d.pendingDel
	clear(d.pendingPut)
	d.pendingDel = nil
	outbox := d.cfg.Outbox
	return func(ctx context.Context) error { return writeOutbox(ctx, outbox, put, del) }
}

func writeOutbox(ctx context.Context, outbox Outbox, put []Record, del []uint64) error {
	if len(put) > 0 {
		if err := outbox.Put(ctx, put); err != nil {
			return fmt.Errorf("saving dead letters to the outbox: %w", err)
		}
	}
	if len(del) > 0 {
		if err := outbox.Delete(ctx, del); err != nil {
			return fmt.Errorf("removing dead letters from the outbox: %w", err)
		}
	}
	return nil
}

// saved applies the result of an outbox change: the objects that waited for it are written,
// and the changes made meanwhile are saved next.
func (d *deadLetters) saved(m *dlSaved) {
	if m.id != d.saving {
		return // from before a restart
	}
	d.saving = 0
	if m.err != nil {
		// The outbox is the truth after a restart: start again from it. The failed change goes
		// back in front of those made since, so the restart's last save writes it again (a store
		// that failed once may take it): a record put by it alone, taken in from a replay, is
		// in no other change.
		for _, r := range m.put {
			if _, newer := d.pendingPut[r.ID]; !newer && !slices.Contains(d.pendingDel, r.ID) {
				d.pendingPut[r.ID] = r
			}
		}
		d.pendingDel = append(m.del, d.pendingDel...)
		panic(m.err)
	}
	if d.events != nil {
		// Records the actor put with their events are in the outbox now: their events are
		// read back from it when written.
		for _, p := range m.put {
			if r := d.recs[p.ID]; r != nil && r.Letter.Event != nil {
				lighten(r)
			}
		}
	}
	d.earlySaved(m.put)
	d.putQueue = append(d.putQueue, d.afterSave...)
	d.afterSave = nil
	d.startPuts()
	d.startSave()
}

func (d *deadLetters) enqueue(m *Enqueue) {
	r := d.record(m)
	if r == nil {
		return
	}
	d.save([]Record{*r}, nil) // with its event, kept here until the outbox holds it
	d.recs[r.ID] = r
	heap.Push(&d.waiting, r)
}

// record returns the outbox record of an Enqueue (nil for one without an event).
func (d *deadLetters) record(m *Enqueue) *Record {
	if m.Letter == nil || m.Letter.Event == nil {
		return nil
	}
	r := newOutboxRecord(d.cfg, m.Letter, m.Target)
	note(r)
	return r
}

// newOutboxRecord returns the outbox record of a dead letter, with a fresh id: due the delay
// after its event's last attempt.
func newOutboxRecord(cfg *Config, l *actors.DeadLetter, t Target) *Record {
	base := l.LastAttemptTime
	if base.IsZero() {
		base = time.Now()
	}
	return &Record{ID: cfg.Outbox.NewID(), Letter: l, Target: t, Due: base.Add(cfg.scale(cfg.Delay))}
}

// handed takes in records a subscription put in the outbox with its own update
// ([actors.DeadLetterHandoff]), or that [StoreOutbox.Adopt] read there; those of a replay's
// subscription, settled in its own journal, are put in the outbox here. One loaded at start, or
// already known, is not taken in twice.
func (d *deadLetters) handed(m *deadLettersHanded) {
	var recs []*Record
	var put []Record
	for i := range m.recs {
		r := &m.recs[i]
		if _, ok := d.recs[r.ID]; ok || d.loaded[r.ID] {
			continue
		}
		recs = append(recs, r)
		if m.save {
			put = append(put, *r)
		}
	}
	if len(put) > 0 {
		d.save(put, nil)
	}
	d.takeIn(recs, time.Now())
}

// takeIn takes in records read from the outbox. Those whose write was tried before — by an
// earlier incarnation, or by the node that ran their subscription before (adopted) — are
// grouped again into their object (by its key; records saved by an older version without one,
// by their first write attempt) and retried at once: that write may have landed, so the object
// is looked for under its key and kept when found, instead of putting the records in a second
// object or replacing it with those of its records still in the outbox. The others wait out
// their delay. A record is tried at once however long ago its first attempt was: the limit
// ([Config.GiveUpAfter]) drops it only if this try fails too.
func (d *deadLetters) takeIn(recs []*Record, now time.Time) {
	type group struct {
		target     Target
		topic, sub string
		first      time.Time
		key        string
	}
	groups := map[group]*pendingObject{}
	for _, r := range recs {
		note(r)
		d.recs[r.ID] = r
		if r.FirstWriteAttempt.IsZero() {
			heap.Push(&d.waiting, r)
			continue
		}
		g := group{r.Target, r.Letter.Topic, r.Letter.Subscription, r.FirstWriteAttempt, r.ObjectKey}
		if r.ObjectKey != "" {
			g.first = time.Time{}
		}
		o, ok := groups[g]
		if !ok {
			o = d.newObject(g.topic, g.sub, r.Target, now)
			if r.ObjectKey != "" {
				o.key, o.reread = r.ObjectKey, true
			}
			o.first, o.attempts, o.next = r.FirstWriteAttempt, r.WriteAttempts, now
			groups[g] = o
		}
		o.first = minTime(o.first, r.FirstWriteAttempt)
		o.attempts = max(o.attempts, r.WriteAttempts)
		o.recs = append(o.recs, r)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (d *deadLetters) newObject(topic, sub string, t Target, now time.Time) *pendingObject {
	o := &pendingObject{
		id: dlObjectIDs.Add(1), topic: topic, sub: sub, target: t,
		key: Key(t.Prefix, now, d.cfg.NewID()),
	}
	d.objects[o.id] = o
	return o
}

// run starts the writes that are due at now: objects whose retry has come, then the waiting
// records due, grouped one object per subscription. With flush everything is due.
func (d *deadLetters) run(now time.Time, flush bool) {
	for _, id := range slices.Sorted(maps.Keys(d.objects)) {
		o := d.objects[id]
		if o.writing || (!flush && o.next.After(now)) {
			continue
		}
		d.write(o, now) // past the limit too: records are dropped only after a try fails (written)
	}
	type group struct {
		target     Target
		topic, sub string
	}
	var order []group
	due := map[group][]*Record{}
	for d.waiting.Len() > 0 && (flush || !d.waiting[0].Due.After(now)) {
		r := heap.Pop(&d.waiting).(*Record)
		if d.cfg.Owns != nil && !d.cfg.Owns(r.Letter.Topic, r.Letter.Subscription) {
			delete(d.recs, r.ID) // another node's to write; Adopt brings it back if it moves here
			delete(d.loaded, r.ID)
			continue
		}
		g := group{r.Target, r.Letter.Topic, r.Letter.Subscription}
		if _, ok := due[g]; !ok {
			order = append(order, g)
		}
		due[g] = append(due[g], r)
	}
	for _, g := range order {
		recs := due[g]
		for len(recs) > 0 {
			n := objectLength(recs, d.cfg.MaxRecordsPerObject, d.cfg.MaxObjectBytes)
			o := d.newObject(g.topic, g.sub, g.target, now)
			o.recs, recs = recs[:n], recs[n:]
			d.write(o, now)
		}
	}
	d.arm(now)
}

// objectLength returns how many of recs, taken in order, the next object holds: at most
// maxRecords, and records whose encoding takes at most maxBytes — at least one, so a record
// larger than maxBytes is written alone.
func objectLength(recs []*Record, maxRecords, maxBytes int) int {
	n, size := 0, 0
	for n < len(recs) && n < maxRecords {
		s := recs[n].Size
		if n > 0 && size+s > maxBytes {
			break
		}
		size += s
		n++
	}
	return n
}

// note sets the event id and size of a record that has its event.
func note(r *Record) {
	if r.Letter.Event != nil {
		r.EventID, r.Size = r.Letter.Event.ID, sizeOf(r)
	}
}

// lighten notes r's event id and size and drops its event ([EventOutbox]); the letter is
// replaced, not changed: others may share it.
func lighten(r *Record) {
	if r.Letter.Event == nil {
		return
	}
	note(r)
	l := *r.Letter
	l.Event = nil
	r.Letter = &l
}

// sizeOf bounds the bytes of a record, with its event, in its object.
func sizeOf(r *Record) int {
	rec := recordOf(r.Letter)
	return schemas.DeadLetterSizeBound(r.Target.Format, &rec)
}

// recordOf returns the wire record of a dead letter.
func recordOf(l *actors.DeadLetter) schemas.DeadLetterRecord {
	return schemas.DeadLetterRecord{
		Event: l.Event, Reason: l.Reason, DeliveryAttempts: l.DeliveryAttempts, LastOutcome: l.LastOutcome,
		LastHTTPStatus: l.LastHTTPStatus, PublishTime: l.PublishTime, LastAttemptTime: l.LastAttemptTime,
	}
}

// write starts one object write: its records' new write state is saved to the outbox first,
// then the object is put ([deadLetters.put]), both off the mailbox.
func (d *deadLetters) write(o *pendingObject, now time.Time) {
	o.writing = true
	o.attempts++
	o.triedHere++
	if o.first.IsZero() {
		o.first = now
	}
	if o.tried.IsZero() {
		o.tried = now
	}
	changed := make([]Record, len(o.recs))
	for i, r := range o.recs {
		if r.FirstWriteAttempt.IsZero() {
			r.FirstWriteAttempt = o.first
		}
		r.WriteAttempts = o.attempts
		r.ObjectKey = o.key
		changed[i] = *r
	}
	d.afterNext = append(d.afterNext, o.id) // before save starts the change that includes it
	d.save(changed, nil)
}

// startPuts starts the queued object writes while fewer than MaxConcurrentWrites run.
func (d *deadLetters) startPuts() {
	for d.putting < MaxConcurrentWrites && len(d.putQueue) > 0 {
		id := d.putQueue[0]
		d.putQueue = d.putQueue[1:]
		if o, ok := d.objects[id]; ok {
			d.put(o)
		}
	}
	if len(d.putQueue) == 0 {
		d.putQueue = nil // let the array go
	}
}

// put writes an object off the mailbox; the result comes back as a [dlWritten], which frees
// its place among the MaxConcurrentWrites. The events of records that have none here are read
// from the outbox ([EventOutbox]) by the write, once it knows it writes the object.
func (d *deadLetters) put(o *pendingObject) {
	ids := make([]uint64, len(o.recs))
	letters := make([]*actors.DeadLetter, len(o.recs))
	size := 2
	for i, r := range o.recs {
		ids[i], letters[i] = r.ID, r.Letter
		size += r.Size
	}
	id, key, target, topic, sub, reread := o.id, o.key, o.target, o.topic, o.sub, o.reread
	root, self, parent, cfg, events := d.system.Root, d.self, d.ctx, d.cfg, d.events
	d.putting++
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		res := &dlWritten{id: id}
		defer func() { sendUnlessStopped(parent, root, self, res) }()
		ctx, cancel := context.WithTimeout(parent, cfg.WriteTimeout)
		found := false
		if reread {
			res.info, found, res.err = lookupObject(ctx, cfg.Store, target.Bucket, key)
		}
		written := len(ids)
		if res.err == nil && !found {
			var recs []schemas.DeadLetterRecord
			recs, res.err = wireRecords(ctx, events, ids, letters)
			res.missing, written = len(ids)-len(recs), len(recs)
			var body []byte
			if res.err == nil && len(recs) > 0 {
				if body, res.err = schemas.AppendDeadLetters(make([]byte, 0, size), target.Format, recs); res.err != nil {
					res.permanent = true
				}
			}
			recs = nil // let the events go before the upload
			if res.err == nil && len(body) > 0 {
				res.info, res.err = cfg.Store.Put(ctx, target.Bucket, key, body, sinks.PutOptions{
					ContentType: schemas.ContentTypeDeadLetters, Metadata: map[string]string{TopicMetadata: topic},
				})
			}
		}
		cancel()
		if res.err == nil && written > 0 && target.Notify && cfg.OnWritten != nil {
			cfg.OnWritten(parent, &Object{Topic: topic, Subscription: sub, Target: target, Info: res.info, Records: written})
		}
	}()
}

// wireRecords returns the wire records of an object's letters (ids their records' ids),
// reading from events the events the letters do not have. A record no longer in the outbox
// (another writer took it) is left out.
func wireRecords(ctx context.Context, events EventOutbox, ids []uint64, letters []*actors.DeadLetter) ([]schemas.DeadLetterRecord, error) {
	var read []uint64
	for i, l := range letters {
		if l.Event == nil {
			read = append(read, ids[i])
		}
	}
	var evs map[uint64]*schemas.Event
	if len(read) > 0 {
		if events == nil {
			return nil, errors.New("dead letters without their events, and an outbox that does not keep them")
		}
		var err error
		if evs, err = events.Events(ctx, read); err != nil {
			return nil, err
		}
	}
	recs := make([]schemas.DeadLetterRecord, 0, len(letters))
	for i, l := range letters {
		rec := recordOf(l)
		if rec.Event == nil {
			if rec.Event = evs[ids[i]]; rec.Event == nil {
				continue
			}
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// lookupObject describes the object under key in bucket; found is false when there is none.
// It lists one object: the first key beginning with key is key itself, when there is one.
func lookupObject(ctx context.Context, st sinks.ObjectStore, bucket, key string) (info sinks.ObjectInfo, found bool, err error) {
	objs, err := st.List(ctx, bucket, sinks.ListQuery{Prefix: key, Max: 1})
	if errors.Is(err, sinks.ErrBucketNotFound) {
		return sinks.ObjectInfo{}, false, nil
	}
	if err != nil {
		return sinks.ObjectInfo{}, false, fmt.Errorf("looking for the dead-letter object %s/%s: %w", bucket, key, err)
	}
	for _, o := range objs {
		if o.Key == key {
			return o, true, nil
		}
	}
	return sinks.ObjectInfo{}, false, nil
}

// written applies the result of one write.
func (d *deadLetters) written(m *dlWritten) {
	o, ok := d.objects[m.id]
	if !ok {
		return // from before a restart
	}
	d.putting--
	defer d.startPuts()
	o.writing = false
	now := time.Now()
	if m.err == nil {
		ids := make([]uint64, len(o.recs))
		for i, r := range o.recs {
			ids[i] = r.ID
			delete(d.recs, r.ID)
			delete(d.loaded, r.ID)
		}
		d.save(nil, ids)
		delete(d.objects, o.id)
		if m.missing > 0 {
			d.log.Warn("dead letters left the outbox before their object was written; another writer took them",
				logattr.Topic, o.topic, logattr.Subscription, o.sub, "records", m.missing)
		}
		if n := len(o.recs) - m.missing; n > 0 {
			d.stats.ObjectsWritten++
			d.stats.RecordsWritten += n
			d.log.Info("dead letters written", logattr.Topic, o.topic, logattr.Subscription, o.sub, "bucket", o.target.Bucket,
				"key", o.key, "records", n, "attempts", o.attempts)
		}
		return
	}
	if m.permanent {
		d.log.Error("dead letters cannot be encoded; dropping them", logattr.Topic, o.topic, logattr.Subscription, o.sub, "err", m.err)
		d.dropObject(o, "the records cannot be encoded: "+m.err.Error())
		return
	}
	giveUp := o.first.Add(d.cfg.scale(d.cfg.GiveUpAfter))
	if !now.Before(giveUp) {
		d.log.Warn("writing dead letters failed", logattr.Topic, o.topic, logattr.Subscription, o.sub, "bucket", o.target.Bucket,
			"key", o.key, "records", len(o.recs), "attempts", o.attempts, "err", m.err)
		d.dropObject(o, d.unavailableFor(o, now))
		return
	}
	delay := d.cfg.Backoff[min(o.attempts, len(d.cfg.Backoff))-1]
	o.next = now.Add(d.cfg.scale(delay))
	if o.next.After(giveUp) {
		o.next = giveUp // a last try at the limit: the records are dropped if it fails
	}
	d.log.Warn("writing dead letters failed; will retry", logattr.Topic, o.topic, logattr.Subscription, o.sub, "bucket", o.target.Bucket,
		"key", o.key, "records", len(o.recs), "attempts", o.attempts, "retryIn", o.next.Sub(now), "err", m.err)
}

// unavailableFor says why an object whose write failed at now, past the limit, is dropped:
// how long the destination was seen unavailable. When earlier attempts were made before a
// restart (or by another node), only the tries since are this actor's to vouch for: the
// destination may have been up while the router was down, so the reason says what was
// seen since the records were taken up again, and how long ago the first attempt was.
func (d *deadLetters) unavailableFor(o *pendingObject, now time.Time) string {
	sinceFirst := now.Sub(o.first).Round(time.Second)
	if o.attempts <= o.triedHere {
		return fmt.Sprintf("the dead-letter destination was unavailable for %s after the first write attempt (%s)",
			sinceFirst, plural(o.attempts, "attempt"))
	}
	return fmt.Sprintf("the dead-letter destination still failed the write after the records were read back from the outbox "+
		"(a restart or a hand-over): %s failed in the %s since; the first write attempt, before that, was %s ago "+
		"(%s in all), past the limit of %s",
		plural(o.triedHere, "attempt"), now.Sub(o.tried).Round(time.Second), sinceFirst, plural(o.attempts, "attempt"),
		d.cfg.scale(d.cfg.GiveUpAfter))
}

// plural says n things, as "1 attempt" or "3 attempts".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// dropObject drops every record of an object that cannot be written, saying why.
func (d *deadLetters) dropObject(o *pendingObject, why string) {
	ids := make([]uint64, len(o.recs))
	for i, r := range o.recs {
		ids[i] = r.ID
		d.drop(r, why)
	}
	d.save(nil, ids)
	delete(d.objects, o.id)
}

// drop forgets one record: counted as DroppedEventCount with reason
// DeadLetterDestinationUnavailable (SPEC §5) and logged with its event id.
func (d *deadLetters) drop(r *Record, why string) {
	l := r.Letter
	delete(d.recs, r.ID)
	delete(d.loaded, r.ID)
	d.stats.RecordsDropped++
	d.cfg.Metrics.Add(metrics.Key{
		Name: metrics.DroppedEventCount, Scope: metrics.SubscriptionScope(l.Topic, l.Subscription),
		Dim: string(schemas.DeadLetterDestinationUnavailable),
	}, 1)
	d.log.Warn("dead letter dropped", logattr.EventID, r.EventID, logattr.Topic, l.Topic, logattr.Subscription, l.Subscription,
		"bucket", r.Target.Bucket, "reason", string(schemas.DeadLetterDestinationUnavailable),
		"deadLetterReason", string(l.Reason), "why", why)
}

func (d *deadLetters) answerFlushers(c actor.Context) {
	if len(d.flushers) == 0 || d.saving != 0 || d.loading != 0 || d.catchUp != 0 {
		return // the answer waits until what it reports is in the outbox
	}
	for _, o := range d.objects {
		if o.writing {
			return
		}
	}
	st := d.status()
	for _, p := range d.flushers {
		if p != nil {
			c.Send(p, st)
		}
	}
	d.flushers = nil
}

// arm makes sure a wake arrives when the next write is due: the earliest waiting record's due
// time plus the slack, or the earliest retry.
func (d *deadLetters) arm(now time.Time) {
	var at time.Time
	if d.waiting.Len() > 0 {
		at = d.waiting[0].Due.Add(d.cfg.scale(d.cfg.Slack))
	}
	for _, o := range d.objects {
		if !o.writing && (at.IsZero() || o.next.Before(at)) {
			at = o.next
		}
	}
	if at.IsZero() || at.Equal(d.timerAt) {
		return
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timerGen++
	d.timerAt = at
	gen, root, self := d.timerGen, d.system.Root, d.self
	d.timer = time.AfterFunc(max(at.Sub(now), 0), func() { root.Send(self, &dlWake{gen: gen}) })
}

func (d *deadLetters) status() *Status {
	if d.loading != 0 || d.catchUp != 0 {
		return &Status{Loading: true, LoadingSince: d.loadingSince}
	}
	st := d.stats
	st.Waiting = d.waiting.Len()
	for _, o := range d.objects {
		if o.writing {
			st.Writing += len(o.recs)
		} else {
			st.Retrying += len(o.recs)
		}
	}
	return &st
}

// recordHeap orders waiting records by due time, then id.
type recordHeap []*Record

func (h recordHeap) Len() int { return len(h) }
func (h recordHeap) Less(i, j int) bool {
	if h[i].Due.Equal(h[j].Due) {
		return h[i].ID < h[j].ID
	}
	return h[i].Due.Before(h[j].Due)
}
func (h recordHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *recordHeap) Push(x any)   { *h = append(*h, x.(*Record)) }
func (h *recordHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil // the slot past the end must not keep the record (and its event) alive
	*h = old[:len(old)-1]
	return r
}
