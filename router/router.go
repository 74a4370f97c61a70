package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/sas"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/sinks/webhook"
)

// Sentinel errors callers branch on.
var (
	ErrTopicNotFound        = errors.New("topic not found")
	ErrSubscriptionNotFound = errors.New("event subscription not found")
	ErrClosed               = errors.New("router closed")
	// ErrUnavailable wraps a failure of the store: to make a publish durable (nothing of it
	// was accepted), or to save or delete a definition (the call changed nothing that
	// publishes or deliveries see, or, for a delete, the definition is gone from the router
	// but not yet from the store: delete again). The admin API answers it 503 with
	// Retry-After.
	ErrUnavailable = errors.New("store unavailable")
)

// Config is the router's data. Zero values take the documented defaults.
type Config struct {
	// InsecureDev accepts publishes that carry no credentials and, when no AdminToken is
	// configured, admin calls without a token; a configured AdminToken is still required.
	// Requests with wrong credentials are still refused. Development only.
	InsecureDev bool `json:"insecureDev,omitempty" yaml:"insecureDev,omitempty"`
	// AdminToken is the bearer token the admin API requires.
	AdminToken string `json:"adminToken,omitempty" yaml:"adminToken,omitempty"`
	// TimeScale divides every policy delay (retry schedule, floors, probation, time to live,
	// dead-letter delay) but not HTTP timeouts: 600 runs a 24-hour schedule in 144 s. 0 means 1.
	TimeScale float64 `json:"timeScale,omitempty" yaml:"timeScale,omitempty"`
	// NoJitter turns off the 0-10 % jitter added to retry delays (SPEC §2.1: "can be turned
	// off for tests"), so delivery timelines are exact. Leave it off in production: the jitter
	// spreads the retries of events that failed together.
	NoJitter bool `json:"noJitter,omitempty" yaml:"noJitter,omitempty"`
	// MaxSubscriptionsPerTopic bounds a topic's subscriptions (default 500).
	MaxSubscriptionsPerTopic int `json:"maxSubscriptionsPerTopic,omitempty" yaml:"maxSubscriptionsPerTopic,omitempty"`
	// MaxInFlight bounds the attempts one subscription runs at once (default 16).
	MaxInFlight int `json:"maxInFlight,omitempty" yaml:"maxInFlight,omitempty"`
	// SkipEndpointValidation turns the endpoint validation handshake of SPEC §2.5 off for
	// every WebHook subscription of this router (a subscription can opt out by itself with
	// destination.properties.skipValidation). For test harnesses whose scripted endpoints do
	// not implement it, and `egrid validate`, which must not call endpoints.
	SkipEndpointValidation bool `json:"skipEndpointValidation,omitempty" yaml:"skipEndpointValidation,omitempty"`
	// PublicURL is the base URL at which webhook endpoints reach this router's HTTP planes
	// (router/httpapi), e.g.
	// https://egrid.example.com; the validationUrl of the validation handshake points there.
	// Include the path prefix they are mounted under, if any. When empty, subscriptions
	// created through the admin API use the scheme and Host of the admin request, and those
	// created from Go offer no validationUrl.
	PublicURL string `json:"publicUrl,omitempty" yaml:"publicUrl,omitempty"`
	// DeadLetters configures dead-lettering: the delay, the notification topic, the namespace of
	// namespace topics' keys (see [DeadLetterConfig]).
	DeadLetters DeadLetterConfig `json:"deadLetters,omitzero" yaml:"deadLetters,omitempty"`
	// ResourceIDPrefix builds a topic's ARM-style ID, stamped into Event Grid events' `topic`
	// and used as the CloudEvents `source`: <prefix>/<topic name>. Default
	// "/subscriptions/<AzureSubscriptionID>/resourceGroups/<ResourceGroup>/providers/Microsoft.EventGrid/topics".
	ResourceIDPrefix string `json:"resourceIdPrefix,omitempty" yaml:"resourceIdPrefix,omitempty"`
	// AzureSubscriptionID and ResourceGroup make topic IDs match the user's Azure ones
	// (/subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.EventGrid/topics/<name>),
	// so handlers that check an event's topic work against egrid and Azure alike. Defaults
	// 00000000-0000-0000-0000-000000000000 and egrid. Set them or ResourceIDPrefix, not both.
	AzureSubscriptionID string `json:"azureSubscriptionId,omitempty" yaml:"azureSubscriptionId,omitempty"`
	ResourceGroup       string `json:"resourceGroup,omitempty" yaml:"resourceGroup,omitempty"`
	// HonorRetryAfter is the default of every subscription's retryPolicy.honorRetryAfter: let
	// a 429 or 503 answer's Retry-After lengthen the retry delay. An egrid extension, off by
	// default: Azure documents no Retry-After handling.
	HonorRetryAfter bool `json:"honorRetryAfter,omitempty" yaml:"honorRetryAfter,omitempty"`
	// OmitConvertedDataSchema leaves dataschema out of Event Grid events delivered as
	// CloudEvents. Azure sends "#"+dataVersion, which the CloudEvents Go SDK's receiver refuses
	// with 400 (it requires an absolute URI: cloudevents/sdk-go#615), so such a subscription's
	// events are dead-lettered or dropped; this egrid extension makes them acceptable to it.
	// Off by default.
	OmitConvertedDataSchema bool `json:"omitConvertedDataSchema,omitempty" yaml:"omitConvertedDataSchema,omitempty"`
}

