package actors

import (
	"log/slog"
	"time"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// A subscription actor's configuration (push or queue): what its topic actor starts it with,
// and the part every subscription of a topic shares.

// Defaults of a [SubscriptionConfig].
const (
	// DefaultMaxInFlight bounds the attempts one subscription runs at once.
	DefaultMaxInFlight = 16
	// DefaultWindow bounds the events a subscription keeps in memory; the rest waits in the
	// journal.
	DefaultWindow = 4096
	// DefaultMaxEventsPerBatch and DefaultPreferredBatchBytes apply when batching is on and only
	// one of the two limits is set (SPEC §2.3).
	DefaultMaxEventsPerBatch   = 5000
	DefaultPreferredBatchBytes = 64 * 1024
	// DefaultStopGrace is how long a stopping subscription waits (off its mailbox) for its
	// sink calls to return after cancelling them, and then for its last state write. A
	// router's close gives the attempts in flight as long to be answered before it stops the
	// subscriptions ([Drain]).
	DefaultStopGrace = 5 * time.Second
)

// SubscriptionConfig is everything a subscription actor needs. It is immutable once the actor
// is spawned; an update replaces the actor.
//
// The fields every subscription of a topic has in common are in [SubscriptionShared], one
// value per topic that the configs point to (its fields read as the config's own): at tens of
// thousands of subscriptions, each keeps only what is its own.
type SubscriptionConfig struct {
	// SubscriptionShared must be set. A copy that changes one of its fields (a replay's
	// journal) copies it first: writing through the pointer would change every subscription's.
	*SubscriptionShared

	Name           string
	DeliverySchema schemas.Schema // how events are encoded for the sink
	Filter         *filter.Filter // nil matches everything
	Policy         *retry.Policy  // retry, TTL and dead-letter policy
	// Sink delivers the subscription's batches. One that holds resources for its deliveries
	// (a broker connection) implements [ReleasingSink]: each actor that delivers through it
	// releases it as it stops.
	Sink sinks.Sink

	// Batching is off when both are zero: one event per request (SPEC §2.3). Setting either
	// turns it on; the other takes its default. With batching on, CloudEvents deliveries always
	// use the batch framing (a JSON array, application/cloudevents-batch+json), even for a
	// batch of one.
	MaxEventsPerBatch   int
	PreferredBatchBytes int

	Timeout time.Duration // per-attempt response timeout; 0 = sinks.DefaultTimeout
	Headers map[string]string

	// NoGauges keeps the actor from publishing its delivery state in Metrics' gauges: a
	// replay's actor, which shares the live subscription's name, sets it.
	NoGauges bool

	// OnDeadLetter receives every event that ends without delivery when the policy has a
	// dead-letter destination. It must not block.
	OnDeadLetter func(*DeadLetter)
	// Handoff, when set, takes those events into the dead-letter outbox in the same store
	// update that settles them (see [DeadLetterHandoff]).
	Handoff DeadLetterHandoff
	// OnFenced, when set, is called (from the actor, push or queue) when a state write failed with
	// [store.ErrFenced]: another writer (another cluster node) changed the subscription's
	// state since this actor loaded it. The actor then stops for good instead of restarting
	// and overwriting it; its owner decides whether to start it again. It must not block.
	OnFenced func()
	// OnLoaded, when set, is called (from the actor, push or queue) once the actor loaded its
	// stored state, with the epoch it loaded ([store.SubscriptionState.Epoch]): the life of
	// the subscription it runs, which is not the one its owner last listed when the store
	// gave the state a new epoch as it loaded it (a state that does not decode, started
	// afresh). It must not block.
	OnLoaded func(epoch uint64)
	// OnAttempt, when set, receives a record of every finished attempt, and of every event
	// that ended when it came due without an attempt ([AttemptRecord.NoAttempt]); a queue
	// subscription's actor a record of each step of its events' pull delivery
	// ([AttemptRecord.Pull]). It is called from the actor and must not block.
	OnAttempt func(*AttemptRecord)

	// Queue, when set, makes the subscription a queue (pull) subscription: consumers receive
	// and settle its events, and Sink is not used (see [QueueConfig]).
	Queue *QueueConfig

	// after, when set, is closed once the actor this one replaces has terminated, its stop
	// work under way (stopwork.go): the load waits for it, then for that stop work, which
	// ends once the old actor's last state write is in the store or its stop grace passed
	// (set by the topic actor: topic.add).
	after <-chan struct{}
}

// SubscriptionShared is the part of a [SubscriptionConfig] that the subscriptions of a topic
// share: the topic, the router's limits, store, writer and telemetry. It is immutable once a
// config points to it.
type SubscriptionShared struct {
	Topic       string
	TopicID     string         // stamped into Event Grid events; the CloudEvents source
	InputSchema schemas.Schema // the topic's input schema
	// Encode holds egrid's extensions to the delivery encoding; the zero value is Azure's.
	Encode schemas.EncodeOptions

	MaxInFlight int // attempts at once; 0 = DefaultMaxInFlight
	Window      int // events kept in memory; 0 = DefaultWindow

	// StopGrace bounds how long a stopping or restarting actor waits for its attempts in
	// flight to return once their context is cancelled, and for its last state write; a queue
	// subscription's (pull delivery) for its journal and state reads and its last state write.
	// The actor waits off its mailbox, after it has terminated; the next actor of the
	// subscription loads its state once those waits ended ([Stops]). 0 = DefaultStopGrace. A
	// sink that ignores its context is abandoned after it: see [sinks.Sink].
	StopGrace time.Duration

	Store store.Store
	// LoadSlots, when set, bounds the subscriptions of a router that read their stored state
	// at once (one slot each, taken off the mailbox): a restart with a thousand subscriptions
	// then holds a few of them half-read, not all of them.
	LoadSlots chan struct{}
	// Writer, when set, writes state updates off the mailbox (see [StateWriter]); without it
	// the actor writes them itself.
	Writer *StateWriter
	// Stops, when set, counts the stop work of the actors: their waits, once they have
	// terminated, for their sink calls and their last state write, which run off their
	// mailboxes. The owner waits for it before it closes the store ([Stops.Wait]).
	Stops *Stops
	// AnswerBudget, when set, bounds the bytes of the queue subscriptions' receive answers
	// held at once, shared by all the router's subscriptions (see [AnswerBudget]); without
	// it they are not bounded.
	AnswerBudget *AnswerBudget
	Metrics      *metrics.Set
	Logger       *slog.Logger
}

// stopGrace is StopGrace with its default.
func (c *SubscriptionShared) stopGrace() time.Duration {
	if c.StopGrace > 0 {
		return c.StopGrace
	}
	return DefaultStopGrace
}

func (c *SubscriptionConfig) batchLimits() (events, bytes int) {
	if c.MaxEventsPerBatch == 0 && c.PreferredBatchBytes == 0 {
		return 1, 0
	}
	events, bytes = c.MaxEventsPerBatch, c.PreferredBatchBytes
	if events == 0 {
		events = DefaultMaxEventsPerBatch
	}
	if bytes == 0 {
		bytes = DefaultPreferredBatchBytes
	}
	return events, bytes
}

// mustShare panics with what to do when cfg has no shared part: a programming error that
// would otherwise surface as a nil dereference inside the actor.
func mustShare(cfg *SubscriptionConfig) {
	if cfg.SubscriptionShared == nil {
		panic("actors: SubscriptionConfig.SubscriptionShared is nil; point it at the topic's SubscriptionShared")
	}
}

// ReleasingSink is a [sinks.Sink] that holds resources for the deliveries made through it (a
// broker destination's connection of its own), which a subscription actor gives back as it
// stops: deleted, replaced by an update, with its topic, at the router's close, and also at a
// restart (after a panic, or with its topic actor), whose next actor delivers through the same
// sink. Release is called once per stopping actor, off its mailbox, in its stop work, after
// the actor's last state write (or its grace), and its owner ([Stops]) waits for it. It must
// not close anything under a Deliver still running (an attempt abandoned after the stop
// grace): it gives back what those hold once they return. A Deliver after Release takes new
// resources. Release may block, bounded.
type ReleasingSink interface {
	sinks.Sink
	Release()
}

// releasing returns s as a [ReleasingSink], or nil when it is none.
func releasing(s sinks.Sink) ReleasingSink {
	r, _ := s.(ReleasingSink)
	return r
}
