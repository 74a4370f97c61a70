package router

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
)

// This file holds dead-lettering's config and its wiring into the router (SPEC §5): the
// dead-letter actor and the hand-off from subscription actors. The BlobCreated notifications
// are in notify.go, reading dead-letter objects in deadletter_read.go, replay in replay.go,
// and the HTTP routes in router/httpapi.

// Sentinel errors of dead-lettering.
var (
	// ErrDeadLettersUnavailable: the router has no dead-letter store (Deps.DeadLetterStore).
	ErrDeadLettersUnavailable = errors.New("dead-lettering is not configured: the router has no dead-letter store")
	// ErrNoDeadLetterDestination: the subscription has no deadLetterDestination.
	ErrNoDeadLetterDestination = errors.New("event subscription has no deadLetterDestination")
	// ErrReplayRunning: a replay of the subscription is already running.
	ErrReplayRunning = errors.New("a replay of this event subscription is already running")
	// ErrReplayIntoQueue: the subscription is a queue subscription, which a replay cannot
	// deliver into (a dry run can still list its dead letters).
	ErrReplayIntoQueue = errors.New("replaying dead letters into a queue subscription is not supported")
)

// Defaults of a [DeadLetterConfig].
const (
	// DefaultDeadLetterTopic is the system topic BlobCreated notifications are published to.
	DefaultDeadLetterTopic = "egrid-deadletters"
	// DefaultNamespace is the <namespace> segment of namespace topics' dead-letter keys.
	DefaultNamespace = "egrid"
	// DefaultDeadLetterDelay is the [DeadLetterConfig.Delay] of a zero (or negative) Delay.
	DefaultDeadLetterDelay = deadletter.DefaultDelay
)

// DeadLetterConfig configures dead-lettering (SPEC §5). Zero values take the defaults.
type DeadLetterConfig struct {
	// Delay is how long a dead letter waits after its event's last attempt before it is written
	// (default 5 min; divided by TimeScale). Records that come due together share one object
	// per subscription.
	Delay time.Duration `json:"delay,omitempty" yaml:"delay,omitempty"`
	// SystemTopic is the Event Grid schema topic a Microsoft.Storage.BlobCreated event is
	// published to after each object is written (default egrid-deadletters). The router creates
	// it when it has a dead-letter store; subscribe handlers to it like to any topic.
	SystemTopic string `json:"systemTopic,omitempty" yaml:"systemTopic,omitempty"`
	// Namespace is the <namespace> of namespace topics' object keys,
	// "<namespace>/<topic>/<subscription>/<YYYY>/<M>/<D>/<H>/<uuid>.json" (default egrid): an
	// egrid router is one Event Grid namespace.
	Namespace string `json:"namespace,omitempty" yaml:"namespace,omitempty"`
	// MaxObjectBytes bounds the bytes of the records of one dead-letter object (default
	// 64 MiB, deadletter.DefaultMaxObjectBytes): a flush of more is split into several
	// objects, and a record larger than the bound is written alone. Reading dead letters
	// back (list, show, replay) refuses an object larger than the bound plus 16 MiB, which
	// egrid does not write, instead of reading it into memory.
	MaxObjectBytes int `json:"maxObjectBytes,omitempty" yaml:"maxObjectBytes,omitempty"`
}