// DefaultResourceIDPrefix is the default [Config.ResourceIDPrefix].
const DefaultResourceIDPrefix = "/subscriptions/" + DefaultAzureSubscriptionID + "/resourceGroups/" + DefaultResourceGroup + "/providers/Microsoft.EventGrid/topics"

// Defaults of [Config.AzureSubscriptionID] and [Config.ResourceGroup].
const (
	DefaultAzureSubscriptionID = "00000000-0000-0000-0000-000000000000"
	DefaultResourceGroup       = "egrid"
)

// azureSubscriptionIDRE matches an Azure subscription id (a GUID); resourceGroupRE a resource
// group name as ARM allows it: 1-90 letters, digits, '-', '_', '.', '(' and ')', not ending
// with '.'.
var (
	azureSubscriptionIDRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	resourceGroupRE       = regexp.MustCompile(`^[-\w._()]{0,89}[-\w_()]$`)
)

func (c Config) withDefaults() Config {
	if c.TimeScale <= 0 {
		c.TimeScale = 1
	}
	if c.MaxSubscriptionsPerTopic <= 0 {
		c.MaxSubscriptionsPerTopic = 500
	}
	if c.ResourceIDPrefix == "" {
		sub, group := c.AzureSubscriptionID, c.ResourceGroup
		if sub == "" {
			sub = DefaultAzureSubscriptionID
		}
		if group == "" {
			group = DefaultResourceGroup
		}
		c.ResourceIDPrefix = "/subscriptions/" + sub + "/resourceGroups/" + group + "/providers/Microsoft.EventGrid/topics"
	}
	c.DeadLetters = c.DeadLetters.withDefaults()
	return c
}

// Validate reports every problem of the config at once.
func (c Config) Validate() error {
	var errs []error
	if c.TimeScale < 0 {
		errs = append(errs, fmt.Errorf("timeScale %v is invalid: use a number >= 1 (or 0 for real time)", c.TimeScale))
	}
	if c.MaxSubscriptionsPerTopic < 0 {
		errs = append(errs, fmt.Errorf("maxSubscriptionsPerTopic %d is invalid: use a positive number", c.MaxSubscriptionsPerTopic))
	}
	if c.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("maxInFlight %d is invalid: use a positive number", c.MaxInFlight))
	}
	if err := checkPublicURL(c.PublicURL); err != nil {
		errs = append(errs, err)
	}
	if c.AzureSubscriptionID != "" && !azureSubscriptionIDRE.MatchString(c.AzureSubscriptionID) {
		errs = append(errs, fmt.Errorf("azureSubscriptionId %q is invalid: use the subscription's GUID, e.g. 00000000-0000-0000-0000-000000000000 (az account show --query id)", c.AzureSubscriptionID))
	}
	if c.ResourceGroup != "" && !resourceGroupRE.MatchString(c.ResourceGroup) {
		errs = append(errs, fmt.Errorf("resourceGroup %q is invalid: use 1-90 letters, digits, '-', '_', '.', '(' or ')', not ending with '.'", c.ResourceGroup))
	}
	if c.ResourceIDPrefix != "" && (c.AzureSubscriptionID != "" || c.ResourceGroup != "") {
		errs = append(errs, errors.New("resourceIdPrefix and azureSubscriptionId/resourceGroup both set: set azureSubscriptionId and resourceGroup, or the whole resourceIdPrefix, not both"))
	}
	errs = append(errs, c.DeadLetters.Validate())
	return errors.Join(errs...)
}

