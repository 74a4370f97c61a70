package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

var errInjected = errors.New("injected store failure")

// watchedStore wraps a store: it checks every Trim against the subscriptions' cursors and
// records it, and lets a test hold or fail Append.
type watchedStore struct {
	store.Store
	t *testing.T

	mu    sync.Mutex
	trims []trimCall
	// beforeAppend, when set, runs before every Append; an error fails the Append without
	// touching the journal.
	beforeAppend func() error
	// hideCursors makes Cursors list no subscription, as a JetStream key watch that ended
	// early would.
	hideCursors bool
	// holdsNone names subscriptions that hold no events (their validation failed): a trim
	// may pass their cursors.
	holdsNone map[string]bool
}

func (s *watchedStore) Cursors(ctx context.Context, topic string) (map[string]uint64, error) {
	s.mu.Lock()
	hide := s.hideCursors
	s.mu.Unlock()
	if hide {
		return map[string]uint64{}, nil
	}
	return s.Store.Cursors(ctx, topic)
}

type trimCall struct{ through, last uint64 }

func (s *watchedStore) Append(ctx context.Context, topic string, publishTime time.Time, events []*schemas.Event) (uint64, error) {
	s.mu.Lock()
	hook := s.beforeAppend
	s.mu.Unlock()
	if hook != nil {
		if err := hook(); err != nil {
			return 0, err
		}
	}
	return s.Store.Append(ctx, topic, publishTime, events)
}

func (s *watchedStore) setBeforeAppend(hook func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeAppend = hook
}

// Trim fails the test when through is past LastSeq or past any subscription's cursor: the
// router must never trim what a subscription has not settled.
func (s *watchedStore) Trim(ctx context.Context, topic string, through uint64) error {
	last, err := s.Store.LastSeq(ctx, topic)
	if err != nil {
		return err
	}
	cursors, err := s.Store.Cursors(ctx, topic)
	if err != nil {
		return err
	}
	if through > last {
		s.t.Errorf("Trim(%s, %d) past LastSeq %d", topic, through, last)
	}
	s.mu.Lock()
	holdsNone := s.holdsNone
	s.mu.Unlock()
	for name, c := range cursors {
		if through > c && !holdsNone[name] {
			s.t.Errorf("Trim(%s, %d) past the cursor %d of subscription %s: it deletes events not yet settled", topic, through, c, name)
		}
	}
	s.mu.Lock()
	s.trims = append(s.trims, trimCall{through, last})
	s.mu.Unlock()
	return s.Store.Trim(ctx, topic, through)
}

func (s *watchedStore) trimCalls() []trimCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.trims)
}

// journal returns the sequence numbers left in a topic's journal.
func (s *watchedStore) journal(t *testing.T, topic string) []uint64 {
	t.Helper()
	entries, err := s.Read(t.Context(), topic, 0, 1<<20)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	seqs := make([]uint64, len(entries))
	for i, e := range entries {
		seqs[i] = e.Seq
	}
	return seqs
}

// recorder is a Go sink that records the ids it is given and succeeds, or, while held, waits
// until released (or its attempt is cancelled).
type recorder struct {
	mu   sync.Mutex
	ids  []string
	hold chan struct{} // nil: never held; closed: released
}

func (rc *recorder) Deliver(ctx context.Context, b *sinks.Batch) error {
	if rc.hold != nil {
		select {
		case <-rc.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, ev := range b.Events {
		rc.ids = append(rc.ids, ev.ID)
	}
	return nil
}

func (rc *recorder) delivered() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.ids)
}

// bubbleRouter starts a router on ws inside the calling synctest bubble with topic "orders"
// and the given Go sinks, each subscribed under its own name with a response timeout of 300 s.
// It closes the router when the test ends.
func bubbleRouter(t *testing.T, ws *watchedStore, subs map[string]sinks.Sink) *router.Router {
	t.Helper()
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{Store: ws, Sinks: subs})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if _, err := r.CreateTopic(t.Context(), "orders", router.TopicSpec{}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for name := range subs {
			if !yield(name) {
				return
			}
		}
	}) {
		spec := router.SubscriptionSpec{Destination: router.SinkDestination(name)}
		// A held attempt stays in flight longer than the tests sleep.
		spec.Destination.Properties.ResponseTimeoutInSeconds = 300
		if err := r.CreateSubscription(t.Context(), "orders", name, spec); err != nil {
			t.Fatalf("CreateSubscription(%s): %v", name, err)
		}
	}
	return r
}

