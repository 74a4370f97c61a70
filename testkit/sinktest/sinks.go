package sinktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// SinkSuite describes a [sinks.Sink] implementation to [RunSink].
type SinkSuite struct {
	// New returns a sink delivering to a fresh, working destination. Each subtest calls it
	// once; tear the destination down with t.Cleanup. Required.
	New func(t *testing.T) *Destination
	// Failures returns sinks whose destinations fail, each with the outcome its Deliver must
	// report (a refused connection is SocketError, an unknown queue NotFound, ...). Nil or
	// empty skips the classification check, which a sink that cannot fail should say why.
	Failures func(t *testing.T) []Failure
}

// Destination is one destination of the sink under test.
type Destination struct {
	// Sink delivers to the destination. Required.
	Sink sinks.Sink
	// Received waits until the destination has accepted at least n events and returns
	// everything it has accepted, in arrival order. It fails the test when they do not arrive
	// in reasonable time. Required.
	Received func(t *testing.T, n int) []Received
	// Stall makes the destination hold every request from now on without answering, and
	// returns a channel that is closed once it holds one. Nil skips the check that Deliver
	// returns when its context ends mid-request.
	Stall func(t *testing.T) <-chan struct{}
	// Headers says that Received carries each event's delivery headers (aeg-*, custom).
	Headers bool
	// Background names functions, as a goroutine's stack shows them
	// ("github.com/nats-io/nats.go/jetstream.(*pullConsumer).fetch.func1"), whose goroutines
	// the destination itself starts and ends while it runs — a consumer's fetch loop — and
	// which the leak check does not count as the sink's.
	Background []string
}

// Received is one event as the destination got it.
type Received struct {
	// ID is the event id.
	ID string
	// Header holds the delivery headers (or message metadata) that came with the event, with
	// lower-case keys; nil when the destination carries none.
	Header map[string]string
}

// Failure is a sink pointed at a failing destination.
type Failure struct {
	// Name describes the failure ("connection refused").
	Name string
	// Sink delivers to the failing destination.
	Sink sinks.Sink
	// Outcome is what [sinks.AsDeliveryError] must make of Deliver's error.
	Outcome schemas.Outcome
}

// Names the suite's batches carry.
const (
	suiteTopic        = "sinktest"
	suiteSubscription = "sinktest-sub"
	suiteTopicID      = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/egrid/providers/Microsoft.EventGrid/topics/sinktest"
	customHeader      = "x-sinktest"
)

// guard bounds every wait of the suite: reaching it is a failure (a hang), not a timing
// assertion.
const guard = 30 * time.Second