// Deps are the router's live dependencies.
type Deps struct {
	// Store keeps journals, subscription state (cursors, parked retries, probation) and the
	// dead-letter outbox; nil means a new in-memory store that the router closes, and then
	// the outbox is kept in memory and Close writes what it holds. With a store given, Close
	// leaves waiting dead letters in it for the next router to write at their due time.
	Store store.Store
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// HTTPClient is used by webhook sinks; nil means webhook.SharedClient().
	HTTPClient *http.Client
	// Sinks are Go sinks that subscriptions with endpointType Sink name.
	Sinks map[string]sinks.Sink
	// Metrics receives the counters; nil means a new set (see [Router.Metrics]).
	Metrics *metrics.Set
	// DeadLetterStore is where dead-letter objects are written (SPEC §5): a *blob.Store on
	// MinIO, or any sinks.ObjectStore. With it the router runs the dead-letter actor and
	// creates the notification topic (Config.DeadLetters.SystemTopic). Without it, a
	// subscription with a deadLetterDestination is refused at create time unless OnDeadLetter
	// is set.
	DeadLetterStore sinks.ObjectStore
	// OnDeadLetter observes every event that ends without delivery on a subscription with a
	// dead-letter destination, before it goes to the dead-letter actor. Without a
	// DeadLetterStore it is the only place dead letters go (tests use this). It must not
	// block.
	OnDeadLetter func(*DeadLetter)
	// OnAttempt receives a record of every finished delivery attempt.
	OnAttempt func(*actors.AttemptRecord)
	// Publishers are the watermill publishers of subscriptions with a broker endpointType
	// (NatsJetStream, RabbitMQ, RedisStream, PostgreSQL, GoChannel), by broker; broker.Open
	// makes them from the server config. Any other watermill publisher is a destination
	// through RegisterSink with a broker.Sink.
	Publishers map[broker.Kind]message.Publisher
	// Subscribers are the watermill subscribers sources read from ([Router.AddSource]), by
	// broker; broker.Open makes them from the server config.
	Subscribers map[broker.Kind]message.Subscriber
	// Now is the clock of publish times; nil means time.Now. (Tests use synctest instead.)
	Now func() time.Time
}

// Router routes events from topics to event subscriptions. It is safe for concurrent use.
type Router struct {
	cfg       Config
	deps      Deps
	log       *slog.Logger
	store     store.Store
	ownsStore bool
	dead      *deadLetterRuntime // nil without a dead-letter store
	metrics   *metrics.Set
	system    *actor.ActorSystem
	trim      *trimmer

	life    lifecycle       // provisioning states, manual validations, expiry timers
	notices deletionNotices // SubscriptionDeletion notifications in flight (deletion.go)
	srcs    sourceSet       // broker sources feeding topics (sources.go)
	turns   turns           // admin operations, one at a time per topic (turns.go)

	// mu guards the maps below and closed. It is held only to read or change them, never
	// across I/O or across waiting on an actor: a publish takes its read side to find its
	// topic, and nothing may stall it.
	mu     sync.RWMutex
	topics map[string]*topicRuntime
	closed bool

	sinkMu sync.RWMutex
	sinks  map[string]sinks.Sink
}

// topicRuntime is a running topic. Its identity (name, actor, committer) is fixed; its
// definition is a [topicState] replaced whole, so a publish reads one consistent spec without
// a lock while an update rotates the keys.
type topicRuntime struct {
	name   string
	id     string
	pid    *actor.PID
	commit *committer
	writer *actors.StateWriter // subscription state writes, off the actors' mailboxes
	state  atomic.Pointer[topicState]
	// subs and subNames are keyed by folded subscription name (names.go); subNames keeps the
	// name as created. Guarded by Router.mu.
	subs     map[string]*SubscriptionSpec
	subNames map[string]string
}

// topicState is a topic's definition as publishes see it. It is immutable: an update stores
// a new one.
type topicState struct {
	spec   TopicSpec
	schema schemas.Schema
}

func newTopicState(spec TopicSpec) *topicState {
	return &topicState{spec: spec, schema: spec.schema()}
}

// load returns the topic's current definition.
func (t *topicRuntime) load() *topicState { return t.state.Load() }