// publishN publishes events prefix-0 … prefix-(n-1) in one request.
func publishN(t *testing.T, r *router.Router, prefix string, n int) {
	t.Helper()
	evs := make([]any, n)
	for i := range evs {
		evs[i] = json.RawMessage(egEvent(fmt.Sprintf("%s-%d", prefix, i)))
	}
	if err := r.Publish(t.Context(), "orders", evs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

func seqRange(from, through uint64) []uint64 {
	var out []uint64
	for s := from; s <= through; s++ {
		out = append(out, s)
	}
	return out
}

// The journal keeps an entry exactly as long as some subscription has not settled it
// (DESIGN.md §4). Time is virtual: sleeping TrimIdleMax lets the trimmer's idle timer run
// however far it has backed off.
func TestJournalIsTrimmed(t *testing.T) {
	t.Run("without subscriptions everything goes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ws := &watchedStore{Store: store.NewMemory(), t: t}
			r := bubbleRouter(t, ws, nil)
			publishN(t, r, "a", 6)
			publishN(t, r, "b", 4)
			testkit.Advance(router.TrimIdleMax)
			if got := ws.journal(t, "orders"); len(got) != 0 {
				t.Errorf("journal of a topic without subscriptions holds %v, want nothing", got)
			}
			if last, err := ws.LastSeq(t.Context(), "orders"); err != nil || last != 10 {
				t.Errorf("LastSeq = %d, %v; want 10 (trimming keeps the numbering)", last, err)
			}
		})
	})

	t.Run("delivered events go", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ws := &watchedStore{Store: store.NewMemory(), t: t}
			ok := &recorder{}
			r := bubbleRouter(t, ws, map[string]sinks.Sink{"healthy": ok})
			publishN(t, r, "a", 10)
			synctest.Wait()
			if got := len(ok.delivered()); got != 10 {
				t.Fatalf("delivered %d events, want 10", got)
			}
			testkit.Advance(router.TrimIdleMax)
			if got := ws.journal(t, "orders"); len(got) != 0 {
				t.Errorf("journal holds %v after every event was delivered, want nothing", got)
			}
		})
	})

	t.Run("unsettled events stay until their subscription is deleted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ws := &watchedStore{Store: store.NewMemory(), t: t}
			ok, held := &recorder{}, &recorder{hold: make(chan struct{})}
			r := bubbleRouter(t, ws, map[string]sinks.Sink{"healthy": ok, "held": held})
			publishN(t, r, "a", 10)
			synctest.Wait()
			testkit.Advance(router.TrimIdleMax)
			if got, want := ws.journal(t, "orders"), seqRange(1, 10); !slices.Equal(got, want) {
				t.Fatalf("journal holds %v while subscription held has 10 events in flight, want %v", got, want)
			}
			if got := len(ok.delivered()); got != 10 {
				t.Fatalf("ok got %d events, want 10", got)
			}
			// Deleting the subscription holding the journal back trims it at once: no time
			// passes after this point.
			if err := r.DeleteSubscription(t.Context(), "orders", "held"); err != nil {
				t.Fatalf("DeleteSubscription: %v", err)
			}
			synctest.Wait()
			if got := ws.journal(t, "orders"); len(got) != 0 {
				t.Errorf("journal holds %v after the subscription holding it was deleted, want nothing", got)
			}
		})
	})

	t.Run("a listing without a known subscription's cursor trims nothing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ws := &watchedStore{Store: store.NewMemory(), t: t}
			held := &recorder{hold: make(chan struct{})}
			r := bubbleRouter(t, ws, map[string]sinks.Sink{"held": held})
			publishN(t, r, "a", 10)
			synctest.Wait()
			ws.mu.Lock()
			ws.hideCursors = true
			ws.mu.Unlock()
			testkit.Advance(router.TrimIdleMax)
			if got, want := ws.journal(t, "orders"), seqRange(1, 10); !slices.Equal(got, want) {
				t.Fatalf("journal holds %v after a cursor listing that left subscription held out, want %v", got, want)
			}
			close(held.hold)
		})
	})

	t.Run("under load it trims in coarse steps", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const requests, perRequest = 100, 50
			ws := &watchedStore{Store: store.NewMemory(), t: t}
			ok := &recorder{}
			r := bubbleRouter(t, ws, map[string]sinks.Sink{"healthy": ok})
			for i := range requests {
				publishN(t, r, fmt.Sprint("r", i), perRequest)
				synctest.Wait() // deliveries keep up
			}
			during := ws.trimCalls()
			testkit.Advance(router.TrimIdleMax)
			trims := ws.trimCalls()
			t.Logf("trims (through, LastSeq): %v", trims)
			const total = requests * perRequest
			if len(during) < 2 {
				t.Errorf("%d trims while %d events were published and delivered, want several: publishing must trigger trims", len(during), total)
			}
			if max := total/router.TrimStep + 1; len(trims) > max {
				t.Errorf("%d trims for %d events, want at most %d (steps of at least %d)", len(trims), total, max, router.TrimStep)
			}
			var prev uint64
			for _, tc := range trims {
				if tc.through <= prev || (tc.through-prev < router.TrimStep && tc.through != tc.last) {
					t.Errorf("trim through %d after %d (LastSeq %d): want a step of at least %d or up to LastSeq", tc.through, prev, tc.last, router.TrimStep)
				}
				prev = tc.through
			}
			if len(trims) == 0 || trims[len(trims)-1].through != total {
				t.Errorf("last trim %v, want one through %d once everything was delivered", trims, total)
			}
			if got := len(ok.delivered()); got != total {
				t.Errorf("delivered %d events, want %d", got, total)
			}
		})
	})
}