func (c DeadLetterConfig) withDefaults() DeadLetterConfig {
	if c.Delay <= 0 {
		c.Delay = DefaultDeadLetterDelay
	}
	if c.SystemTopic == "" {
		c.SystemTopic = DefaultDeadLetterTopic
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	return c
}

// Validate reports every problem of the config at once.
func (c DeadLetterConfig) Validate() error {
	var errs []error
	if c.Delay < 0 {
		errs = append(errs, fmt.Errorf("deadLetters.delay %v is invalid: use a positive duration such as 5m (0 for the default)", c.Delay))
	}
	if c.MaxObjectBytes < 0 {
		errs = append(errs, fmt.Errorf("deadLetters.maxObjectBytes %d is invalid: use a positive number of bytes (0 for the default, 64 MiB)", c.MaxObjectBytes))
	}
	if c.SystemTopic != "" {
		if err := ValidateTopicName(c.SystemTopic); err != nil {
			errs = append(errs, fmt.Errorf("deadLetters.systemTopic: %w", err))
		}
	}
	if c.Namespace != "" && !namespaceRE.MatchString(c.Namespace) {
		errs = append(errs, fmt.Errorf("deadLetters.namespace %q is invalid: use 3-50 characters, letters, digits and '-' only", clip.String(c.Namespace)))
	}
	return errors.Join(errs...)
}

var (
	namespaceRE = regexp.MustCompile(`^[A-Za-z0-9-]{3,50}$`)
	// bucketRE is a blob container name as Azure takes it, which is also a valid bucket name:
	// 3-63 lower-case letters, digits and single hyphens, starting and ending with a letter or
	// digit.
	bucketRE = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9]|-[a-z0-9]){2,62}$`)
)

// reservedBuckets are the bucket names MinIO reserves for itself (its isMinioReservedBucket:
// "minio"; its metadata bucket ".minio.sys" fails bucketRE already): it answers every request
// on them with AllAccessDisabled, so a destination naming one could never be written.
var reservedBuckets = map[string]bool{"minio": true}

// deadLetterRuntime is the router's dead-lettering: the actor, the store and running replays.
type deadLetterRuntime struct {
	cfg   DeadLetterConfig
	store sinks.ObjectStore
	pid   *actor.PID
	// outbox and actorCfg make the subscriptions' hand-offs ([deadletter.StoreOutbox.Handoff]).
	outbox   *deadletter.StoreOutbox
	actorCfg *deadletter.Config
	// stops tells when the actor's stop work (its last outbox save, off its mailbox) has
	// ended: closeDeadLetters waits for it before Close closes the store.
	stops deadletter.Stops
	// replayStops tells when the replays' stop work (the wait for their last object read,
	// off their mailboxes) has ended, by replayKey: a new replay of a subscription reads
	// after the stopped one's, and Close and stopReplays wait for it.
	replayStops deadletter.ReplayStops
	seq         atomic.Uint64
	// durable: the outbox is in the router's store (Deps.Store), so the records waiting at
	// Close are written by the next router at their due time instead of early.
	durable bool

	mu      sync.Mutex
	replays map[string]*actor.PID // by topic/subscription
	// runs are the replays' progress, by the same keys ([DeadLetterStatus.Replays]).
	runs map[string]*runningReplay
	// closed is set by closeDeadLetters as it takes the replays to stop: a replay registers
	// (startReplay) only before that, so every replay spawned is one Close stops.
	closed bool

	// replayWindow is the replays' deadletter.ReplayConfig.Window, and how much of the events
	// a replay's selection keeps (deadletter.DefaultReplayWindow; tests set it lower).
	replayWindow int

	// replayLookedUp, when set (by tests, export_test.go), runs in a replay's start between
	// looking up its subscription and registering the replay.
	replayLookedUp func()
	// walked, when set, is called as each walk of dead-letter objects ends, with the most
	// objects it held at once and the objects it selected (tests).
	walked func(held, total int)
	// replayHeld, when set, is called as a replay's selection, and each of its passes over
	// the objects, ends, with the most event ids it remembered (tests).
	replayHeld func(ids int)
}

// startDeadLetters spawns the dead-letter actor when the router has a dead-letter store. The
// outbox is kept in the router's store ([deadletter.StoreOutbox]), where subscriptions put the
// events they end in the same update that settles them. With a store of its caller's
// (Deps.Store) dead letters not yet written survive a restart; a router on its own in-memory
// store loses them with the process, so its Close writes them first.
func (r *Router) startDeadLetters() error {
	if r.deps.DeadLetterStore == nil {
		return nil
	}
	d := &deadLetterRuntime{
		cfg: r.cfg.DeadLetters, store: r.deps.DeadLetterStore, replays: make(map[string]*actor.PID),
		runs:    make(map[string]*runningReplay),
		durable: !r.ownsStore, replayWindow: deadletter.DefaultReplayWindow,
	}
	var base uint64
	var owns func(topic, sub string) bool
	if r.cl != nil {
		// Each node numbers its records from its own slot, and writes those of the
		// subscriptions it runs (cluster.go adopts a moving subscription's records), and
		// while it holds the cluster's duty those of deleted subscriptions.
		base = uint64(r.cl.node.Slot()) * deadletter.IDSpan
		cl := r.cl
		owns = func(topic, sub string) bool {
			return cl.writesDeadLetters(cluster.Key{Topic: topic, Subscription: sub})
		}
	}
	outbox, err := deadletter.NewStoreOutboxFrom(context.Background(), r.store, r.log, base)
	if err != nil {
		return err
	}
	d.outbox = outbox
	d.actorCfg = &deadletter.Config{
		Store: d.store, Outbox: outbox, Volatile: !d.durable, Delay: d.cfg.Delay, TimeScale: r.cfg.TimeScale, MaxObjectBytes: d.cfg.MaxObjectBytes,
		Metrics: r.metrics, Logger: r.log, OnWritten: r.notifyBlobCreated, Owns: owns, Stops: &d.stops,
		OnDropped: r.recordDeadLettersDropped,
	}
	r.dead = d // before the actor runs: its notifications read it (notifyBlobCreated)
	d.pid = r.system.Root.Spawn(deadletter.Props(d.actorCfg))
	return nil
}

// recordDeadLettersDropped ends the delivery histories of dead letters the dead-letter actor
// dropped unwritten ([deadletter.Config.OnDropped]): explain then tells the events Dropped,
// with reason DeadLetterDestinationUnavailable and why, instead of waiting in the outbox. It
// queues the step for the history writer and returns at once (it runs in the actor).
func (r *Router) recordDeadLettersDropped(d *deadletter.Dropped) {
	r.history.enqueue(&actors.AttemptRecord{
		Topic: d.Topic, Subscription: d.Subscription, EventIDs: d.EventIDs, Attempts: d.Attempts,
		PublishTimes: d.PublishTimes, Time: d.Time, Detail: d.Why, DeadLetterDropped: true,
	}, nil)
}

// ensureSystemTopic creates the dead-letter notification topic if it is missing.
func (r *Router) ensureSystemTopic(ctx context.Context) error {
	if r.dead == nil {
		return nil
	}
	name := r.dead.cfg.SystemTopic
	if spec, err := r.Topic(name); err == nil {
		if spec.schema() != schemas.EventGrid {
			return fmt.Errorf("deadLetters.systemTopic %q exists with input schema %s: BlobCreated notifications need an Event Grid schema topic; delete it or pick another name", name, spec.schema())
		}
		return nil
	}
	if _, err := r.createTopic(ctx, name, TopicSpec{}, true); err != nil {
		if r.cl != nil { // another node starting at the same moment created it first
			_ = r.syncTopic(ctx, name) // a store that cannot answer leaves the topic unknown: err below
			if _, terr := r.topic(name); terr == nil {
				return nil
			}
		}
		return fmt.Errorf("creating the dead-letter notification topic %q: %w", name, err)
	}
	return nil
}

// closeDeadLetters stops the replays, writes every dead letter still waiting — unless the
// outbox is durable: then they stay in the store and the next router writes them at their due
// time — and stops the dead-letter actor. Called by Close after the topic actors have stopped.
func (r *Router) closeDeadLetters(ctx context.Context) {
	d := r.dead
	if d == nil {
		return
	}
	d.mu.Lock()
	d.closed = true // no replay registers from now on: the ones to stop are all here
	replays := slices.Collect(maps.Values(d.replays))
	d.mu.Unlock()
	for _, pid := range replays {
		r.stopActor(pid, "a dead-letter replay") // its subscription actor's stop work has begun then
	}
	// A stopped replay (here, or by itself just before) waits off its mailbox for its object
	// read under way, at most 5 s, and for its subscription actor to terminate, that actor's
	// stop work begun: before the store it reads is closed, and before the wait below.
	_ = d.replayStops.Wait(context.Background())
	// The replays' subscription actors write their last state to their own journals off their
	// mailboxes, handing the dead letters it settles to the dead-letter actor: before it stops.
	_ = r.stops.Wait(context.Background())
	if d.durable {
		r.stopDeadLetterActor(d)
		return
	}
	// A deadline already past gives the flush no time: it is not asked for (protoactor takes a
	// negative timeout for none, and the flush would wait for its writes however long they
	// take), and what waits in the in-memory outbox is lost, as the warning says.
	timeout, err := requestTimeout(ctx, 30*time.Second)
	var res any
	if err == nil {
		res, err = r.system.Root.RequestFuture(d.pid, &deadletter.Flush{}, timeout).Result()
	}
	switch {
	case err != nil:
		r.log.Warn("dead letters not flushed before shutdown", "err", err)
	default:
		if st, ok := res.(*deadletter.Status); ok && st.Pending() > 0 {
			r.log.Warn("dead letters could not be written before shutdown", "records", st.Pending())
		}
	}
	r.stopDeadLetterActor(d)
}

// stopDeadLetterActor stops the dead-letter actor and waits for it to terminate, then for
// its stop work (deadletter.Stops): the waits for its object writes and its outbox save in
// flight, and its last outbox save, each at most the actor's WriteTimeout, so the store the
// outbox is in is closed after that save. The actor first handles what was sent to it before
// (the dead letters a replay's subscription actor settled in its last write, handed to it to
// put in the outbox), then terminates at once (those waits run off its mailbox) unless a turn
// in progress holds its mailbox: its stop work begins in its stopping turn, so the wait for
// its Terminated lasts as long as that turn (drainActor).
func (r *Router) stopDeadLetterActor(d *deadLetterRuntime) {
	r.drainActor(d.pid, "the dead-letter actor")
	_ = d.stops.Wait(context.Background()) // bounded: 3 × WriteTimeout
}

// checkDeadLetterDestination refuses, at create time (and at restore: see restoreSubscription), what dead-lettering cannot serve: a
// destination on a router without a dead-letter store (Event Grid refuses a destination it
// cannot reach), and a container name MinIO cannot take (invalid, or reserved).
func (r *Router) checkDeadLetterDestination(name string, spec *SubscriptionSpec) error {
	d := spec.DeadLetterDestination
	if d == nil {
		return nil
	}
	var errs []error
	if r.dead == nil && r.deps.OnDeadLetter == nil {
		errs = append(errs, fmt.Errorf("event subscription %q: deadLetterDestination: this server has no dead-letter store: start egrid serve with --minio-endpoint (or pass Deps.DeadLetterStore), or remove deadLetterDestination", clip.String(name)))
	}
	if b := d.Properties.BlobContainerName; b != "" && !bucketRE.MatchString(b) {
		errs = append(errs, fmt.Errorf("event subscription %q: deadLetterDestination.properties.blobContainerName %q is invalid: use 3-63 lower-case letters, digits and single hyphens, starting and ending with a letter or digit", clip.String(name), clip.String(b)))
	} else if reservedBuckets[b] {
		errs = append(errs, fmt.Errorf("event subscription %q: deadLetterDestination.properties.blobContainerName %q is reserved by MinIO, which refuses every write to it: pick another name", clip.String(name), b))
	}
	return errors.Join(errs...)
}

// deadLetterTarget says where a subscription's dead letters go and in which layout: namespace
// topics use the namespace key layout and record shape, and so does the namespace profile's
// record shape (SPEC §5).
func (r *Router) deadLetterTarget(t *topicRuntime, name string, spec *SubscriptionSpec, delivery schemas.Schema) deadletter.Target {
	st := t.load()
	namespaceTopic := st.spec.Kind == KindNamespace
	prefixNS := ""
	if namespaceTopic {
		prefixNS = r.cfg.DeadLetters.Namespace
	}
	systemTopic := r.cfg.DeadLetters.SystemTopic
	return deadletter.Target{
		Bucket: spec.DeadLetterDestination.Properties.BlobContainerName,
		Prefix: deadletter.Prefix(prefixNS, t.name, name),
		Format: schemas.DeadLetterFormat{
			Input: st.schema, Delivery: delivery, TopicID: t.id,
			Namespace: namespaceTopic || strings.EqualFold(spec.RetryPolicy.Profile, "namespace"),
		},
		// Dead letters of the notification topic itself are not announced on it: a failing
		// notification handler would otherwise feed itself.
		Notify: !strings.EqualFold(t.name, systemTopic),
	}
}

// deadLetterHandoff returns where a subscription's events that end without delivery go: the
// Deps.OnDeadLetter observer, and the dead-letter outbox through the hand-off (nil without a
// destination or a dead-letter store).
func (r *Router) deadLetterHandoff(t *topicRuntime, name string, spec *SubscriptionSpec, delivery schemas.Schema) (func(*actors.DeadLetter), actors.DeadLetterHandoff) {
	var observer func(*actors.DeadLetter)
	if observe := r.deps.OnDeadLetter; observe != nil {
		observer = func(d *actors.DeadLetter) { observe(deadLetterOf(d)) }
	}
	if spec.DeadLetterDestination == nil {
		return observer, nil
	}
	if r.dead == nil {
		if observer != nil {
			return observer, nil
		}
		// A subscription stored with a destination, restored on a router started without a
		// dead-letter store: its dead letters are dropped, counted and logged.
		m, log, scope := r.metrics, r.log, metrics.SubscriptionScope(t.name, name)
		return func(d *actors.DeadLetter) {
			m.Add(metrics.Key{Name: metrics.DroppedEventCount, Scope: scope, Dim: string(schemas.DeadLetterDestinationUnavailable)}, 1)
			log.Warn("dead letter dropped: the router has no dead-letter store", logattr.EventID, d.Event.ID, logattr.Topic, d.Topic,
				logattr.Subscription, d.Subscription, "reason", string(schemas.DeadLetterDestinationUnavailable))
		}, nil
	}
	d := r.dead
	return observer, d.outbox.Handoff(r.system.Root, d.pid, d.actorCfg, r.deadLetterTarget(t, name, spec, delivery))
}

// DeadLetterStatus returns the dead-letter actor's state: records waiting, being written or
// retrying, and what it has written and dropped; and the replays running in this router.
func (r *Router) DeadLetterStatus(ctx context.Context) (*DeadLetterStatus, error) {
	if r.dead == nil {
		return nil, ErrDeadLettersUnavailable
	}
	timeout, err := requestTimeout(ctx, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("asking the dead-letter actor: %w", err)
	}
	res, err := r.system.Root.RequestFuture(r.dead.pid, &deadletter.GetStatus{}, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("asking the dead-letter actor: %w", err)
	}
	st := deadLetterStatusOf(res.(*deadletter.Status))
	st.Replays = r.runningReplays()
	return st, nil
}
