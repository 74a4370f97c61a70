package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas/clip"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/broker"
	"github.com/egridio/egrid/sinks/egress"
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
	// Retry-After, or 507 when the error also matches [ErrInsufficientStorage] (the store
	// failed a write because its disk is full: [store.ErrDiskFull]).
	ErrUnavailable = errors.New("store unavailable")
	// ErrStoreDamaged wraps the failure of a call that met damaged data in the store: a
	// stored record the call needs that does not decode, or that the store finds damaged
	// (the store's error, which it wraps too, matches [store.ErrCorrupt]). Retrying does not
	// help: the data stays damaged until the store is restored from a backup, or the topic
	// or subscription it names is deleted and created again. The error says what is
	// damaged; the store logs what is lost and what to do (egrid store check lists the
	// embedded store's damage). It is not [ErrUnavailable]: the admin API answers it 500,
	// without Retry-After (409 when it also matches [ErrDefinitionDamaged]: a create or
	// update of a subscription whose stored record is damaged, to delete first). Delivery
	// histories have their own, [ErrHistoryDamaged].
	ErrStoreDamaged = errors.New("stored data damaged")
	// ErrDefinitionDamaged wraps the refusal to create a topic or subscription whose name is
	// taken by a stored definition the store found damaged (it is not served): delete the
	// topic or subscription, which removes the damaged remains, then create it again. The
	// admin API answers it 409. It is [store.ErrDamaged].
	ErrDefinitionDamaged = store.ErrDamaged
	// ErrDefinitionChanged wraps the refusal of a write whose definition another write
	// changed meanwhile, so that writes of one resource take effect in the order they were
	// answered: a create or update of an event subscription when another request updated,
	// deleted or created it while this one's endpoint handshake ran (this one changes
	// nothing: read the definition and PUT again if it is still wanted); in cluster mode
	// also the delete of a topic or subscription whose stored definition was found damaged
	// when another node wrote a definition under the name (created it again) between that
	// finding and the delete: nothing was deleted, and the name holds the other node's
	// definition (retry the delete if that one is to go too). The admin API answers it 409.
	// It is [store.ErrChanged].
	ErrDefinitionChanged = store.ErrChanged
)

// storeFailure is err, a store's failure in what the call was doing (what: "reading it from
// the cluster's store"), as the router returns it: damage the store found or a stored record
// that does not decode (err matches [store.ErrCorrupt]) wraps [ErrStoreDamaged], for which
// retrying never helps; any other failure [ErrUnavailable], to retry. err is wrapped too.
func storeFailure(what string, err error) error {
	if errors.Is(err, store.ErrCorrupt) {
		return fmt.Errorf("%s: %w (retrying does not help: restore the store from a backup, or delete what is damaged and create it again; the server log says what): %w", what, ErrStoreDamaged, err)
	}
	return fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
}