// postEvents publishes ids to topic orders through the HTTP handler in-process.
func postEvents(h http.Handler, ids ...string) *httptest.ResponseRecorder {
	evs := make([]string, len(ids))
	for i, id := range ids {
		evs[i] = egEvent(id)
	}
	req := httptest.NewRequest(http.MethodPost, "/topics/orders/api/events?api-version=2018-01-01", strings.NewReader("["+strings.Join(evs, ",")+"]"))
	req.Host = "localhost" // --insecure-dev lets in requests without credentials from this machine only (router/devguard)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// A publish is answered only once the store's Append has returned, that is once its events
// are durable (SPEC §6; a disk store syncs before Append returns).
func TestPublishAnswersOnlyOnceDurable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ws := &watchedStore{Store: store.NewMemory(), t: t}
		ok := &recorder{}
		r := bubbleRouter(t, ws, map[string]sinks.Sink{"healthy": ok})
		entered, release := make(chan struct{}), make(chan struct{})
		ws.setBeforeAppend(func() error {
			close(entered)
			<-release
			return nil
		})
		var answered atomic.Bool
		var rec *httptest.ResponseRecorder
		done := make(chan struct{})
		go func() {
			defer close(done)
			rec = postEvents(httpapi.New(r), "e1")
			answered.Store(true)
		}()
		<-entered
		synctest.Wait() // everything that can happen before the append returns has happened
		if answered.Load() {
			t.Fatalf("the publish was answered while its append was still under way")
		}
		if got := ok.delivered(); len(got) != 0 {
			t.Fatalf("delivered %v before the append returned, want nothing", got)
		}
		close(release)
		<-done
		synctest.Wait()
		if rec.Code != http.StatusOK {
			t.Errorf("publish answered %d %s, want 200", rec.Code, rec.Body)
		}
		if got := ok.delivered(); !slices.Equal(got, []string{"e1"}) {
			t.Errorf("delivered %v, want [e1]", got)
		}
	})
}

