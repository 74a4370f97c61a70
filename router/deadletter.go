package router

import (
	"context"
	"encoding/json"
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
	"github.com/google/uuid"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// This file wires dead-lettering into the router (SPEC §5): the dead-letter actor, the hand-off
// from subscription actors, the BlobCreated notifications on the system topic, and reading and
// replaying dead-letter objects.

// Sentinel errors of dead-lettering.
var (
	// ErrDeadLettersUnavailable: the router has no dead-letter store (Deps.DeadLetterStore).
	ErrDeadLettersUnavailable = errors.New("dead-lettering is not configured: the router has no dead-letter store")
	// ErrNoDeadLetterDestination: the subscription has no deadLetterDestination.
	ErrNoDeadLetterDestination = errors.New("event subscription has no deadLetterDestination")
	// ErrReplayRunning: a replay of the subscription is already running.
	ErrReplayRunning = errors.New("a replay of this event subscription is already running")
)

// Defaults of a [DeadLetterConfig].
const (
	// DefaultDeadLetterTopic is the system topic BlobCreated notifications are published to.
	DefaultDeadLetterTopic = "egrid-deadletters"
	// DefaultNamespace is the <namespace> segment of namespace topics' dead-letter keys.
	DefaultNamespace = "egrid"
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
}

func (c DeadLetterConfig) withDefaults() DeadLetterConfig {
	if c.Delay <= 0 {
		c.Delay = actors.DefaultDeadLetterDelay
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
	if c.SystemTopic != "" {
		if err := ValidateTopicName(c.SystemTopic); err != nil {
			errs = append(errs, fmt.Errorf("deadLetters.systemTopic: %w", err))
		}
	}
	if c.Namespace != "" && !namespaceRE.MatchString(c.Namespace) {
		errs = append(errs, fmt.Errorf("deadLetters.namespace %q is invalid: use 3-50 characters, letters, digits and '-' only", c.Namespace))
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

// deadLetterRuntime is the router's dead-lettering: the actor, the store and running replays.
type deadLetterRuntime struct {
	cfg   DeadLetterConfig
	store sinks.ObjectStore
	pid   *actor.PID
	seq   atomic.Uint64
	// durable: the outbox is in the router's store (Deps.Store), so the records waiting at
	// Close are written by the next router at their due time instead of early.
	durable bool

	mu      sync.Mutex
	replays map[string]*actor.PID // by topic/subscription
}

// startDeadLetters spawns the dead-letter actor when the router has a dead-letter store. With
// a store of its caller's (Deps.Store) the outbox is kept in it ([actors.StoreOutbox]), so
// dead letters not yet written survive a restart (issue 5); a router on its own in-memory
// store keeps the outbox in memory.
func (r *Router) startDeadLetters() {
	if r.deps.DeadLetterStore == nil {
		return
	}
	d := &deadLetterRuntime{
		cfg: r.cfg.DeadLetters, store: r.deps.DeadLetterStore, replays: make(map[string]*actor.PID),
		durable: !r.ownsStore,
	}
	var outbox actors.DeadLetterOutbox
	if d.durable {
		outbox = actors.NewStoreOutbox(r.store, r.log)
	}
	d.pid = r.system.Root.Spawn(actors.DeadLetterProps(&actors.DeadLetterConfig{
		Store: d.store, Outbox: outbox, Delay: d.cfg.Delay, TimeScale: r.cfg.TimeScale, Metrics: r.metrics, Logger: r.log,
		OnWritten: r.notifyBlobCreated,
	}))
	r.dead = d
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
	if _, err := r.CreateTopic(ctx, name, TopicSpec{}); err != nil {
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
	replays := slices.Collect(maps.Values(d.replays))
	d.mu.Unlock()
	for _, pid := range replays {
		_ = r.system.Root.StopFuture(pid).Wait()
	}
	if d.durable {
		_ = r.system.Root.StopFuture(d.pid).Wait()
		return
	}
	timeout := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := r.system.Root.RequestFuture(d.pid, &actors.FlushDeadLetters{}, timeout).Result()
	switch {
	case err != nil:
		r.log.Warn("dead letters not flushed before shutdown", "err", err)
	default:
		if st, ok := res.(*actors.DeadLetterStatus); ok && st.Pending() > 0 {
			r.log.Warn("dead letters could not be written before shutdown", "records", st.Pending())
		}
	}
	_ = r.system.Root.StopFuture(d.pid).Wait()
}

// checkDeadLetterDestination refuses, at create time, what dead-lettering cannot serve: a
// destination on a router without a dead-letter store (Event Grid refuses a destination it
// cannot reach), and a container name MinIO cannot take.
func (r *Router) checkDeadLetterDestination(name string, spec *SubscriptionSpec) error {
	d := spec.DeadLetterDestination
	if d == nil {
		return nil
	}
	var errs []error
	if r.dead == nil && r.deps.OnDeadLetter == nil {
		errs = append(errs, fmt.Errorf("event subscription %q: deadLetterDestination: this server has no dead-letter store: start egrid serve with --minio-endpoint (or pass Deps.DeadLetterStore), or remove deadLetterDestination", name))
	}
	if b := d.Properties.BlobContainerName; b != "" && !bucketRE.MatchString(b) {
		errs = append(errs, fmt.Errorf("event subscription %q: deadLetterDestination.properties.blobContainerName %q is invalid: use 3-63 lower-case letters, digits and single hyphens, starting and ending with a letter or digit", name, b))
	}
	return errors.Join(errs...)
}

// deadLetterTarget says where a subscription's dead letters go and in which layout: namespace
// topics use the namespace key layout and record shape, and so does the namespace profile's
// record shape (SPEC §5).
func (r *Router) deadLetterTarget(t *topicRuntime, name string, spec *SubscriptionSpec, delivery schemas.Schema) actors.DeadLetterTarget {
	st := t.load()
	namespaceTopic := st.spec.Kind == KindNamespace
	prefixNS := ""
	if namespaceTopic {
		prefixNS = r.cfg.DeadLetters.Namespace
	}
	systemTopic := r.cfg.DeadLetters.SystemTopic
	return actors.DeadLetterTarget{
		Bucket: spec.DeadLetterDestination.Properties.BlobContainerName,
		Prefix: actors.DeadLetterPrefix(prefixNS, t.name, name),
		Format: schemas.DeadLetterFormat{
			Input: st.schema, Delivery: delivery, TopicID: t.id,
			Namespace: namespaceTopic || strings.EqualFold(spec.RetryPolicy.Profile, "namespace"),
		},
		// Dead letters of the notification topic itself are not announced on it: a failing
		// notification handler would otherwise feed itself.
		Notify: !strings.EqualFold(t.name, systemTopic),
	}
}

// deadLetterHandoff returns what a subscription actor calls with each event that ended without
// delivery: the Deps.OnDeadLetter observer, then the dead-letter actor.
func (r *Router) deadLetterHandoff(t *topicRuntime, name string, spec *SubscriptionSpec, delivery schemas.Schema) func(*actors.DeadLetter) {
	var observer func(*actors.DeadLetter)
	if observe := r.deps.OnDeadLetter; observe != nil {
		observer = func(d *actors.DeadLetter) { observe(deadLetterOf(d)) }
	}
	if spec.DeadLetterDestination == nil {
		return observer
	}
	if r.dead == nil {
		if observer != nil {
			return observer
		}
		// A subscription stored with a destination, restored on a router started without a
		// dead-letter store: its dead letters are dropped, counted and logged.
		m, log, scope := r.metrics, r.log, metrics.SubscriptionScope(t.name, name)
		return func(d *actors.DeadLetter) {
			m.Add(metrics.Key{Name: metrics.DroppedEventCount, Scope: scope, Dim: string(schemas.DeadLetterDestinationUnavailable)}, 1)
			log.Warn("dead letter dropped: the router has no dead-letter store", "id", d.Event.ID, "topic", d.Topic,
				"subscription", d.Subscription, "reason", string(schemas.DeadLetterDestinationUnavailable))
		}
	}
	target := r.deadLetterTarget(t, name, spec, delivery)
	root, pid := r.system.Root, r.dead.pid
	return func(d *actors.DeadLetter) {
		if observer != nil {
			observer(d)
		}
		root.Send(pid, &actors.EnqueueDeadLetter{Letter: d, Target: target})
	}
}

// BlobCreatedEventType is the type of the dead-letter notifications.
const BlobCreatedEventType = "Microsoft.Storage.BlobCreated"

// BlobCreatedData is the data of a Microsoft.Storage.BlobCreated notification
// (eventgrid-behaviour.md §7.4).
type BlobCreatedData struct {
	API             string `json:"api"`
	ClientRequestID string `json:"clientRequestId"`
	RequestID       string `json:"requestId"`
	ETag            string `json:"eTag"`
	ContentType     string `json:"contentType"`
	ContentLength   int64  `json:"contentLength"`
	BlobType        string `json:"blobType"`
	URL             string `json:"url"`
	Sequencer       string `json:"sequencer"`
}

// BlobCreatedSubject is the subject of the notification for an object: Azure Storage's
// /blobServices/default/containers/<bucket>/blobs/<key>, so subjectBeginsWith filters work as
// on Azure.
func BlobCreatedSubject(bucket, key string) string {
	return "/blobServices/default/containers/" + bucket + "/blobs/" + key
}

// blobCreatedEvent builds the notification of a written object. It is pure: the caller passes
// the id, the time and the sequencer.
func blobCreatedEvent(id string, info sinks.ObjectInfo, now time.Time, seq uint64) json.RawMessage {
	ev := struct {
		ID          string          `json:"id"`
		Subject     string          `json:"subject"`
		EventType   string          `json:"eventType"`
		EventTime   string          `json:"eventTime"`
		Data        BlobCreatedData `json:"data"`
		DataVersion string          `json:"dataVersion"`
	}{
		ID: id, Subject: BlobCreatedSubject(info.Bucket, info.Key), EventType: BlobCreatedEventType,
		EventTime: now.UTC().Format(time.RFC3339Nano), DataVersion: "",
		Data: BlobCreatedData{
			API: "PutBlob", ClientRequestID: id, RequestID: id, ETag: info.ETag, ContentType: info.ContentType,
			ContentLength: info.Size, BlobType: "BlockBlob", URL: info.URL,
			// Opaque and string-comparable, growing with each object, like Azure's.
			Sequencer: fmt.Sprintf("%032x%016x", now.UnixNano(), seq),
		},
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		panic(err) // plain strings and numbers
	}
	return raw
}

// notifyBlobCreated publishes the BlobCreated notification of a written object to the system
// topic through the normal publish path. The dead-letter actor calls it off its mailbox.
func (r *Router) notifyBlobCreated(ctx context.Context, o *actors.DeadLetterObject) {
	d := r.dead
	ev := blobCreatedEvent(uuid.NewString(), o.Info, r.deps.Now(), d.seq.Add(1))
	err := r.Publish(ctx, d.cfg.SystemTopic, ev)
	switch {
	case errors.Is(err, ErrClosed):
		r.log.Info("dead-letter notification not published: the router is closing", "key", o.Info.Key)
	case err != nil:
		r.log.Warn("dead-letter notification not published", "topic", d.cfg.SystemTopic, "key", o.Info.Key, "err", err)
	}
}

// DeadLetterQuery selects dead-letter objects and records.
type DeadLetterQuery struct {
	// Key, when set, selects that one object.
	Key string
	// Since and Until select objects written in [Since, Until); zero means unbounded.
	Since, Until time.Time
	// Reason, when set, selects records with that deadLetterReason.
	Reason schemas.Reason
}

// DeadLetterEntry is one record read back from a dead-letter object.
type DeadLetterEntry struct {
	// Object is the key of the object holding the record.
	Object string
	// Written is when the object was written.
	Written time.Time
	schemas.DeadLetterRecord
}

// DeadLetterRead is what [Router.DeadLetterRecords] found.
type DeadLetterRead struct {
	// Objects counts the objects read.
	Objects int
	// Entries are the records selected, in object order.
	Entries []DeadLetterEntry
	// Problems lists the objects that could not be read or decoded, one message each.
	Problems []string
}

// deadLetterSource returns the store, bucket and prefix of a subscription's dead letters and
// its topic.
func (r *Router) deadLetterSource(topic, name string) (*topicRuntime, *SubscriptionSpec, string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, nil, "", ErrClosed
	}
	t, spec, name, err := r.lookupLocked(topic, name)
	if err != nil {
		return nil, nil, "", err
	}
	topic = t.name
	if r.dead == nil {
		return nil, nil, "", ErrDeadLettersUnavailable
	}
	if spec.DeadLetterDestination == nil {
		return nil, nil, "", fmt.Errorf("event subscription %q of topic %q: %w", name, topic, ErrNoDeadLetterDestination)
	}
	prefix := actors.DeadLetterPrefix("", topic, name)
	if t.load().spec.Kind == KindNamespace {
		prefix = actors.DeadLetterPrefix(r.cfg.DeadLetters.Namespace, topic, name)
	}
	return t, spec, prefix + "/", nil
}

// DeadLetterObjects lists a subscription's dead-letter objects written in [q.Since, q.Until),
// ordered by the time they were written.
func (r *Router) DeadLetterObjects(ctx context.Context, topic, name string, q DeadLetterQuery) ([]sinks.ObjectInfo, error) {
	_, spec, prefix, err := r.deadLetterSource(topic, name)
	if err != nil {
		return nil, err
	}
	bucket := spec.DeadLetterDestination.Properties.BlobContainerName
	all, err := r.dead.store.List(ctx, bucket, prefix)
	if errors.Is(err, sinks.ErrBucketNotFound) {
		return nil, nil // nothing dead-lettered yet
	}
	if err != nil {
		return nil, fmt.Errorf("listing the dead letters of %q: %w: %w", name, ErrDeadLetterStoreUnavailable, err)
	}
	var out []sinks.ObjectInfo
	for _, o := range all {
		if q.Key != "" && o.Key != q.Key {
			continue
		}
		if (!q.Since.IsZero() && o.LastModified.Before(q.Since)) || (!q.Until.IsZero() && !o.LastModified.Before(q.Until)) {
			continue
		}
		out = append(out, o)
	}
	slices.SortStableFunc(out, func(a, b sinks.ObjectInfo) int { return a.LastModified.Compare(b.LastModified) })
	return out, nil
}

// DeadLetterRecords reads a subscription's dead-letter records selected by q, with their
// events in the topic's input schema. Objects that cannot be read or decoded are reported in
// [DeadLetterRead.Problems] and skipped.
func (r *Router) DeadLetterRecords(ctx context.Context, topic, name string, q DeadLetterQuery) (*DeadLetterRead, error) {
	return r.readDeadLetters(ctx, topic, name, q, nil)
}

func (r *Router) readDeadLetters(ctx context.Context, topic, name string, q DeadLetterQuery, progress func(done, total int)) (*DeadLetterRead, error) {
	t, spec, _, err := r.deadLetterSource(topic, name)
	if err != nil {
		return nil, err
	}
	objs, err := r.DeadLetterObjects(ctx, topic, name, q)
	if err != nil {
		return nil, err
	}
	bucket := spec.DeadLetterDestination.Properties.BlobContainerName
	out := &DeadLetterRead{}
	for i, o := range objs {
		if progress != nil {
			progress(i, len(objs))
		}
		body, _, err := r.dead.store.Get(ctx, bucket, o.Key)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("reading the dead letters of %q: %w", name, ctx.Err())
			}
			out.Problems = append(out.Problems, fmt.Sprintf("%s: %v", o.Key, err))
			continue
		}
		out.Objects++
		recs, err := schemas.DecodeDeadLetters(body, t.load().schema, t.id)
		if err != nil {
			out.Problems = append(out.Problems, fmt.Sprintf("%s: %s", o.Key, strings.ReplaceAll(err.Error(), "\n", "; ")))
			continue
		}
		for _, rec := range recs {
			if q.Reason != "" && rec.Reason != q.Reason {
				continue
			}
			out.Entries = append(out.Entries, DeadLetterEntry{Object: o.Key, Written: o.LastModified, DeadLetterRecord: rec})
		}
	}
	if progress != nil {
		progress(len(objs), len(objs))
	}
	return out, nil
}

// ReplayStage names the part of a replay a [ReplayProgress] is about.
type ReplayStage string

// Replay stages.
const (
	// ReplayReading: Done of Total objects read.
	ReplayReading ReplayStage = "reading"
	// ReplayDelivering: Done of Total replayed events settled (delivered or ended again); only
	// with [ReplayOptions.Wait].
	ReplayDelivering ReplayStage = "delivering"
)

// ReplayProgress is one progress report of a replay.
type ReplayProgress struct {
	Stage ReplayStage `json:"stage"`
	Done  int         `json:"done"`
	Total int         `json:"total"`
}

// ReplayOptions select what a replay re-delivers and how it reports.
type ReplayOptions struct {
	// Since and Until select the objects written in [Since, Until); zero means unbounded.
	Since, Until time.Time
	// Reason, when set, selects the records with that deadLetterReason.
	Reason schemas.Reason
	// DryRun reads and selects but re-delivers nothing: the summary says what would happen.
	DryRun bool
	// Wait makes the call return only when every replayed event has been delivered or has
	// ended again (or ctx is done; the replay goes on regardless).
	Wait bool
	// Progress, when set, is called as objects are read and, with Wait, as events settle.
	Progress func(ReplayProgress)
}

// ReplaySummary says what a replay found and did.
type ReplaySummary struct {
	DryRun bool `json:"dryRun"`
	// Objects counts the objects read.
	Objects int `json:"objects"`
	// Found counts the records in them.
	Found int `json:"found"`
	// Replayed counts the events re-delivered (or, on a dry run, that would be).
	Replayed int `json:"replayed"`
	// Skipped counts the records not replayed: another reason than the one asked for, or an
	// event id already taken from a newer object (an event dead-lettered again after an
	// earlier replay).
	Skipped int `json:"skipped"`
	// Delivered, DeadLettered and Dropped say how the replayed events ended (with Wait).
	Delivered    int `json:"delivered"`
	DeadLettered int `json:"deadLettered"`
	Dropped      int `json:"dropped"`
	// Completed is set when every replayed event settled before the call returned.
	Completed bool `json:"completed"`
	// Events lists the replayed events.
	Events []ReplayedEvent `json:"events,omitempty"`
	// Problems lists the objects that could not be read or decoded.
	Problems []string `json:"problems,omitempty"`
}

// ReplayedEvent names one event of a replay.
type ReplayedEvent struct {
	ID     string         `json:"id"`
	Reason schemas.Reason `json:"reason"`
	Object string         `json:"object"`
}

// ReplayDeadLetters re-delivers a subscription's dead-lettered events to that subscription
// only (SPEC §5): it reads the subscription's objects from its bucket, selects the records, and
// hands the events — with their original ids, as new publishes with a fresh attempt budget and
// time to live — to a replay actor that delivers them exactly as the subscription does
// (batching, retries, probation; an event that fails again is dead-lettered again, into a new
// object). Each event id is replayed once, from its newest record. Objects are never changed,
// so a replay can be repeated; receivers deduplicate by event id. One replay per subscription
// runs at a time; deleting or replacing the subscription stops it.
func (r *Router) ReplayDeadLetters(ctx context.Context, topic, name string, opts ReplayOptions) (*ReplaySummary, error) {
	key := replayKey(topic, name)
	if _, _, _, err := r.deadLetterSource(topic, name); err != nil {
		return nil, err
	}
	if !opts.DryRun && r.replayRunning(key) {
		return nil, fmt.Errorf("event subscription %q of topic %q: %w; wait for it to finish", name, topic, ErrReplayRunning)
	}
	var progress func(done, total int)
	if opts.Progress != nil {
		progress = func(done, total int) { opts.Progress(ReplayProgress{Stage: ReplayReading, Done: done, Total: total}) }
	}
	read, err := r.readDeadLetters(ctx, topic, name, DeadLetterQuery{Since: opts.Since, Until: opts.Until}, progress)
	if err != nil {
		return nil, err
	}
	sum := &ReplaySummary{DryRun: opts.DryRun, Objects: read.Objects, Found: len(read.Entries), Problems: read.Problems}
	// Newest record first, so an event dead-lettered again after an earlier replay is taken
	// from its latest object.
	entries := slices.Clone(read.Entries)
	slices.SortStableFunc(entries, func(a, b DeadLetterEntry) int { return b.Written.Compare(a.Written) })
	seen := map[string]bool{}
	var events []*schemas.Event
	for _, e := range entries {
		if (opts.Reason != "" && e.Reason != opts.Reason) || seen[e.Event.ID] {
			sum.Skipped++
			continue
		}
		seen[e.Event.ID] = true
		events = append(events, e.Event)
		sum.Events = append(sum.Events, ReplayedEvent{ID: e.Event.ID, Reason: e.Reason, Object: e.Object})
	}
	sum.Replayed = len(events)
	if opts.DryRun || len(events) == 0 {
		sum.Completed = !opts.DryRun
		return sum, nil
	}
	return r.runReplay(ctx, topic, name, events, opts, sum)
}

func (r *Router) replayRunning(key string) bool {
	r.dead.mu.Lock()
	defer r.dead.mu.Unlock()
	_, ok := r.dead.replays[key]
	return ok
}

// runReplay spawns the replay actor and, with opts.Wait, waits for it.
func (r *Router) runReplay(ctx context.Context, topic, name string, events []*schemas.Event, opts ReplayOptions, sum *ReplaySummary) (*ReplaySummary, error) {
	key := replayKey(topic, name)
	r.mu.RLock()
	t, spec, display, err := r.lookupLocked(topic, name)
	closed := r.closed
	r.mu.RUnlock()
	if err != nil || closed {
		return nil, fmt.Errorf("event subscription %q of topic %q: %w", name, topic, ErrSubscriptionNotFound)
	}
	name = display
	sc, err := r.subscriptionConfig(t, name, spec)
	if err != nil {
		return nil, err
	}
	var (
		latest   atomic.Int64 // settled count
		notify   = make(chan struct{}, 1)
		done     = make(chan actors.ReplayResult, 1)
		d        = r.dead
		started  = make(chan struct{})
		spawnErr error
	)
	props := actors.ReplayProps(&actors.ReplayConfig{
		Subscription: sc, Events: events, PublishTime: r.deps.Now(),
		OnProgress: func(settled, _ int) {
			latest.Store(int64(settled))
			select {
			case notify <- struct{}{}:
			default:
			}
		},
		OnDone: func(res actors.ReplayResult) {
			<-started
			d.mu.Lock()
			delete(d.replays, key)
			d.mu.Unlock()
			done <- res
		},
	})
	d.mu.Lock()
	if _, running := d.replays[key]; running {
		spawnErr = fmt.Errorf("event subscription %q of topic %q: %w; wait for it to finish", name, topic, ErrReplayRunning)
	} else {
		d.replays[key] = r.system.Root.Spawn(props)
	}
	d.mu.Unlock()
	close(started)
	if spawnErr != nil {
		return nil, spawnErr
	}
	r.log.Info("dead-letter replay started", "topic", topic, "subscription", name, "events", len(events))
	if !opts.Wait {
		return sum, nil
	}
	total := len(events)
	report := func() {
		if opts.Progress != nil {
			opts.Progress(ReplayProgress{Stage: ReplayDelivering, Done: int(latest.Load()), Total: total})
		}
	}
	report()
	for {
		select {
		case <-notify:
			report()
		case res := <-done:
			sum.Delivered, sum.DeadLettered, sum.Dropped = res.Delivered, res.DeadLettered, res.Dropped
			sum.Completed = !res.Stopped
			report()
			return sum, nil
		case <-ctx.Done():
			return sum, nil // the replay goes on
		}
	}
}

// replayKey names a subscription's replay in deadLetterRuntime.replays.
func replayKey(topic, name string) string { return fold(topic) + "/" + fold(name) }

// stopReplays stops the replays of a subscription (all of a topic's when name is empty).
func (r *Router) stopReplays(topic, name string) {
	d := r.dead
	if d == nil {
		return
	}
	d.mu.Lock()
	var pids []*actor.PID
	for k, pid := range d.replays {
		if k == replayKey(topic, name) || (name == "" && strings.HasPrefix(k, fold(topic)+"/")) {
			pids = append(pids, pid)
		}
	}
	d.mu.Unlock()
	for _, pid := range pids {
		_ = r.system.Root.StopFuture(pid).Wait()
	}
}

// DeadLetterStatus returns the dead-letter actor's state: records waiting, being written or
// retrying, and what it has written and dropped.
func (r *Router) DeadLetterStatus(ctx context.Context) (*DeadLetterStatus, error) {
	if r.dead == nil {
		return nil, ErrDeadLettersUnavailable
	}
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	res, err := r.system.Root.RequestFuture(r.dead.pid, &actors.GetDeadLetterStatus{}, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("asking the dead-letter actor: %w", err)
	}
	return deadLetterStatusOf(res.(*actors.DeadLetterStatus)), nil
}

// ErrDeadLetterStoreUnavailable wraps a failure to read the dead-letter store.
var ErrDeadLetterStoreUnavailable = errors.New("dead-letter store unavailable")

// CanReplay reports why a replay of a subscription's dead letters cannot start now, with the
// error [Router.ReplayDeadLetters] would return (nil: it can). A dry run needs only the
// subscription and its dead-letter destination; a replay also needs no other to be running.
func (r *Router) CanReplay(topic, name string, dryRun bool) error {
	if _, _, _, err := r.deadLetterSource(topic, name); err != nil {
		return err
	}
	if !dryRun && r.replayRunning(replayKey(topic, name)) {
		return fmt.Errorf("event subscription %q of topic %q: %w; wait for it to finish", name, topic, ErrReplayRunning)
	}
	return nil
}
