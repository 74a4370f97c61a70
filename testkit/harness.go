package testkit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
)

// Harness is a router running in virtual time, with scripted endpoints and in-memory dead
// letters. Its methods fail the test on errors; use [Harness.Router] for the raw API.
type Harness struct {
	t         testing.TB
	start     time.Time
	cfg       router.Config
	transport *Transport
	store     store.Store
	router    *router.Router
	sinks     map[string]sinks.Sink
	objects   *ObjectStore       // the dead-letter objects, in memory
	dlStore   *FaultyObjectStore // the dead-letter store the router writes to (objects, faults injectable)

	mu          sync.Mutex
	endpoints   map[string]*Endpoint
	deadLetters map[string]*DeadLetterBox
	timelines   map[string][]*router.AttemptRecord
	ids         int
	system      *actor.ActorSystem
}

// Option configures a harness.
type Option func(*options)

type options struct {
	cfg      router.Config
	noJitter bool
	store    store.Store
	sinks    map[string]sinks.Sink
}

// WithConfig sets the router config (InsecureDev and SkipEndpointValidation are always on in
// the harness).
func WithConfig(cfg router.Config) Option { return func(o *options) { o.cfg = cfg } }

// WithoutJitter turns off the 0-10 % retry jitter (router.Config.NoJitter), whatever
// [WithConfig] says, so retries happen exactly on the schedule: what golden delivery timelines
// need.
func WithoutJitter() Option { return func(o *options) { o.noJitter = true } }

// WithStore runs the router on st instead of a new in-memory store.
func WithStore(st store.Store) Option { return func(o *options) { o.store = st } }

// WithSink registers a Go sink under name (for router.SinkDestination(name)).
func WithSink(name string, s sinks.Sink) Option {
	return func(o *options) {
		if o.sinks == nil {
			o.sinks = make(map[string]sinks.Sink)
		}
		o.sinks[name] = s
	}
}

// Run runs fn with a fresh harness inside a synctest bubble: everything the router does happens
// in virtual time. The router is closed when fn returns.
func Run(t *testing.T, fn func(t *testing.T, h *Harness), opts ...Option) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		h := New(t, opts...)
		defer h.Close()
		fn(t, h)
	})
}

// New starts a harness in the calling test's bubble (or in real time outside one). Most tests
// use [Run]; New is for tests that manage the bubble themselves. Close it when done.
func New(t testing.TB, opts ...Option) *Harness {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	h := &Harness{
		t: t, start: time.Now(), transport: NewTransport(), store: o.store, sinks: o.sinks,
		endpoints: make(map[string]*Endpoint), deadLetters: make(map[string]*DeadLetterBox),
		timelines: make(map[string][]*router.AttemptRecord),
	}
	if h.store == nil {
		h.store = store.NewMemory()
	}
	h.objects = NewObjectStore()
	h.dlStore = NewFaultyObjectStore(h.objects)
	cfg := o.cfg
	cfg.InsecureDev = true
	// The kit's scripted endpoints count every request and do not implement the validation
	// handshake (SPEC §2.5); router tests cover the handshake.
	cfg.SkipEndpointValidation = true
	cfg.NoJitter = cfg.NoJitter || o.noJitter
	h.cfg = cfg
	r, err := router.New(cfg, router.Deps{
		Store:           h.store,
		HTTPClient:      &http.Client{Transport: h.transport},
		Sinks:           o.sinks,
		DeadLetterStore: h.dlStore,
		OnDeadLetter:    h.deadLettered,
		OnAttempt:       h.attempted,
	})
	if err != nil {
		t.Fatalf("starting the router: %v", err)
	}
	h.router = r
	return h
}

// Close closes the router. It is idempotent.
func (h *Harness) Close() {
	h.mu.Lock()
	sys := h.system
	h.mu.Unlock()
	if sys != nil {
		sys.Shutdown()
	}
	if err := h.router.Close(context.Background()); err != nil {
		h.t.Errorf("closing the router: %v", err)
	}
}