// New builds a router and starts the topics and subscriptions found in the store.
func New(cfg Config, deps Deps) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid router config: %w", err)
	}
	cfg = cfg.withDefaults()
	r := &Router{
		cfg: cfg, deps: deps, log: deps.Logger, store: deps.Store, metrics: deps.Metrics,
		topics: make(map[string]*topicRuntime), sinks: make(map[string]sinks.Sink),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.notices.init()
	if r.store == nil {
		r.store, r.ownsStore = store.NewMemory(), true
	}
	if r.metrics == nil {
		r.metrics = new(metrics.Set)
	}
	if r.deps.Now == nil {
		r.deps.Now = time.Now
	}
	// Every finished attempt is logged at debug level, so an operator can follow deliveries
	// with --log-level debug. The line is written in the subscription actor's turn that also
	// saves the attempt's outcome, and a shutdown lets that turn finish: once it is out, a
	// retry is saved (cmd/egrid's restart test relies on it).
	if onAttempt, log := deps.OnAttempt, r.log; log.Enabled(context.Background(), slog.LevelDebug) {
		r.deps.OnAttempt = func(rec *actors.AttemptRecord) {
			log.Debug("delivery attempt", "topic", rec.Topic, "subscription", rec.Subscription,
				"outcome", rec.Outcome.String(), "status", rec.StatusCode, "events", len(rec.EventIDs),
				"attempts", rec.Attempts, "probe", rec.Probe, "noAttempt", rec.NoAttempt)
			if onAttempt != nil {
				onAttempt(rec)
			}
		}
	}
	maps := deps.Sinks
	for name, s := range maps {
		r.sinks[name] = s
	}
	log := r.log
	r.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return log.With("component", "actors")
	}))
	r.startDeadLetters()
	if err := r.restore(context.Background()); err != nil {
		r.life.close()
		r.system.Shutdown()
		return nil, err
	}
	r.trim = newTrimmer(r)
	if err := r.ensureSystemTopic(context.Background()); err != nil {
		_ = r.Close(context.Background())
		return nil, err
	}
	r.life.release() // expiry and validation timers armed by restore may run now
	return r, nil
}

// restore starts every topic and subscription in the store. The timers it arms wait for
// New's release (lifecycle.hold), so nothing else touches the router meanwhile.
func (r *Router) restore(ctx context.Context) error {
	defs, err := r.store.Topics(ctx)
	if err != nil {
		return fmt.Errorf("loading topics: %w", err)
	}
	for _, d := range defs {
		var spec TopicSpec
		if err := json.Unmarshal(d.Spec, &spec); err != nil {
			return fmt.Errorf("loading topic %q: %w", d.Name, err)
		}
		subDefs, err := r.store.Subscriptions(ctx, d.Name)
		if err != nil {
			return fmt.Errorf("loading subscriptions of topic %q: %w", d.Name, err)
		}
		if _, dup := r.topics[fold(d.Name)]; dup {
			// Stored by an egrid that compared names by case: the first one is served, the
			// other is kept in the store untouched for an operator to export or delete.
			r.log.Error("a stored topic differs from another only in case and is not served: topic names are case-insensitive", "topic", d.Name)
			continue
		}
		t := r.newTopicRuntime(d.Name, spec)
		var cfgs []*actors.SubscriptionConfig
		for _, sd := range subDefs {
			sc, err := r.restoreSubscription(t, sd)
			if err != nil {
				return fmt.Errorf("loading subscription %q of topic %q: %w", sd.Name, d.Name, err)
			}
			if sc != nil { // nil: awaiting validation, failed or expired
				cfgs = append(cfgs, sc)
			}
		}
		if err := r.startTopic(t, cfgs); err != nil {
			return err
		}
	}
	return nil
}

func (r *Router) newTopicRuntime(name string, spec TopicSpec) *topicRuntime {
	t := &topicRuntime{
		name: name, id: r.cfg.ResourceIDPrefix + "/" + name,
		subs: make(map[string]*SubscriptionSpec), subNames: make(map[string]string),
		writer: actors.NewStateWriter(r.store, name),
	}
	t.state.Store(newTopicState(spec))
	return t
}