// Publishes that arrive while an append is under way wait and go into the next append
// together, once the first is done; each is answered 200 after its own append, and each is
// delivered, the first first in the journal. Closing the router meanwhile refuses nothing already waiting: Close
// returns once the waiting publishes are in the journal and answered (group commit, SPEC §6).
func TestWaitingPublishesShareTheNextAppend(t *testing.T) {
	for _, closing := range []bool{false, true} {
		t.Run(fmt.Sprintf("closing=%v", closing), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ws := &watchedStore{Store: store.NewMemory(), t: t}
				ok := &recorder{}
				r := bubbleRouter(t, ws, map[string]sinks.Sink{"healthy": ok})
				var appends atomic.Int32
				entered, release := make(chan struct{}), make(chan struct{})
				ws.setBeforeAppend(func() error {
					if appends.Add(1) == 1 {
						close(entered)
						<-release
					}
					return nil
				})
				h := httpapi.New(r)
				ids := []string{"first", "w1", "w2", "w3", "w4"}
				codes := make([]atomic.Int32, len(ids))
				var wg sync.WaitGroup
				wg.Go(func() { codes[0].Store(int32(postEvents(h, ids[0]).Code)) })
				<-entered
				for i := 1; i < len(ids); i++ {
					wg.Go(func() { codes[i].Store(int32(postEvents(h, ids[i]).Code)) })
				}
				closed := make(chan error, 1)
				if closing {
					synctest.Wait()
					go func() { closed <- r.Close(context.Background()) }()
				}
				synctest.Wait() // everything that can happen before the first append returns has
				for i := range ids {
					if c := codes[i].Load(); c != 0 {
						t.Errorf("%s answered %d while the first append was under way", ids[i], c)
					}
				}
				select {
				case err := <-closed:
					t.Fatalf("Close returned (%v) while publishes waited for their append", err)
				default:
				}
				close(release)
				wg.Wait()
				if closing {
					if err := <-closed; err != nil {
						t.Errorf("Close: %v", err)
					}
				}
				synctest.Wait()
				for i := range ids {
					if c := codes[i].Load(); c != http.StatusOK {
						t.Errorf("%s answered %d, want 200", ids[i], c)
					}
				}
				if n := appends.Load(); n != 2 {
					t.Errorf("%d appends, want 2: the first, then the four that waited, together", n)
				}
				if last, err := ws.LastSeq(context.Background(), "orders"); err != nil || last != uint64(len(ids)) {
					t.Errorf("LastSeq = %d, %v; want %d", last, err, len(ids))
				}
				entries, err := ws.Read(context.Background(), "orders", 1, len(ids)+1)
				if err != nil || len(entries) != len(ids) || entries[0].Event.ID != "first" {
					t.Fatalf("journal %v (%v), want first and then the other four", entries, err)
				}
				if closing {
					return // the router stopped delivering
				}
				if got := ok.delivered(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(ids))) {
					t.Errorf("delivered %v, want each of %v once", got, ids)
				}
			})
		})
	}
}

// A publish whose append fails is answered 503 (HTTP) or ErrUnavailable (Go) and nothing of
// it is accepted: no event of it is delivered, and what is published afterwards is
// (SPEC §1.1, §6).
func TestFailedAppendAcceptsNothing(t *testing.T) {
	tests := []struct {
		name string
		// publish publishes the failing request(s) and checks their answers.
		publish func(t *testing.T, r *router.Router, ws *watchedStore) (ids []string)
	}{
		{
			name: "HTTP",
			publish: func(t *testing.T, r *router.Router, ws *watchedStore) []string {
				rec := postEvents(httpapi.New(r), "bad-1", "bad-2")
				checkUnavailable(t, rec)
				return []string{"bad-1", "bad-2"}
			},
		},
		{
			name: "Go",
			publish: func(t *testing.T, r *router.Router, ws *watchedStore) []string {
				err := r.Publish(t.Context(), "orders", json.RawMessage(egEvent("bad-1")))
				if !errors.Is(err, router.ErrUnavailable) || !errors.Is(err, errInjected) {
					t.Errorf("Publish while the store fails: err = %v, want one matching router.ErrUnavailable and the cause", err)
				}
				return []string{"bad-1"}
			},
		},
		{
			name: "concurrent requests sharing one append",
			publish: func(t *testing.T, r *router.Router, ws *watchedStore) []string {
				entered, release := make(chan struct{}, 1), make(chan struct{})
				ws.setBeforeAppend(func() error {
					select {
					case entered <- struct{}{}:
					default:
					}
					<-release
					return errInjected
				})
				ids := []string{"bad-1", "bad-2", "bad-3"}
				recs := make([]*httptest.ResponseRecorder, len(ids))
				var wg sync.WaitGroup
				wg.Go(func() { recs[0] = postEvents(httpapi.New(r), ids[0]) })
				<-entered // the first append is under way; the next two wait and go together
				for i := 1; i < len(ids); i++ {
					wg.Go(func() { recs[i] = postEvents(httpapi.New(r), ids[i]) })
				}
				synctest.Wait()
				close(release)
				wg.Wait()
				for _, rec := range recs {
					checkUnavailable(t, rec)
				}
				return ids
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ws := &watchedStore{Store: store.NewMemory(), t: t}
				ok := &recorder{}
				r := bubbleRouter(t, ws, map[string]sinks.Sink{"healthy": ok})
				ws.setBeforeAppend(func() error { return errInjected })
				bad := tc.publish(t, r, ws)
				ws.setBeforeAppend(nil)
				if rec := postEvents(httpapi.New(r), "good"); rec.Code != http.StatusOK {
					t.Fatalf("publish after the store recovered: %d %s", rec.Code, rec.Body)
				}
				synctest.Wait()
				if got := ok.delivered(); !slices.Equal(got, []string{"good"}) {
					t.Errorf("delivered %v, want only [good]: none of the refused %v", got, bad)
				}
				if last, err := ws.LastSeq(t.Context(), "orders"); err != nil || last != 1 {
					t.Errorf("LastSeq = %d, %v; want 1: the refused events are not in the journal", last, err)
				}
			})
		})
	}
}

