package actors_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// fencedStore refuses every subscription state write with store.ErrFenced once fenced is
// set, as a cluster store does after another node wrote the state, and counts the state
// loads (one per actor incarnation, queue or push).
type fencedStore struct {
	store.Store
	fenced atomic.Bool
	loads  atomic.Int32
}

func (f *fencedStore) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if f.fenced.Load() {
		return fmt.Errorf("updating subscription %s/%s: %w", topic, sub, store.ErrFenced)
	}
	return f.Store.UpdateSubscription(ctx, topic, sub, u)
}

func (f *fencedStore) LoadSubscription(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	f.loads.Add(1)
	return f.Store.LoadSubscription(ctx, topic, sub)
}

func (f *fencedStore) LoadSubscriptionIndex(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	f.loads.Add(1)
	return f.Store.LoadSubscriptionIndex(ctx, topic, sub)
}

// logRecords is a slog handler that keeps the level and message of each record.
type logRecords struct {
	mu   sync.Mutex
	recs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Level.String()+" "+r.Message)
	return nil
}

// count returns how many records start with prefix (a level, then the message).
func (l *logRecords) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// A queue subscription whose state write the store fences (another node took the
// subscription over) stops for good, as a push subscription does: it is neither restarted
// nor loaded again, and the receiver whose receipt the refused write held is told the actor
// is not running instead of getting events that are not stored as received. It panicked,
// and its topic actor restarted it with back-off, over and over.
func TestQueueStopsOnAFencedStateWrite(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := &fencedStore{Store: journalWithEvents(t, 2)} // e1 and e2 for subscription audit
		logs := new(logRecords)
		var fenced atomic.Int32
		topic := h.Spawn(actors.TopicProps(&actors.TopicConfig{
			Name: "orders", Metrics: new(metrics.Set), Logger: slog.New(logs),
			Subscriptions: []*actors.SubscriptionConfig{{
				SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), Logger: slog.New(logs)},
				Name:               "audit", DeliverySchema: schemas.CloudEvents,
				Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &actors.QueueConfig{},
				OnFenced: func() { fenced.Add(1) },
			}},
		}))
		root := h.System().Root
		entries, _ := st.Read(ctx, "orders", 1, 2)
		root.Send(topic, &actors.Appended{Entries: entries})
		h.Settle() // loaded; e1 and e2 taken in

		st.fenced.Store(true) // another node wrote the subscription's state
		// e1's receipt goes to the store, which refuses it: this receive is told so, not
		// answered with e1 (TestQueueAnswersTheWaitersOfAFencedWriteAtOnce).
		first := root.RequestFuture(topic, &actors.ReceiveEvents{Subscription: "audit", ID: 1, MaxEvents: 1, MaxWait: time.Second}, time.Minute)
		h.Settle()
		// The next write finds the failure: this receive's receipt of e2 is never stored.
		v, err := root.RequestFuture(topic, &actors.ReceiveEvents{Subscription: "audit", ID: 2, MaxEvents: 1, MaxWait: time.Second}, time.Minute).Result()
		if got, ok := v.(error); err != nil || !ok || !errors.Is(got, actors.ErrNotRunning) {
			t.Errorf("receive whose receipt was fenced = %v, %v; want an error wrapping ErrNotRunning", v, err)
		}
		h.Advance(10 * time.Minute) // the back-off of restarts, many times over
		if v, _ := first.Result(); v != nil {
			if res, ok := v.(*actors.ReceivedEvents); ok && len(res.Events) > 0 {
				t.Errorf("the receive whose receipt the store refused was answered with %d events, want none", len(res.Events))
			}
		}

		if n := st.loads.Load(); n != 1 {
			t.Errorf("state loaded %d times, want 1: a fenced actor is not restarted", n)
		}
		if n := logs.count("ERROR subscription actor failed"); n != 0 {
			t.Errorf("%d restarts after the fenced write, want none", n)
		}
		if n := logs.count("WARN subscription state changed elsewhere"); n != 1 {
			t.Errorf("logged the takeover %d times, want once", n)
		}
		if n := fenced.Load(); n != 1 {
			t.Errorf("OnFenced called %d times, want once", n)
		}
		// It stopped by itself: a stop asked for now is answered once its stop work ended.
		if _, err := root.RequestFuture(topic, &actors.RemoveSubscription{Name: "audit"}, time.Minute).Result(); err != nil {
			t.Errorf("RemoveSubscription after the fence: %v", err)
		}
	})
}