// Config is the router's data. Zero values take the documented defaults.
type Config struct {
	// InsecureDev accepts publishes that carry no credentials and, when no AdminToken is
	// configured, admin calls without a token; a configured AdminToken is still required.
	// Requests with wrong credentials are still refused, and those without are let in only
	// from the machine's own programs, not from a web page (router/devguard). Development only.
	InsecureDev bool `json:"insecureDev,omitempty" yaml:"insecureDev,omitempty"`
	// AdminToken is the bearer token the admin API requires.
	AdminToken string `json:"adminToken,omitempty" yaml:"adminToken,omitempty"`
	// TimeScale divides every policy delay (retry schedule, floors, probation, time to live,
	// dead-letter delay) but not HTTP timeouts: 600 runs a 24-hour schedule in 144 s. 0 means 1;
	// negative, NaN and infinite values fail [Config.Validate].
	TimeScale float64 `json:"timeScale,omitempty" yaml:"timeScale,omitempty"`
	// NoJitter turns off the 0-10 % jitter added to retry delays (SPEC §2.1: "can be turned
	// off for tests"), so delivery timelines are exact. Leave it off in production: the jitter
	// spreads the retries of events that failed together.
	NoJitter bool `json:"noJitter,omitempty" yaml:"noJitter,omitempty"`
	// MaxSubscriptionsPerTopic bounds a topic's subscriptions (default
	// [DefaultMaxSubscriptionsPerTopic]).
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
	// RequireHTTPS refuses http:// WebHook endpoints at create and update, and sends nothing
	// to those stored before (their attempts fail as InvalidDestination), as Azure Event Grid
	// accepts https:// only. Off in the embedded router, whose programs and tests deliver to
	// http://127.0.0.1 servers; egrid serve turns it on unless --insecure-dev or
	// server.allowHttpEndpoints. There is no per-subscription switch: whoever may create a
	// subscription must not be able to lift the operator's rule.
	RequireHTTPS bool `json:"requireHttps,omitempty" yaml:"requireHttps,omitempty"`
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
	// AnyAPIVersion lets the HTTP data plane (router/httpapi) take any api-version on every
	// route, and a namespace topic's events on the classic route (/api/events) too. By
	// default, as Azure, classic publish takes api-version 2018-01-01, :publish and the pull
	// routes 2023-11-01 and 2024-06-01 (a request without api-version is taken), and a
	// namespace topic takes :publish only; other requests are refused with 400 ("Unknown api
	// version"). An egrid extension, off by default, for clients written against egrid's
	// earlier leniency.
	AnyAPIVersion bool `json:"anyApiVersion,omitempty" yaml:"anyApiVersion,omitempty"`
	// MaxReceiveAnswerBytes bounds the bytes of pull delivery answers (:receive) held in
	// memory at once, across every queue subscription and poll: an answer is held until its
	// consumer has read it (up to 10 minutes). A poll gets the events that fit, or keeps
	// waiting until answers being written free their bytes; one event is handed out whatever
	// its size when no other answer is held. Default [DefaultMaxReceiveAnswerBytes] (256 MiB);
	// negative values fail [Config.Validate].
	MaxReceiveAnswerBytes int64 `json:"maxReceiveAnswerBytes,omitempty" yaml:"maxReceiveAnswerBytes,omitempty"`
	// History configures the per-event delivery histories [Router.Explain] reads: how many
	// attempts each keeps and how long (see [HistoryConfig]).
	History HistoryConfig `json:"history,omitzero" yaml:"history,omitempty"`
	// Cluster names this node and its cluster when [Deps.NATS] is set (cluster mode, see
	// package router/cluster); ignored otherwise.
	Cluster cluster.Options `json:"cluster,omitzero" yaml:"cluster,omitempty"`
}

// DefaultMaxReceiveAnswerBytes is the default [Config.MaxReceiveAnswerBytes]: 256 MiB.
const DefaultMaxReceiveAnswerBytes = actors.DefaultAnswerBudget

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

// DefaultMaxSubscriptionsPerTopic is [Config.MaxSubscriptionsPerTopic] when not set.
const DefaultMaxSubscriptionsPerTopic = 500