// startTopic spawns a topic's actor and committer and adds it to the router; a closed router
// refuses it (and stops what was started).
func (r *Router) startTopic(t *topicRuntime, subs []*actors.SubscriptionConfig) error {
	t.pid = r.system.Root.Spawn(actors.TopicProps(&actors.TopicConfig{
		Name: t.name, Metrics: r.metrics, Logger: r.log, Subscriptions: subs,
	}))
	t.commit = newCommitter(r, t)
	r.mu.Lock()
	if !r.closed {
		r.topics[fold(t.name)] = t
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	t.commit.close()
	_ = r.system.Root.StopFuture(t.pid).Wait()
	_ = t.writer.Close()
	return ErrClosed
}

// RegisterSink makes a Go sink available to subscriptions with endpointType Sink and
// destination.properties.sinkName name. Register sinks before creating (or, after a restart,
// before restoring) the subscriptions that use them: pass them in [Deps.Sinks] for the latter.
func (r *Router) RegisterSink(name string, s sinks.Sink) {
	r.sinkMu.Lock()
	defer r.sinkMu.Unlock()
	r.sinks[name] = s
}

// Metrics returns the router's counters.
func (r *Router) Metrics() *metrics.Set { return r.metrics }

// Config returns the router's config, with the defaults filled in.
func (r *Router) Config() Config { return r.cfg }

// Logger returns the router's logger ([Deps.Logger], or one that discards).
func (r *Router) Logger() *slog.Logger { return r.log }

// Now reads the router's clock ([Deps.Now]).
func (r *Router) Now() time.Time { return r.deps.Now() }

// TopicID returns the ARM-style resource ID of a topic (its `topic` field and CloudEvents
// source), with the topic's name as created when it exists.
func (r *Router) TopicID(name string) string {
	if display, err := r.TopicName(name); err == nil {
		name = display
	}
	return r.cfg.ResourceIDPrefix + "/" + name
}

// CreateTopic creates a topic, or updates the keys of an existing one (its schema is fixed at
// creation, as in Event Grid). Missing keys are generated. It returns the stored spec. Names
// are case-insensitive: an existing topic keeps the case it was created with.
func (r *Router) CreateTopic(ctx context.Context, name string, spec TopicSpec) (TopicSpec, error) {
	var errs []error
	if err := ValidateTopicName(name); err != nil {
		errs = append(errs, err)
	}
	if err := spec.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return TopicSpec{}, err
	}
	release, err := r.turns.acquire(ctx, name)
	if err != nil {
		return TopicSpec{}, fmt.Errorf("saving topic %q: %w", name, err)
	}
	defer release()
	r.mu.RLock()
	closed, t := r.closed, r.topics[fold(name)]
	r.mu.RUnlock()
	if closed {
		return TopicSpec{}, ErrClosed
	}
	if t != nil {
		name = t.name
		cur := t.load()
		if cur.schema != spec.schema() || cur.spec.Kind != spec.Kind {
			return TopicSpec{}, fmt.Errorf("topic %q exists with input schema %s and kind %q; delete it first to change them", name, cur.schema, cur.spec.Kind)
		}
		if spec.Key1 == "" {
			spec.Key1 = cur.spec.Key1
		}
		if spec.Key2 == "" {
			spec.Key2 = cur.spec.Key2
		}
	}
	for _, k := range []*string{&spec.Key1, &spec.Key2} {
		if *k == "" {
			key, err := sas.NewKey()
			if err != nil {
				return TopicSpec{}, fmt.Errorf("generating a topic key: %w", err)
			}
			*k = key
		}
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return TopicSpec{}, err
	}
	if err := r.store.PutTopic(ctx, name, raw); err != nil {
		return TopicSpec{}, fmt.Errorf("saving topic %q: %w: %w", name, ErrUnavailable, err)
	}
	if t != nil {
		t.state.Store(newTopicState(spec)) // publishes see the old keys or the new ones, whole
		return spec, nil
	}
	if err := r.startTopic(r.newTopicRuntime(name, spec), nil); err != nil {
		return TopicSpec{}, err
	}
	r.log.Info("topic created", "topic", name, "inputSchema", spec.schema().String())
	return spec, nil
}

// Topic returns a topic's spec.
func (r *Router) Topic(name string) (TopicSpec, error) {
	t, _, _, err := r.lookup(name, "")
	if err != nil {
		return TopicSpec{}, err
	}
	return t.load().spec, nil
}

// Topics lists the topic names, as created, in order.
func (r *Router) Topics() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.topics))
	for _, t := range r.topics {
		names = append(names, t.name)
	}
	slices.Sort(names)
	return names
}

// DeleteTopic deletes a topic with its subscriptions and everything stored for them.
func (r *Router) DeleteTopic(ctx context.Context, name string) error {
	release, err := r.turns.acquire(ctx, name)
	if err != nil {
		return fmt.Errorf("deleting topic %q: %w", name, err)
	}
	defer release()
	r.mu.Lock()
	t, ok := r.topics[fold(name)]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("topic %q: %w", name, ErrTopicNotFound)
	}
	delete(r.topics, fold(name))
	r.mu.Unlock()
	name = t.name
	r.stopReplays(name, "")
	t.commit.close()
	if err := r.system.Root.StopFuture(t.pid).Wait(); err != nil {
		return fmt.Errorf("stopping topic %q: %w", name, err)
	}
	_ = t.writer.Close() // after the actors: they flush on stop
	if err := r.store.DeleteTopic(ctx, name); err != nil {
		return fmt.Errorf("deleting topic %q: %w: %w", name, ErrUnavailable, err)
	}
	r.log.Info("topic deleted", "topic", name)
	return nil
}