// The consumers whose answers wait for a state write the store fences are told at once that
// nothing of their request was stored because another node took the subscription over, with
// an error wrapping ErrNotRunning: they were answered by nothing, and waited for their own
// timeouts.
func TestQueueAnswersTheWaitersOfAFencedWriteAtOnce(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		st := &fencedStore{Store: journalWithEvents(t, 1)} // e1 for subscription audit
		topic := h.Spawn(actors.TopicProps(&actors.TopicConfig{
			Name: "orders", Metrics: new(metrics.Set), Logger: slog.New(new(logRecords)),
			Subscriptions: []*actors.SubscriptionConfig{{
				SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), Logger: slog.New(new(logRecords))},
				Name:               "audit", DeliverySchema: schemas.CloudEvents,
				Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &actors.QueueConfig{},
			}},
		}))
		root := h.System().Root
		entries, _ := st.Read(ctx, "orders", 1, 1)
		root.Send(topic, &actors.Appended{Entries: entries})
		h.Settle() // loaded; e1 taken in

		st.fenced.Store(true) // another node wrote the subscription's state
		answered := make(chan any, 1)
		f := root.RequestFuture(topic, &actors.ReceiveEvents{Subscription: "audit", ID: 1, MaxEvents: 1, MaxWait: time.Second}, time.Hour)
		go func() {
			v, err := f.Result()
			if err != nil {
				v = err
			}
			answered <- v
		}()
		h.Settle() // the receipt's write is refused; no time passes
		select {
		case v := <-answered:
			err, ok := v.(error)
			if !ok || !errors.Is(err, actors.ErrNotRunning) || !errors.Is(err, store.ErrFenced) {
				t.Fatalf("receive whose receipt was fenced = %v, want an error wrapping ErrNotRunning and store.ErrFenced", v)
			}
			if !strings.Contains(err.Error(), "another node") || !strings.Contains(err.Error(), "send it again") {
				t.Errorf("receive whose receipt was fenced = %q, want it to say another node runs the subscription and to send the request again", err)
			}
		default:
			t.Error("the receive whose receipt the store fenced was not answered once the write failed")
			h.Advance(time.Hour) // its own timeout
			<-answered
		}
	})
}

// failedStore refuses every subscription state write with fail once set.
type failedStore struct {
	store.Store
	fail atomic.Pointer[error]
}

func (f *failedStore) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if err := f.fail.Load(); err != nil {
		return fmt.Errorf("updating subscription %s/%s: %w", topic, sub, *err)
	}
	return f.Store.UpdateSubscription(ctx, topic, sub, u)
}