func (c Config) withDefaults() Config {
	if c.TimeScale <= 0 {
		c.TimeScale = 1
	}
	if c.MaxSubscriptionsPerTopic <= 0 {
		c.MaxSubscriptionsPerTopic = DefaultMaxSubscriptionsPerTopic
	}
	if c.MaxReceiveAnswerBytes <= 0 {
		c.MaxReceiveAnswerBytes = DefaultMaxReceiveAnswerBytes
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
	c.History = c.History.withDefaults()
	return c
}

// Validate reports every problem of the config at once.
func (c Config) Validate() error {
	var errs []error
	// NaN and ±Inf fail every comparison the policy makes with them (retry.Policy refuses
	// them), so a router that took one would start with every subscription Failed.
	if ts := c.TimeScale; math.IsNaN(ts) || math.IsInf(ts, 0) || ts < 0 {
		errs = append(errs, fmt.Errorf("timeScale %v is invalid: use a finite number >= 0, such as 600 (0 and 1 are real time)", ts))
	}
	if c.MaxSubscriptionsPerTopic < 0 {
		errs = append(errs, fmt.Errorf("maxSubscriptionsPerTopic %d is invalid: use a positive number (0 for the default, %d)", c.MaxSubscriptionsPerTopic, DefaultMaxSubscriptionsPerTopic))
	}
	if c.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("maxInFlight %d is invalid: use a positive number (0 for the default, %d)", c.MaxInFlight, actors.DefaultMaxInFlight))
	}
	if c.MaxReceiveAnswerBytes < 0 {
		errs = append(errs, fmt.Errorf("maxReceiveAnswerBytes %d is invalid: use a positive number of bytes, such as 268435456 (256 MiB, the default, which 0 also means)", c.MaxReceiveAnswerBytes))
	}
	if err := CheckPublicURL("publicUrl", c.PublicURL); err != nil {
		errs = append(errs, err)
	}
	if c.AzureSubscriptionID != "" && !azureSubscriptionIDRE.MatchString(c.AzureSubscriptionID) {
		errs = append(errs, fmt.Errorf("azureSubscriptionId %q is invalid: use the subscription's GUID, e.g. 00000000-0000-0000-0000-000000000000 (az account show --query id)", clip.String(c.AzureSubscriptionID)))
	}
	if c.ResourceGroup != "" && !resourceGroupRE.MatchString(c.ResourceGroup) {
		errs = append(errs, fmt.Errorf("resourceGroup %q is invalid: use 1-90 letters, digits, '-', '_', '.', '(' or ')', not ending with '.'", clip.String(c.ResourceGroup)))
	}
	if c.ResourceIDPrefix != "" && (c.AzureSubscriptionID != "" || c.ResourceGroup != "") {
		errs = append(errs, errors.New("resourceIdPrefix and azureSubscriptionId/resourceGroup both set: set azureSubscriptionId and resourceGroup, or the whole resourceIdPrefix, not both"))
	}
	errs = append(errs, c.DeadLetters.Validate(), c.History.Validate(), c.Cluster.Validate())
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
	// HTTPClient is used by webhook sinks and validation handshakes; nil means a client that
	// dials through Egress (see egress.go). A client of your own makes its connections
	// unguarded unless its dialer is Egress.DialContext.
	HTTPClient *http.Client
	// Egress is the egress policy of WebHook endpoints (SPEC §9), checked at create and
	// update and at every connection; nil means egress.Config's zero value: link-local,
	// private and unique-local addresses denied, loopback allowed (egrid serve denies
	// loopback too, unless --insecure-dev).
	Egress *egress.Policy
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
	// OnAttempt receives a record of every finished delivery attempt. The record and its
	// slices are shared with the delivery history kept for explain: read them, never modify
	// them (copy what you keep).
	OnAttempt func(*AttemptRecord)
	// OnSubscriptionDeleted is called with a deleted subscription's topic and name once its
	// actor on this node has stopped — after [Router.DeleteSubscription], for each
	// subscription of a topic [Router.DeleteTopic] deleted, and in cluster mode on the node
	// that ran it — so that what was kept from its OnAttempt records goes with it: no record
	// of that subscription is reported after it, and one created again under the name reports
	// afresh. It is not called while a subscription of the name runs here again (created
	// anew before the node learnt of the delete). It must not block.
	OnSubscriptionDeleted func(topic, subscription string)
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
	// NATS, when set, runs the router as one node of a cluster (see package router/cluster
	// and README "Cluster mode"): Store must then be a JetStream store (router/store/jetstream)
	// opened with the prefix of [Config.Cluster], which every node shares. Definitions made
	// on any node take effect on all, each subscription actor runs on one live node, and a
	// publish on any node reaches them all. The caller owns the connection: closing it cuts
	// the node off (its subscriptions move to the others within the lease TTL). Connect with
	// nats.MaxReconnects(-1) (the node resumes by itself when NATS returns) and
	// nats.ReconnectBufSize(-1) (a publish refused while disconnected is not stored later).
	NATS *nats.Conn
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
	dlPing    sharedPing                  // the readiness check's pings of the dead-letter store (observe.go)
	onAttempt func(*actors.AttemptRecord) // Deps.OnAttempt and the debug log
	history   *historyWriter              // delivery histories for Explain (explain.go)
	system    *actor.ActorSystem
	trim      *trimmer
	// loadSlots bounds the subscription actors reading their stored state at once
	// ([actors.SubscriptionConfig.LoadSlots]).
	loadSlots chan struct{}
	// answers bounds the bytes of receive answers held at once (Config.MaxReceiveAnswerBytes).
	answers *actors.AnswerBudget
	// stops counts the subscription actors' stop work under way: once an actor has
	// terminated, it waits off its mailbox for its sink calls and its last state write
	// ([actors.Stops]). Close waits for it before it closes the store.
	stops actors.Stops

	life    lifecycle       // provisioning states, manual validations, expiry timers
	notices deletionNotices // SubscriptionDeletion notifications in flight (deletion.go)
	srcs    sourceSet       // broker sources feeding topics (sources.go)
	turns   turns           // admin operations, one at a time per topic (turns.go)

	egress egressRuntime // egress policy wiring (egress.go)

	cl *clusterRuntime // cluster mode (cluster.go); nil when embedded

	// routedPolls bounds the long polls other nodes route here (AdmitRoutedPolls); nil: none.
	routedPolls atomic.Pointer[func(queue string) (release func(), err error)]

	// mu guards the maps below and closed. It is held only to read or change them, never
	// across I/O or across waiting on an actor: a publish takes its read side to find its
	// topic, and nothing may stall it.
	mu     sync.RWMutex
	topics map[string]*topicRuntime
	closed bool

	sinkMu sync.RWMutex
	sinks  map[string]sinks.Sink
}