// Restart closes the router and starts a new one with the same config on the same store: what
// a process restart does. Endpoints, dead letters and timelines are kept.
func (h *Harness) Restart() {
	h.t.Helper()
	if err := h.router.Close(context.Background()); err != nil {
		h.t.Fatalf("closing the router: %v", err)
	}
	r, err := router.New(h.cfg, router.Deps{
		Store: h.store, HTTPClient: &http.Client{Transport: h.transport}, Sinks: h.sinks,
		DeadLetterStore: h.dlStore, OnDeadLetter: h.deadLettered, OnAttempt: h.attempted,
	})
	if err != nil {
		h.t.Fatalf("restarting the router: %v", err)
	}
	h.router = r
}

// Router returns the router under test.
func (h *Harness) Router() *router.Router { return h.router }

// Transport returns the in-memory transport endpoints are served by.
func (h *Harness) Transport() *Transport { return h.transport }

// Metrics returns a snapshot of the router's counters.
func (h *Harness) Metrics() metrics.Snapshot { return h.router.Metrics().Snapshot() }

// Elapsed is the virtual time since the harness started.
func (h *Harness) Elapsed() time.Duration { return time.Since(h.start) }

// Offset returns how long after the harness started t is: the "+offset" of timelines.
func (h *Harness) Offset(t time.Time) time.Duration { return t.Sub(h.start) }

// Settle waits until every goroutine of the bubble is blocked: everything that can happen
// without the clock moving has happened.
func (h *Harness) Settle() { synctest.Wait() }

// Advance moves virtual time forward by d, letting everything due in between happen, and
// settles.
func (h *Harness) Advance(d time.Duration) {
	synctest.Wait()
	time.Sleep(d)
	synctest.Wait()
}

// Endpoint creates a scripted endpoint named name (host name.test). With no behavior it
// answers 200 to everything.
func (h *Harness) Endpoint(name string, behavior ...Behavior) *Endpoint {
	b := Always(http.StatusOK)
	if len(behavior) > 0 {
		b = behavior[0]
	}
	e := &Endpoint{name: name, h: h, behavior: b}
	h.mu.Lock()
	h.endpoints[name] = e
	h.mu.Unlock()
	h.transport.Handle(name+".test", e)
	return e
}

// CreateTopic creates a topic (Event Grid schema unless spec says otherwise).
func (h *Harness) CreateTopic(name string, spec ...router.TopicSpec) {
	h.t.Helper()
	var s router.TopicSpec
	if len(spec) > 0 {
		s = spec[0]
	}
	if _, err := h.router.CreateTopic(context.Background(), name, s); err != nil {
		h.t.Fatalf("creating topic %s: %v", name, err)
	}
}

// CreateSubscription subscribes endpoint e to topic (creating the topic if needed) with the
// retry policy, and a dead-letter destination so that ended events land in
// [Harness.DeadLetters]. Use [Harness.Subscribe] for full control.
func (h *Harness) CreateSubscription(topic, name string, e *Endpoint, policy router.RetryPolicy) {
	h.t.Helper()
	spec := router.SubscriptionSpec{Destination: router.WebHook(e.URL()), RetryPolicy: policy}
	spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
	spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
	h.Subscribe(topic, name, spec)
}

// Subscribe creates a subscription from a full spec, creating the topic if needed.
func (h *Harness) Subscribe(topic, name string, spec router.SubscriptionSpec) {
	h.t.Helper()
	if _, err := h.router.Topic(topic); errors.Is(err, router.ErrTopicNotFound) {
		h.CreateTopic(topic)
	}
	if err := h.router.CreateSubscription(context.Background(), topic, name, spec); err != nil {
		h.t.Fatalf("creating subscription %s: %v", name, err)
	}
}

// Publish publishes events to topic and fails the test if it is refused.
func (h *Harness) Publish(topic string, events ...any) {
	h.t.Helper()
	if err := h.router.Publish(context.Background(), topic, events...); err != nil {
		h.t.Fatalf("publishing to %s: %v", topic, err)
	}
}

// nextID returns a fresh event id.
func (h *Harness) nextID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids++
	return fmt.Sprintf("evt-%d", h.ids)
}

func (h *Harness) deadLettered(d *router.DeadLetter) {
	h.box(d.Subscription).add(d)
}

// DeadLetters returns the dead letters of a subscription.
func (h *Harness) DeadLetters(subscription string) *DeadLetterBox { return h.box(subscription) }