// A subscription actor that stops after a state write of it was fenced logs it as a warning
// that another node owns the subscription now: in cluster mode that is expected (another
// node took it over). It was logged as an error, "flushing subscription state". Any other
// write failure is still an error.
func TestStopAfterAFencedWriteWarnsThatTheSubscriptionMoved(t *testing.T) {
	tests := []struct {
		name      string
		fail      error
		wantWarn  int // "WARN subscription is now owned elsewhere" records
		wantError int // "ERROR flushing subscription state" records
	}{
		{name: "fenced", fail: store.ErrFenced, wantWarn: 1},
		{name: "store failed", fail: errors.New("input/output error"), wantError: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				ctx := context.Background()
				st := &failedStore{Store: journalWithEvents(t, 1)} // e1 for subscription audit
				logs := new(logRecords)
				topic := h.Spawn(actors.TopicProps(&actors.TopicConfig{
					Name: "orders", Metrics: new(metrics.Set), Logger: slog.New(logs),
					Subscriptions: []*actors.SubscriptionConfig{{
						SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), Logger: slog.New(logs)},
						Name:               "audit", DeliverySchema: schemas.CloudEvents,
						Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &actors.QueueConfig{},
					}},
				}))
				root := h.System().Root
				entries, _ := st.Read(ctx, "orders", 1, 1)
				root.Send(topic, &actors.Appended{Entries: entries})
				h.Settle() // loaded; e1 taken in

				st.fail.Store(&tt.fail)
				// e1's receipt is written, and refused.
				_, _ = root.RequestFuture(topic, &actors.ReceiveEvents{Subscription: "audit", ID: 1, MaxEvents: 1, MaxWait: time.Second}, time.Minute).Result()
				h.Settle()
				// The actor stops; its stop work finds its last write failed.
				if _, err := root.RequestFuture(topic, &actors.RemoveSubscription{Name: "audit"}, time.Minute).Result(); err != nil {
					t.Fatalf("RemoveSubscription: %v", err)
				}
				h.Settle()
				if n := logs.count("WARN subscription is now owned elsewhere"); n != tt.wantWarn {
					t.Errorf("%d warnings that the subscription is owned elsewhere, want %d", n, tt.wantWarn)
				}
				if n := logs.count("ERROR flushing subscription state"); n != tt.wantError {
					t.Errorf("%d errors flushing the subscription's state, want %d", n, tt.wantError)
				}
			})
		})
	}
}

// A receipt whose state write fails — fenced (another node runs the subscription now) or any
// other failure — gives its events' bytes back to the router's answer budget as its receiver
// is told: nobody gets that answer, and the budget would otherwise stay short of it for good,
// holding back every later receive of the router.
func TestQueueGivesBackTheBudgetOfARefusedReceipt(t *testing.T) {
	for _, c := range []struct {
		name  string
		store func(store.Store) (store.Store, func())
	}{
		{"fenced", func(s store.Store) (store.Store, func()) {
			f := &fencedStore{Store: s}
			return f, func() { f.fenced.Store(true) }
		}},
		{"failed", func(s store.Store) (store.Store, func()) {
			f := &failedStore{Store: s}
			return f, func() { err := errors.New("disk gone"); f.fail.Store(&err) }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				ctx := context.Background()
				journal := journalWithEvents(t, 1)
				st, refuse := c.store(journal)
				root := h.System().Root
				budget := actors.NewAnswerBudget(1<<20, root)
				topic := h.Spawn(actors.TopicProps(&actors.TopicConfig{
					Name: "orders", Metrics: new(metrics.Set), Logger: slog.New(new(logRecords)),
					Subscriptions: []*actors.SubscriptionConfig{{
						SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), Logger: slog.New(new(logRecords)), AnswerBudget: budget},
						Name:               "audit", DeliverySchema: schemas.CloudEvents,
						Policy: &retry.Policy{Profile: retry.Namespace()}, Queue: &actors.QueueConfig{},
					}},
				}))
				entries, _ := journal.Read(ctx, "orders", 1, 1)
				root.Send(topic, &actors.Appended{Entries: entries})
				h.Settle() // loaded; e1 taken in

				refuse()
				answered := make(chan any, 1)
				f := root.RequestFuture(topic, &actors.ReceiveEvents{Subscription: "audit", ID: 1, MaxEvents: 1, MaxWait: time.Second}, time.Hour)
				go func() {
					v, err := f.Result()
					if err != nil {
						v = err
					}
					answered <- v
				}()
				h.Settle()
				if v := <-answered; !errors.Is(asError(v), actors.ErrNotRunning) {
					t.Fatalf("receive whose receipt was refused = %v, want an error wrapping ErrNotRunning", v)
				}
				if held := budget.Held(); held != 0 {
					t.Errorf("%d bytes of the answer budget held after the receipt was refused; want 0", held)
				}
			})
		})
	}
}

// asError is v as an error, or nil.
func asError(v any) error {
	err, _ := v.(error)
	return err
}