// New builds a router and starts the topics and subscriptions found in the store.
func New(cfg Config, deps Deps) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid router config: %w", err)
	}
	cfg = cfg.withDefaults()
	r := &Router{
		cfg: cfg, deps: deps, log: deps.Logger, store: deps.Store, metrics: deps.Metrics,
		topics: make(map[string]*topicRuntime), sinks: make(map[string]sinks.Sink),
		loadSlots: make(chan struct{}, 2*runtime.GOMAXPROCS(0)),
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
	r.setupEgress()
	// Every finished attempt is logged at debug level, so an operator can follow deliveries
	// with --log-level debug. The line is written in the subscription actor's turn that also
	// saves the attempt's outcome, and a shutdown lets that turn finish: once it is out, a
	// retry is saved (cmd/egrid's restart test relies on it).
	if observe := deps.OnAttempt; observe != nil {
		r.onAttempt = func(rec *actors.AttemptRecord) { observe(attemptRecordOf(rec)) }
	}
	if onAttempt, log := r.onAttempt, r.log; log.Enabled(context.Background(), slog.LevelDebug) {
		r.onAttempt = func(rec *actors.AttemptRecord) {
			ids := slog.Any(logattr.EventIDs, rec.EventIDs)
			if len(rec.EventIDs) == 1 {
				ids = slog.String(logattr.EventID, rec.EventIDs[0])
			}
			log.Debug("delivery attempt", logattr.Topic, rec.Topic, logattr.Subscription, rec.Subscription, ids,
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
	r.answers = actors.NewAnswerBudget(cfg.MaxReceiveAnswerBytes, r.system.Root)
	r.history = newHistoryWriter(r.store, cfg.History, r.log)
	if deps.NATS != nil {
		if err := r.joinCluster(); err != nil {
			r.system.Shutdown()
			r.history.close()
			return nil, fmt.Errorf("joining the cluster: %w", err)
		}
	}
	// The trimmer is in place before anything can publish: the committers that restore starts
	// count their appends in it from their first one, and the dead-letter actor's
	// notifications publish as soon as it writes an object, which it may do while the
	// topics are still being restored.
	r.trim = newTrimmer(r)
	if err := r.startDeadLetters(); err != nil {
		r.closeCluster(context.Background())
		r.life.close()
		r.trim.close()
		r.system.Shutdown()
		r.history.close()
		return nil, err
	}
	if err := r.restore(context.Background()); err != nil {
		_ = r.Close(context.Background()) // the topics restored so far run: stop them in order
		return nil, err
	}
	if err := r.ensureSystemTopic(context.Background()); err != nil {
		_ = r.Close(context.Background())
		return nil, err
	}
	r.life.release() // expiry and validation timers armed by restore may run now
	if r.cl != nil {
		r.cl.watch()
	}
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
			r.log.Error("a stored topic differs from another only in case and is not served: topic names are case-insensitive", logattr.Topic, d.Name)
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

// drain gives the push subscriptions' attempts in flight the stop grace
// ([actors.DefaultStopGrace]) to be answered before the actors stop: they start no more
// attempts, and the answers that come settle their events, so the next start delivers again
// only the events whose attempts the stop then cuts ([actors.Drain]).
func (r *Router) drain(topics []*topicRuntime) {
	d := new(actors.Drain)
	for _, t := range topics {
		d.Send(r.system.Root, t.pid)
	}
	if d.Wait(actors.DefaultStopGrace) {
		return
	}
	// One line a subscription, with its topic and name, as every line about one carries.
	subs, others := d.InFlight()
	for _, s := range subs {
		r.log.Warn("attempts still in flight at the end of the stop grace are cut; their events are attempted again after the next start",
			logattr.Topic, s.Topic, logattr.Subscription, s.Subscription, "attemptsInFlight", s.Attempts, "grace", actors.DefaultStopGrace)
	}
	if others > 0 {
		r.log.Warn("actors did not answer within the stop grace (stopped, or restarting after a panic): any attempts of theirs still in flight are cut, and their events attempted again after the next start",
			"actors", others, "grace", actors.DefaultStopGrace)
	}
}

// Close shuts the router down in order: it refuses new publishes, lets appends in progress
// finish, gives the attempts in flight the stop grace to be answered (no new one starts), stops the
// actors (attempts still in flight are cancelled; their events alone are attempted again
// after a restart) and waits for their last state writes (each at most its stop grace), and
// closes the store if the router opened it. Close is idempotent; ctx
// bounds the wait, in cluster mode the wait for the placement's actor starts and stops under
// way too (they stop waiting for their topic actors at once: the actors stop with their
// topics, writing their state, and a lease not released lapses) and for its NATS calls under
// way, which are cancelled when ctx ends ([cluster.Node.Close]). A store that stopped
// answering (an append or a journal trim that does not return), or an actor's turn that holds
// its mailbox (the actor is waited for until it has terminated, its last writes begun), holds
// only the shutdown, which goes on in the background once ctx ends: Close then returns ctx's
// error and leaves the store open.
func (r *Router) Close(ctx context.Context) error {
	r.closeCluster(ctx) // no more placement: the actors stop with their topics below
	done := make(chan struct{})
	again := false // Close was called before: its call closes the store
	go func() {
		defer close(done)
		r.srcs.stop()  // stop ingress from brokers first: messages in hand are acked or nacked
		r.life.close() // stop expiry and validation timers first: their callbacks take r.mu
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			again = true
			return
		}
		r.closed = true
		topics := make([]*topicRuntime, 0, len(r.topics))
		for _, t := range r.topics {
			topics = append(topics, t)
		}
		r.mu.Unlock()
		r.notices.close() // none starts once closed is set
		for _, t := range topics {
			t.commit.close() // waits for the append under way: the store may hold it
		}
		r.trim.close() // waits for the trim under way, as long
		r.drain(topics)
		for _, t := range topics {
			r.stopActor(t.pid, "topic actor "+t.name) // its children's stop work has begun then
		}
		// The actors have terminated; their last state writes and sink calls are waited for
		// off their mailboxes, each at most their stop grace (ctx bounds Close all the same).
		_ = r.stops.Wait(context.Background())
		for _, t := range topics {
			if err := t.writer.Close(); err != nil {
				r.log.Error("writing subscription state at shutdown", logattr.Topic, t.name, "err", err)
			}
		}
		if r.cl != nil {
			r.cl.release(ctx) // the actors wrote their state: hand their leases over now
		}
		r.history.close()       // the actors have reported their last attempts
		r.closeDeadLetters(ctx) // write what is waiting (in-memory outbox), then stop the dead-letter actor
		r.system.Shutdown()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("closing router: %w", ctx.Err())
	}
	if again {
		return nil
	}
	r.closeEgress()
	if r.ownsStore {
		return r.store.Close()
	}
	return nil
}