// RunSink runs the [sinks.Sink] conformance suite: single deliveries in the Event Grid and
// CloudEvents schemas, a batch, a body the sink no longer reads once Deliver returns, error
// classification, a cancelled or expired context (before
// and during a request), concurrent use, an idempotent Close (for a [sinks.Closer]) and no
// goroutine left behind. Every sink egrid ships passes it: the webhook sink, [sinks.Func] and
// every broker sink.
func RunSink(t *testing.T, s SinkSuite) {
	t.Helper()
	if s.New == nil {
		t.Fatal("sinktest.RunSink: SinkSuite.New is nil")
	}

	t.Run("SingleEventGridEvent", func(t *testing.T) {
		d := s.New(t)
		evs := EventGridEvents(t, "single", 1)
		if err := d.Sink.Deliver(ctxFor(t), NewBatch(t, schemas.EventGrid, schemas.EventGrid, evs)); err != nil {
			t.Fatalf("Deliver to a working destination: %v", err)
		}
		got := d.Received(t, 1)
		requireIDs(t, got, evs)
		if d.Headers {
			requireHeaders(t, got[0], evs[0], schemas.EventGrid)
		}
	})

	t.Run("SingleCloudEvent", func(t *testing.T) {
		d := s.New(t)
		evs := CloudEvents(t, "ce", 1)
		if err := d.Sink.Deliver(ctxFor(t), NewBatch(t, schemas.CloudEvents, schemas.CloudEvents, evs)); err != nil {
			t.Fatalf("Deliver of a CloudEvent: %v", err)
		}
		got := d.Received(t, 1)
		requireIDs(t, got, evs)
		if d.Headers {
			requireHeaders(t, got[0], evs[0], schemas.CloudEvents)
		}
	})

	t.Run("Batch", func(t *testing.T) {
		d := s.New(t)
		evs := EventGridEvents(t, "batch", 5)
		if err := d.Sink.Deliver(ctxFor(t), NewBatch(t, schemas.EventGrid, schemas.CloudEvents, evs)); err != nil {
			t.Fatalf("Deliver of a batch of %d: %v", len(evs), err)
		}
		requireIDs(t, d.Received(t, len(evs)), evs)
	})

	// The subscription actor hands a batch's body buffer back to a pool for the next attempt
	// as soon as Deliver returns (sinks.Sink: Deliver keeps no buffer of the batch).
	t.Run("BodyNotReadAfterDeliver", func(t *testing.T) {
		d := s.New(t)
		evs := EventGridEvents(t, "reused", 3)
		b := NewBatch(t, schemas.EventGrid, schemas.EventGrid, evs)
		if err := d.Sink.Deliver(ctxFor(t), b); err != nil {
			t.Fatalf("Deliver of a batch of %d: %v", len(evs), err)
		}
		for i := range b.Body {
			b.Body[i] = 'x'
		}
		requireIDs(t, d.Received(t, len(evs)), evs)
	})

	t.Run("ErrorClassification", func(t *testing.T) {
		if s.Failures == nil {
			t.Skip("the suite names no failing destination")
		}
		fs := s.Failures(t)
		if len(fs) == 0 {
			t.Skip("the suite names no failing destination")
		}
		for _, f := range fs {
			t.Run(f.Name, func(t *testing.T) {
				err := f.Sink.Deliver(ctxFor(t), NewBatch(t, schemas.EventGrid, schemas.EventGrid, EventGridEvents(t, "fail", 1)))
				if err == nil {
					t.Fatalf("Deliver to a failing destination (%s) returned nil; want %s", f.Name, f.Outcome)
				}
				if got := sinks.AsDeliveryError(err).Outcome; got != f.Outcome {
					t.Fatalf("Deliver to a failing destination (%s): outcome %s (%v); want %s", f.Name, got, err, f.Outcome)
				}
				if err.Error() == "" {
					t.Error("the error says nothing")
				}
			})
		}
	})

	t.Run("DoneContext", func(t *testing.T) {
		d := s.New(t)
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		err := d.Sink.Deliver(cancelled, NewBatch(t, schemas.EventGrid, schemas.EventGrid, EventGridEvents(t, "cancelled", 1)))
		if got := outcomeOf(err); got != schemas.Canceled {
			t.Errorf("Deliver with a cancelled context: %v (outcome %s); want Canceled", err, got)
		}
		expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel2()
		err = d.Sink.Deliver(expired, NewBatch(t, schemas.EventGrid, schemas.EventGrid, EventGridEvents(t, "expired", 1)))
		if got := outcomeOf(err); got != schemas.TimedOut {
			t.Errorf("Deliver with an expired context: %v (outcome %s); want TimedOut", err, got)
		}
	})

	t.Run("CancelInFlight", func(t *testing.T) {
		d := s.New(t)
		if d.Stall == nil {
			t.Skip("the destination cannot stall")
		}
		// Warm up first, so the held request is a delivery and not a connection attempt.
		if err := d.Sink.Deliver(ctxFor(t), NewBatch(t, schemas.EventGrid, schemas.EventGrid, EventGridEvents(t, "warm", 1))); err != nil {
			t.Fatalf("warm-up Deliver: %v", err)
		}
		held := d.Stall(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		result := make(chan error, 1)
		b := NewBatch(t, schemas.EventGrid, schemas.EventGrid, EventGridEvents(t, "held", 1))
		go func() { result <- d.Sink.Deliver(ctx, b) }()
		select {
		case <-held:
		case err := <-result:
			t.Fatalf("Deliver to a stalled destination returned before its context ended: %v", err)
		case <-time.After(guard):
			t.Fatalf("the destination held no request within %s of a Deliver", guard)
		}
		cancel()
		select {
		case err := <-result:
			if got := outcomeOf(err); got != schemas.Canceled {
				t.Errorf("Deliver whose context was cancelled mid-request: %v (outcome %s); want Canceled", err, got)
			}
		case <-time.After(guard):
			t.Fatalf("Deliver did not return within %s of its context being cancelled", guard)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		d := s.New(t)
		const workers, each = 8, 4
		evs := EventGridEvents(t, "conc", workers*each)
		batches := make([]*sinks.Batch, len(evs))
		for i, ev := range evs {
			batches[i] = NewBatch(t, schemas.EventGrid, schemas.EventGrid, []*schemas.Event{ev})
		}
		ctx := ctxFor(t)
		var wg sync.WaitGroup
		errs := make(chan error, len(evs))
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					b := batches[w*each+i]
					if err := d.Sink.Deliver(ctx, b); err != nil {
						errs <- fmt.Errorf("event %s: %w", b.Events[0].ID, err)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent Deliver: %v", err)
		}
		requireIDs(t, d.Received(t, len(evs)), evs)
	})

	t.Run("CloseIdempotent", func(t *testing.T) {
		d := s.New(t)
		c, ok := d.Sink.(sinks.Closer)
		if !ok {
			t.Skip("the sink holds no resources (not a sinks.Closer)")
		}
		if err := d.Sink.Deliver(ctxFor(t), NewBatch(t, schemas.EventGrid, schemas.EventGrid, EventGridEvents(t, "close", 1))); err != nil {
			t.Fatalf("Deliver before Close: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("first Close: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})

	t.Run("NoGoroutineLeak", func(t *testing.T) {
		d := s.New(t)
		if err := d.Sink.Deliver(ctxFor(t), NewBatch(t, schemas.EventGrid, schemas.EventGrid, EventGridEvents(t, "leak-warm", 1))); err != nil {
			t.Fatalf("warm-up Deliver: %v", err)
		}
		d.Received(t, 1)
		// Everything alive now — the destination, the connections the warm-up opened, other
		// tests' goroutines — is not the deliveries' to stop.
		ignore := []goleak.Option{goleak.IgnoreCurrent()}
		for _, f := range d.Background {
			ignore = append(ignore, goleak.IgnoreAnyFunction(f))
		}
		evs := EventGridEvents(t, "leak", 10)
		for _, ev := range evs {
			if err := d.Sink.Deliver(ctxFor(t), NewBatch(t, schemas.EventGrid, schemas.EventGrid, []*schemas.Event{ev})); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
		}
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		_ = d.Sink.Deliver(cancelled, NewBatch(t, schemas.EventGrid, schemas.EventGrid, EventGridEvents(t, "leak-cancelled", 1)))
		d.Received(t, 1+len(evs))
		// Find retries for a while (with back-off) before it reports goroutines that are still
		// on their way out.
		if err := goleak.Find(ignore...); err != nil {
			t.Fatalf("goroutines started by %d deliveries are still running: %v", len(evs)+1, err)
		}
	})
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return ctx
}

func outcomeOf(err error) schemas.Outcome {
	if err == nil {
		return schemas.Delivered
	}
	return sinks.AsDeliveryError(err).Outcome
}

// EventGridEvents returns n Event Grid events with ids <prefix>-<random>-<i>, as a topic
// would hold them.
func EventGridEvents(t testing.TB, prefix string, n int) []*schemas.Event {
	t.Helper()
	run := randomID()
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"%s-%s-%d","subject":"/sinktest/%d","eventType":"Sinktest.Event","eventTime":"2026-01-02T03:04:05Z","dataVersion":"1.0","data":{"n":%d}}`, prefix, run, i, i, i)
	}
	b.WriteByte(']')
	evs, err := schemas.DecodeEventGrid([]byte(b.String()), suiteTopicID, schemas.ClassicLimits)
	if err != nil {
		t.Fatalf("building events: %v", err)
	}
	return evs
}

// CloudEvents returns n CloudEvents with ids <prefix>-<random>-<i>, each carrying the
// distributed-tracing extension (a traceparent and a tracestate), which deliveries forward as
// headers.
func CloudEvents(t testing.TB, prefix string, n int) []*schemas.Event {
	t.Helper()
	run := randomID()
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"specversion":"1.0","id":"%s-%s-%d","source":"/sinktest","type":"Sinktest.Event","time":"2026-01-02T03:04:05Z","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"congo=t61rcWkgMzE, rojo=00f067aa0ba902b7","data":{"n":%d}}`, prefix, run, i, i)
	}
	b.WriteByte(']')
	evs, err := schemas.DecodeCloudEvents([]byte(b.String()), schemas.ClassicLimits)
	if err != nil {
		t.Fatalf("building CloudEvents: %v", err)
	}
	return evs
}

var idMu sync.Mutex
var idN int

// randomID distinguishes the events of one call from every other call's, also across runs
// against a broker that keeps old messages.
func randomID() string {
	idMu.Lock()
	defer idMu.Unlock()
	idN++
	return fmt.Sprintf("%x%d", time.Now().UnixNano(), idN)
}

// NewBatch encodes events, published in schema in, as one delivery in schema out, the way a
// subscription does: delivery count 2 and one custom delivery header (x-sinktest: yes).
func NewBatch(t testing.TB, in, out schemas.Schema, events []*schemas.Event) *sinks.Batch {
	t.Helper()
	body, ct, err := schemas.EncodeBatch(nil, in, out, suiteTopicID, events)
	if err != nil {
		t.Fatalf("encoding a batch: %v", err)
	}
	return &sinks.Batch{
		Topic: suiteTopic, Subscription: suiteSubscription, Schema: out,
		Body: body, ContentType: ct, Events: events, DeliveryCount: 2,
		Headers:     map[string]string{customHeader: "yes"},
		InputSchema: in, TopicID: suiteTopicID,
	}
}

func requireIDs(t *testing.T, got []Received, want []*schemas.Event) {
	t.Helper()
	ids := make([]string, len(got))
	for i, r := range got {
		ids[i] = r.ID
	}
	wantIDs := make([]string, len(want))
	for i, e := range want {
		wantIDs[i] = e.ID
	}
	slices.Sort(ids)
	slices.Sort(wantIDs)
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("the destination received events %v; want exactly %v", ids, wantIDs)
	}
}