func (h *Harness) box(sub string) *DeadLetterBox {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.deadLetters[sub]
	if !ok {
		b = &DeadLetterBox{name: sub}
		h.deadLetters[sub] = b
	}
	return b
}

func (h *Harness) attempted(a *router.AttemptRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timelines[a.Subscription] = append(h.timelines[a.Subscription], a)
}

// AttemptRecords returns the records of a subscription's attempts (and of its events that
// ended without an attempt) so far, in the order they happened.
func (h *Harness) AttemptRecords(subscription string) []*router.AttemptRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*router.AttemptRecord(nil), h.timelines[subscription]...)
}

// Timeline renders a subscription's delivery history, one line per attempt and event, in the
// format of the golden timeline files:
//
//	+10s         evt-1    #2   500  GenericError    retry at +40s (in 30s)
//	+46m40s      evt-1    -    -    -               deadletter TimeToLiveExceeded
//
// The columns are: the virtual offset since the harness started at which the attempt began
// (or the event ended without one); the event id; the event's attempt number ("-" when the
// event ended without an attempt); the HTTP status ("-" without one); the outcome ("-" for an
// event whose time to live had passed when it came due, Probation for one ended by a
// client-error probation); and the decision: "delivered", "retry at +<offset> (in <delay
// after the attempt ended>)", or "deadletter <reason>" / "drop <reason>". An attempt that was
// the probe after a probation ends with "[probe]".
func (h *Harness) Timeline(subscription string) string {
	var b strings.Builder
	for _, a := range h.AttemptRecords(subscription) {
		status, outcome := "-", "-"
		if a.StatusCode != 0 {
			status = fmt.Sprint(a.StatusCode)
		}
		if a.Outcome != 0 {
			outcome = a.Outcome.String()
		}
		probe := ""
		if a.Probe {
			probe = "  [probe]"
		}
		for i, id := range a.EventIDs {
			attempt := "-"
			if !a.NoAttempt && i < len(a.Attempts) {
				attempt = fmt.Sprintf("#%d", a.Attempts[i])
			}
			d := a.Decisions[i]
			decision := "delivered"
			switch {
			case d.Ends():
				decision = fmt.Sprintf("%s %s", strings.ToLower(d.Action.String()), d.Reason)
			case !d.At.IsZero():
				decision = fmt.Sprintf("retry at +%s (in %s)", fmtOffset(d.At.Sub(h.start)), fmtOffset(d.At.Sub(a.Time.Add(a.Duration))))
			}
			fmt.Fprintf(&b, "%-12s %-8s %-4s %-4s %-15s %s%s\n", "+"+fmtOffset(a.Time.Sub(h.start)), id, attempt, status, outcome, decision, probe)
		}
	}
	return b.String()
}

func fmtOffset(d time.Duration) string { return d.Round(time.Millisecond).String() }

// DeadLetterBox collects one subscription's dead-lettered events.
type DeadLetterBox struct {
	name    string
	mu      sync.Mutex
	records []*router.DeadLetter
}

func (b *DeadLetterBox) add(d *router.DeadLetter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.records = append(b.records, d)
}

// Records returns the dead letters so far.
func (b *DeadLetterBox) Records() []*router.DeadLetter {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*router.DeadLetter(nil), b.records...)
}

// RequireNone fails the test if anything was dead-lettered.
func (b *DeadLetterBox) RequireNone(t testing.TB) {
	t.Helper()
	if recs := b.Records(); len(recs) != 0 {
		t.Fatalf("subscription %s dead-lettered %d events, want none (first: %s, %s)", b.name, len(recs), recs[0].Event.ID, recs[0].Reason)
	}
}

// RequireCount fails the test unless exactly n events were dead-lettered.
func (b *DeadLetterBox) RequireCount(t testing.TB, n int) {
	t.Helper()
	if got := len(b.Records()); got != n {
		t.Fatalf("subscription %s dead-lettered %d events, want %d", b.name, got, n)
	}
}

// Advance moves the virtual time of the calling test's synctest bubble forward by d, letting
// everything due in between happen, and settles: [Harness.Advance] for tests that run their
// own bubble without a harness.
func Advance(d time.Duration) {
	synctest.Wait()
	time.Sleep(d)
	synctest.Wait()
}