// CreateSubscription creates or replaces an event subscription. The spec is checked against
// its topic first, with every problem reported at once. A new subscription receives the events
// published after it was created.
//
// A WebHook endpoint is validated first (SPEC §2.5) unless the subscription sets
// destination.properties.skipValidation or the router [Config.SkipEndpointValidation]: an
// endpoint that refuses fails the call with an error wrapping [ErrValidationFailed], and
// nothing changes. An endpoint that answers the validation event with 200 but without the code
// leaves the subscription AwaitingManualAction (see [Router.Provisioning]) and CreateSubscription
// returns nil: it delivers once the endpoint GETs the validationUrl, which points at
// [Config.PublicURL] (without it, this answer fails the call). Every update validates again,
// as in Event Grid; an update the endpoint refuses leaves the previous definition in place.
//
// Values that admin reads hide are kept from the stored subscription when spec leaves them
// empty: the endpoint URL, and the value of a secret static header of the same name.
func (r *Router) CreateSubscription(ctx context.Context, topic, name string, spec SubscriptionSpec) error {
	_, err := r.applySubscription(ctx, topic, name, spec, r.cfg.PublicURL)
	return err
}

// subscriptionConfig validates spec and builds the actor's config.
func (r *Router) subscriptionConfig(t *topicRuntime, name string, spec *SubscriptionSpec) (*actors.SubscriptionConfig, error) {
	return r.subscriptionConfigWith(t, name, spec, r.life.get(subKey{t.name, name}))
}

// subscriptionConfigWith is subscriptionConfig for the provisioning record prov (nil: none),
// whose WebHook-Allowed-Rate caps the webhook's request rate.
func (r *Router) subscriptionConfigWith(t *topicRuntime, name string, spec *SubscriptionSpec, prov *provisioned) (*actors.SubscriptionConfig, error) {
	st := t.load()
	res, err := spec.validate(&st.spec, r.cfg.TimeScale)
	if err != nil {
		return nil, fmt.Errorf("event subscription %q: %w", name, err)
	}
	var sink sinks.Sink
	switch res.endpointType {
	case EndpointWebHook:
		client := r.deps.HTTPClient
		sink, err = webhook.New(webhook.Config{
			URL: spec.Destination.Properties.EndpointURL, Timeout: res.timeout,
			Headers: res.headers, MaxRequestsPerMinute: prov.deliveryRate(), Origin: prov.origin(),
		}, client)
		if err != nil {
			return nil, fmt.Errorf("event subscription %q: destination: %w", name, err)
		}
	case EndpointSink:
		r.sinkMu.RLock()
		s, ok := r.sinks[spec.Destination.Properties.SinkName]
		r.sinkMu.RUnlock()
		if !ok {
			return nil, fmt.Errorf("event subscription %q: destination.properties.sinkName %q: no sink is registered under that name; register it with Router.RegisterSink or Deps.Sinks", name, spec.Destination.Properties.SinkName)
		}
		sink = withHeaders(s, res.headers)
	default: // a broker (validate accepts nothing else)
		bs, err := r.brokerSink(res.endpointType, spec.Destination.Properties)
		if err != nil {
			return nil, fmt.Errorf("event subscription %q: %w", name, err)
		}
		sink = withHeaders(bs, res.headers)
	}
	res.policy.JitterSeed = seedFor(t.name, name)
	res.policy.NoJitter = r.cfg.NoJitter
	res.policy.HonorRetryAfter = r.cfg.HonorRetryAfter
	if h := spec.RetryPolicy.HonorRetryAfter; h != nil {
		res.policy.HonorRetryAfter = *h
	}
	return &actors.SubscriptionConfig{
		Topic: t.name, Name: name, TopicID: t.id, InputSchema: st.schema, DeliverySchema: res.deliverySchema,
		Encode: schemas.EncodeOptions{OmitConvertedDataSchema: r.cfg.OmitConvertedDataSchema},
		Filter: res.filter, Policy: res.policy, Sink: sink,
		MaxEventsPerBatch:   spec.Destination.Properties.MaxEventsPerBatch,
		PreferredBatchBytes: spec.Destination.Properties.PreferredBatchSizeInKilobytes * 1024,
		MaxInFlight:         r.cfg.MaxInFlight, Timeout: attemptBudget(res.timeout, prov.deliveryRate(), r.cfg.MaxInFlight),
		Store: r.store, Writer: t.writer, Metrics: r.metrics, Logger: r.log,
		OnDeadLetter: r.deadLetterHandoff(t, name, spec, res.deliverySchema), OnAttempt: r.deps.OnAttempt,
	}, nil
}