func checkUnavailable(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
		!strings.Contains(rec.Body.String(), "ServiceUnavailable") {
		t.Errorf("publish while the store fails: %d, Retry-After %q, body %s; want 503 with Retry-After and code ServiceUnavailable",
			rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
}

// arrivalAt is one delivery attempt a Go sink saw.
type arrivalAt struct {
	at    time.Time
	count int
	id    string
}

// After a restart on the same disk store, topics, subscriptions, cursors and parked retries
// are back: each parked event is attempted again no sooner than its stored due time, with
// the delivery count it had reached, and delivery goes on from the cursor (SPEC §6).
func TestRestartKeepsRetrySchedule(t *testing.T) {
	const timeScale = 20 // the first retry of a 500 comes 10 s / 20 = 500 ms later
	ctx := t.Context()
	dir := t.TempDir()
	arrivals := make(chan arrivalAt, 100)
	var failing atomic.Bool
	failing.Store(true)
	sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		for _, ev := range b.Events {
			arrivals <- arrivalAt{time.Now(), b.DeliveryCount, ev.ID}
		}
		if failing.Load() {
			return &sinks.DeliveryError{Outcome: schemas.GenericError, StatusCode: 500}
		}
		return nil
	})
	records := make(chan *router.AttemptRecord, 100)
	start := func() (*router.Router, *disk.Store) {
		t.Helper()
		st, err := disk.Open(dir, disk.Options{})
		if err != nil {
			t.Fatalf("disk.Open: %v", err)
		}
		r, err := router.New(router.Config{TimeScale: timeScale, NoJitter: true}, router.Deps{
			Store: st, Sinks: map[string]sinks.Sink{"hook": sink},
			OnAttempt: func(rec *router.AttemptRecord) { records <- rec },
		})
		if err != nil {
			t.Fatalf("router.New: %v", err)
		}
		return r, st
	}
	stop := func(r *router.Router, st *disk.Store) {
		t.Helper()
		if err := r.Close(ctx); err != nil {
			t.Fatalf("router Close: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Fatalf("store Close: %v", err)
		}
	}
	await := func(what string, n int) []arrivalAt {
		t.Helper()
		var got []arrivalAt
		timeout := time.After(30 * time.Second)
		for len(got) < n {
			select {
			case a := <-arrivals:
				got = append(got, a)
			case <-timeout:
				t.Fatalf("%s: %d attempts within 30 s, want %d", what, len(got), n)
			}
		}
		return got
	}

	r, st := start()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if err := r.CreateSubscription(ctx, "orders", "billing", router.SubscriptionSpec{
		Destination: router.SinkDestination("hook"), RetryPolicy: router.RetryPolicy{MaxDeliveryAttempts: 5},
	}); err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	ids := []string{"e1", "e2", "e3"}
	if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("e1")), json.RawMessage(egEvent("e2")), json.RawMessage(egEvent("e3"))); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	for _, a := range await("first attempts", len(ids)) {
		if a.count != 0 {
			t.Errorf("first attempt of %s carried delivery count %d, want 0", a.id, a.count)
		}
	}
	// The attempt records come from the actor turn that also saves the outcome, and Close
	// lets that turn finish: once all three are here, the parked retries are saved.
	for range ids {
		select {
		case rec := <-records:
			if rec.Outcome != schemas.GenericError {
				t.Fatalf("attempt record %+v, want a GenericError", rec)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no attempt record within 30 s")
		}
	}
	stop(r, st)

	// What the store kept: the cursor past the three and each event parked after one attempt,
	// due one scaled schedule step after it.
	st, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatalf("disk.Open: %v", err)
	}
	state, err := st.LoadSubscription(ctx, "orders", "billing")
	if err != nil {
		t.Fatalf("LoadSubscription: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	due := map[string]time.Time{}
	if state.Cursor != 3 || len(state.Parked) != 3 {
		t.Fatalf("stored state: cursor %d, %d parked; want cursor 3 and 3 parked", state.Cursor, len(state.Parked))
	}
	for _, p := range state.Parked {
		step := 10 * time.Second / timeScale
		if p.Attempts != 1 || p.LastOutcome != schemas.GenericError || p.LastStatus != 500 || p.NextDue.Before(p.LastAttempt.Add(step)) {
			t.Errorf("parked %s: attempts %d, outcome %v, status %d, due %v after its attempt; want 1, GenericError, 500, at least %v",
				p.Event.ID, p.Attempts, p.LastOutcome, p.LastStatus, p.NextDue.Sub(p.LastAttempt), step)
		}
		due[p.Event.ID] = p.NextDue
	}

	failing.Store(false)
	r, st = start()
	defer stop(r, st)
	up := time.Now()
	if topics := r.Topics(); !slices.Contains(topics, "orders") {
		t.Fatalf("topics after the restart: %v, want orders", topics)
	}
	if subs, err := r.Subscriptions("orders"); err != nil || !slices.Equal(subs, []string{"billing"}) {
		t.Fatalf("subscriptions after the restart: %v, %v; want [billing]", subs, err)
	}
	for _, a := range await("retries after the restart", len(ids)) {
		if a.count != 1 {
			t.Errorf("retry of %s after the restart carried delivery count %d, want 1", a.id, a.count)
		}
		if a.at.Before(due[a.id]) {
			t.Errorf("retry of %s came %v before its stored due time", a.id, due[a.id].Sub(a.at))
		}
	}
	t.Logf("the router was back %v before the retries were due", due["e1"].Sub(up))
	// Delivery goes on from the cursor: a new event is attempted once, as a first attempt.
	if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("e4"))); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if a := await("a new event after the restart", 1)[0]; a.id != "e4" || a.count != 0 {
		t.Errorf("after the restart the next attempt was %s with count %d, want e4 with count 0", a.id, a.count)
	}
}