func requireHeaders(t *testing.T, r Received, ev *schemas.Event, out schemas.Schema) {
	t.Helper()
	want := map[string]string{
		schemas.HeaderEventType:        schemas.EventTypeNotification,
		schemas.HeaderSubscriptionName: strings.ToUpper(suiteSubscription),
		schemas.HeaderDeliveryCount:    "2",
		schemas.HeaderMetadataVersion:  schemas.MetadataVersion(out),
		schemas.HeaderOutputEventID:    ev.ID,
		customHeader:                   "yes",
	}
	if out == schemas.EventGrid {
		want[schemas.HeaderDataVersion] = ev.DataVersion
	}
	if ev.Traceparent != "" {
		want[schemas.HeaderTraceparent] = ev.Traceparent
		want[schemas.HeaderTracestate] = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7" // CloudEvents' own, without its space
	}
	var errs []error
	for k, v := range want {
		if got, ok := r.Header[k]; !ok || got != v {
			errs = append(errs, fmt.Errorf("%s = %q, want %q", k, got, v))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("delivery headers of event %s:\n%v\n(all: %v)", ev.ID, err, r.Header)
	}
}

// Recorder collects what a test destination receives, for [Destination.Received]. It is
// safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	got  []Received
	more chan struct{} // closed and replaced on every Add
}

// Add records events the destination accepted.
func (r *Recorder) Add(rs ...Received) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rs...)
	if r.more != nil {
		close(r.more)
		r.more = nil
	}
}

// Wait waits until at least n events were added and returns them all; it fails the test when
// they do not arrive within 30 s.
func (r *Recorder) Wait(t *testing.T, n int) []Received {
	t.Helper()
	timeout := time.NewTimer(guard)
	defer timeout.Stop()
	for {
		r.mu.Lock()
		if len(r.got) >= n {
			out := slices.Clone(r.got)
			r.mu.Unlock()
			return out
		}
		if r.more == nil {
			r.more = make(chan struct{})
		}
		more, have := r.more, len(r.got)
		r.mu.Unlock()
		select {
		case <-more:
		case <-timeout.C:
			t.Fatalf("the destination received %d events within %s; want %d", have, guard, n)
		}
	}
}