func seedFor(topic, sub string) uint64 {
	var h uint64 = 14695981039346656037
	for _, c := range []byte(topic + "/" + sub) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// Subscription returns a subscription's spec.
func (r *Router) Subscription(topic, name string) (SubscriptionSpec, error) {
	_, s, _, err := r.lookup(topic, name)
	if err != nil {
		return SubscriptionSpec{}, err
	}
	return *s, nil
}

// Subscriptions lists a topic's subscription names, as created, in order.
func (r *Router) Subscriptions(topic string) ([]string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, _, _, err := r.lookupLocked(topic, "")
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(t.subs))
	for _, n := range t.subNames {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// DeleteSubscription deletes an event subscription and its delivery state. A delivering WebHook
// subscription's endpoint is then sent Event Grid's SubscriptionDeletion notification, best
// effort and without waiting for it (eventgrid-behaviour.md §5.4).
func (r *Router) DeleteSubscription(ctx context.Context, topic, name string) error {
	release, err := r.turns.acquire(ctx, topic)
	if err != nil {
		return fmt.Errorf("deleting event subscription %q: %w", name, err)
	}
	defer release()
	t, _, display, err := r.lookup(topic, name)
	if err != nil {
		return err
	}
	topic, name = t.name, display
	if _, err := r.system.Root.RequestFuture(t.pid, &actors.RemoveSubscription{Name: name}, 10*time.Second).Result(); err != nil {
		return fmt.Errorf("stopping event subscription %q: %w", name, err)
	}
	r.stopReplays(topic, name)
	r.mu.Lock()
	r.notifyDeletion(t, name, t.subs[fold(name)]) // under r.mu: it reads closed; it only starts a goroutine
	t.delSub(name)
	r.mu.Unlock()
	r.life.forget(subKey{topic, name})
	if err := r.store.DeleteSubscription(ctx, topic, name); err != nil {
		return fmt.Errorf("deleting event subscription %q: %w: %w", name, ErrUnavailable, err)
	}
	r.trim.kick(topic) // it may have been holding the journal back
	r.log.Info("event subscription deleted", "topic", topic, "subscription", name)
	return nil
}

// Status returns a subscription's delivery state: backlog, oldest undelivered event, probation.
func (r *Router) Status(ctx context.Context, topic, name string) (*Status, error) {
	return r.askSubscription(ctx, topic, name, func(name string) any { return &actors.GetStatus{Subscription: name} })
}

// EndProbation ends a subscription's probation now (an operator's call, SPEC §2.2) and
// returns its new state.
func (r *Router) EndProbation(ctx context.Context, topic, name string) (*Status, error) {
	return r.askSubscription(ctx, topic, name, func(name string) any { return &actors.EndProbation{Subscription: name} })
}

// askSubscription asks a subscription's actor the message msg builds for its name as created.
func (r *Router) askSubscription(ctx context.Context, topic, name string, msg func(name string) any) (*Status, error) {
	t, _, name, err := r.lookup(topic, name)
	if err != nil {
		return nil, err
	}
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	res, err := r.system.Root.RequestFuture(t.pid, msg(name), timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("asking event subscription %q: %w", name, err)
	}
	switch v := res.(type) {
	case *actors.Status:
		return statusOf(v), nil
	case error:
		return nil, v
	}
	return nil, fmt.Errorf("asking event subscription %q: unexpected answer %T", name, res)
}

// Publish publishes events to a topic from Go, with the same validation and durability as the
// HTTP data plane: each event is marshalled to JSON (structs, maps or json.RawMessage) and the
// array is decoded as the topic's input schema. It returns once every event is durable, or an
// error and nothing accepted.
func (r *Router) Publish(ctx context.Context, topic string, events ...any) error {
	body, err := json.Marshal(events)
	if err != nil {
		return fmt.Errorf("encoding events: %w", err)
	}
	t, err := r.topic(topic)
	if err != nil {
		return err
	}
	evs, err := r.decode(t, t.load(), body)
	if err != nil {
		return err
	}
	return r.ingest(ctx, t, evs)
}

// DecodeEvents decodes body, a JSON array (a CloudEvents topic also takes one structured
// event), in the input schema of spec — a topic's definition as [Router.Topic] returned it,
// so that one definition serves a whole request — within lim (schemas.ClassicLimits, or
// NamespaceLimits for a namespace topic or the namespace publish route). The events it
// returns can be given to [Router.PublishEvents].
func (r *Router) DecodeEvents(topic string, spec TopicSpec, body []byte, lim schemas.Limits) ([]*schemas.Event, error) {
	t := &topicRuntime{name: topic, id: r.TopicID(topic)}
	return r.decodeWithin(t, newTopicState(spec), body, lim)
}

// PublishEvents makes events decoded for a topic durable, like [Router.Publish]: it returns
// once every event is durable, or an error and nothing accepted (wrapping [ErrUnavailable]
// when the store failed, [ErrClosed] after Close, [ErrTopicNotFound]). The events must come
// from a decoder of package schemas for the topic's input schema ([Router.DecodeEvents], or
// schemas.DecodeCloudEventBinary): PublishEvents does not validate them again.
func (r *Router) PublishEvents(ctx context.Context, topic string, events []*schemas.Event) error {
	t, err := r.topic(topic)
	if err != nil {
		return err
	}
	return r.ingest(ctx, t, events)
}

func (r *Router) topic(name string) (*topicRuntime, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil, ErrClosed
	}
	t, ok := r.topics[fold(name)]
	if !ok {
		return nil, fmt.Errorf("topic %q: %w", name, ErrTopicNotFound)
	}
	return t, nil
}

// decode decodes a JSON array body in the input schema of st, the topic's definition loaded
// once for the whole request.
func (r *Router) decode(t *topicRuntime, st *topicState, body []byte) ([]*schemas.Event, error) {
	lim := schemas.ClassicLimits
	if st.spec.Kind == KindNamespace {
		lim = schemas.NamespaceLimits
	}
	return r.decodeWithin(t, st, body, lim)
}

func (r *Router) decodeWithin(t *topicRuntime, st *topicState, body []byte, lim schemas.Limits) ([]*schemas.Event, error) {
	switch st.schema {
	case schemas.CloudEvents:
		return schemas.DecodeCloudEvents(body, lim)
	case schemas.Custom:
		return schemas.DecodeCustom(body, st.spec.InputSchemaMapping.Properties, t.id, lim, uuid.NewString, r.deps.Now().UTC())
	default:
		return schemas.DecodeEventGrid(body, t.id, lim)
	}
}

// ingest makes events durable and hands them to the topic actor.
func (r *Router) ingest(ctx context.Context, t *topicRuntime, evs []*schemas.Event) error {
	start := time.Now()
	err := t.commit.append(ctx, evs)
	if err != nil {
		r.metrics.Add(metrics.Key{Name: metrics.PublishFailCount, Scope: t.name, Dim: "ServiceUnavailable"}, int64(len(evs)))
		return err
	}
	r.metrics.Add(metrics.Key{Name: metrics.PublishSuccessCount, Scope: t.name}, int64(len(evs)))
	r.metrics.Add(metrics.Key{Name: "PublishSuccessLatencyInMs", Scope: t.name}, time.Since(start).Milliseconds())
	return nil
}

// Close shuts the router down in order: it refuses new publishes, lets appends in progress
// finish, stops the actors (attempts in flight are cancelled; their events are attempted again
// after a restart), and closes the store if the router opened it. Close is idempotent; ctx
// bounds the wait.
func (r *Router) Close(ctx context.Context) error {
	r.srcs.stop()  // stop ingress from brokers first: messages in hand are acked or nacked
	r.life.close() // stop expiry and validation timers first: their callbacks take r.mu
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	topics := make([]*topicRuntime, 0, len(r.topics))
	for _, t := range r.topics {
		topics = append(topics, t)
	}
	r.mu.Unlock()
	r.notices.close() // none starts once closed is set
	for _, t := range topics {
		t.commit.close()
	}
	r.trim.close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, t := range topics {
			_ = r.system.Root.StopFuture(t.pid).Wait()
			if err := t.writer.Close(); err != nil {
				r.log.Error("writing subscription state at shutdown", "topic", t.name, "err", err)
			}
		}
		r.closeDeadLetters(ctx) // write what is waiting (in-memory outbox), then stop the dead-letter actor
		r.system.Shutdown()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("closing router: %w", ctx.Err())
	}
	if r.ownsStore {
		return r.store.Close()
	}
	return nil
}