func egEvent(id string) string {
	return fmt.Sprintf(`{"id":%q,"subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{"n":1},"dataVersion":"1.0"}`, id)
}

// A subscription whose manual validation window passed is Failed and gets no events, so it
// holds none: the journal is trimmed past it, where its cursor, left where it failed, held
// every later event for as long as nobody updated or deleted it.
func TestJournalIsTrimmedPastAFailedValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		ws := &watchedStore{Store: store.NewMemory(), t: t, holdsNone: map[string]bool{"sub": true}}
		tr := testkit.NewTransport()
		tr.Handle("hook.test", &timedHook{start: time.Now(), answer: func(int, http.ResponseWriter, *http.Request, []byte) {}})
		r, err := router.New(router.Config{PublicURL: "http://egrid.test"}, router.Deps{Store: ws, HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}); err != nil {
			t.Fatal(err)
		}
		testkit.Advance(10 * time.Minute)
		synctest.Wait()
		if p, err := r.Provisioning("orders", "sub"); err != nil || p.State != router.StateFailed {
			t.Fatalf("provisioning %+v, %v; want Failed", p, err)
		}
		publishN(t, r, "a", 10)
		testkit.Advance(router.TrimIdleMax)
		if got := ws.journal(t, "orders"); len(got) != 0 {
			t.Errorf("journal holds %v with only a Failed subscription, want nothing", got)
		}
	})
}
