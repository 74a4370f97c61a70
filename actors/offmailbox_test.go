package actors_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// gatedReads is a store whose journal reads wait until the test releases them, and that
// records every range read.
type gatedReads struct {
	store.Store
	gate chan struct{}

	mu     sync.Mutex
	ranges [][2]uint64 // [from, last seq returned]
}

func (g *gatedReads) Read(ctx context.Context, topic string, from uint64, limit int) ([]store.Entry, error) {
	<-g.gate
	entries, err := g.Store.Read(ctx, topic, from, limit)
	if len(entries) > 0 {
		g.mu.Lock()
		g.ranges = append(g.ranges, [2]uint64{from, entries[len(entries)-1].Seq})
		g.mu.Unlock()
	}
	return entries, err
}

// journalWithEvents returns a memory store holding n events of topic orders, and subscription
// audit still at cursor 0.
func journalWithEvents(t *testing.T, n int) *store.Memory {
	t.Helper()
	ctx := context.Background()
	st := store.NewMemory()
	_ = st.PutTopic(ctx, "orders", nil)
	_ = st.PutSubscription(ctx, "orders", "audit", nil)
	var body []string
	for i := 1; i <= n; i++ {
		body = append(body, fmt.Sprintf(`{"id":"e%d","subject":"/o","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`, i))
	}
	evs, err := schemas.DecodeEventGrid([]byte("["+strings.Join(body, ",")+"]"), "/topics/orders", schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, "orders", time.Now(), evs); err != nil {
		t.Fatal(err)
	}
	return st
}

// A subscription that catches up from the journal reads it off its mailbox: while a read is
// held up (a disk store waits behind a publish's fsync) the actor still answers, and every
// journal range is read exactly once.
func TestCatchUpReadDoesNotBlockTheMailbox(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		g := &gatedReads{Store: journalWithEvents(t, 10), gate: make(chan struct{})}
		var mu sync.Mutex
		var delivered []string
		sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range b.Events {
				delivered = append(delivered, e.ID)
			}
			return nil
		})
		pid := h.Spawn(actors.SubscriptionProps(&actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: g, Metrics: new(metrics.Set), Window: 4},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sink,
		}))
		h.Settle() // the first read is started and held at the gate
		res, err := h.System().Root.RequestFuture(pid, &actors.GetStatus{}, time.Second).Result()
		if err != nil {
			t.Fatalf("no status while a journal read is held up: %v", err)
		}
		if st := res.(*actors.Status); st.Backlog != 10 || st.InFlight != 0 || st.Cursor != 0 {
			t.Errorf("status while the read is held up = %+v, want backlog 10, nothing in flight, cursor 0", st)
		}
		close(g.gate)
		h.Settle()
		mu.Lock()
		if len(delivered) != 10 {
			t.Errorf("delivered %v, want the 10 events", delivered)
		}
		mu.Unlock()
		g.mu.Lock()
		defer g.mu.Unlock()
		next := uint64(1)
		for _, r := range g.ranges {
			if r[0] != next {
				t.Errorf("journal read from %d, want %d (reads %v): a range was read twice or skipped", r[0], next, g.ranges)
			}
			next = r[1] + 1
		}
		if next != 11 {
			t.Errorf("journal read through %d, want 10 (reads %v)", next-1, g.ranges)
		}
	})
}

// A sink that ignores its context does not hold a stopping subscription forever, nor its
// mailbox at all: the actor terminates at once, its stop work waits the grace off the mailbox
// and abandons the attempt, and the event, not settled, is attempted again by the next actor.
func TestStopAbandonsASinkThatIgnoresItsContext(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		st := journalWithEvents(t, 1)
		release := make(chan struct{})
		calls := make(chan string, 4)
		stuck := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			calls <- b.Events[0].ID
			<-release // ignores ctx
			return nil
		})
		stops := new(actors.Stops)
		cfg := &actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), StopGrace: 3 * time.Second, Stops: stops},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: stuck,
		}
		pid := h.Spawn(actors.SubscriptionProps(cfg))
		h.Settle()
		if got := len(calls); got != 1 {
			t.Fatalf("%d attempts started, want 1", got)
		}
		<-calls
		start := time.Now()
		if err := h.System().Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("the actor terminated after %v with its sink call stuck, want at once (the wait is off its mailbox)", waited)
		}
		stopped := make(chan struct{})
		go func() {
			_ = stops.Wait(context.Background())
			close(stopped)
		}()
		h.Settle()
		select {
		case <-stopped:
			t.Fatal("the stop work ended before the grace")
		default:
		}
		h.Advance(3 * time.Second)
		select {
		case <-stopped:
		default:
			t.Fatal("the stop work still waits for the sink after the grace")
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Errorf("the stop work waited %v, want the 3 s grace", waited)
		}
		// Not settled: parked by the stop, due at once, the cut attempt not counted against
		// maxDeliveryAttempts (the stop, not the endpoint, ended it).
		state, _ := st.LoadSubscription(context.Background(), "orders", "audit")
		if len(state.Parked) != 1 || state.Parked[0].Seq != 1 || state.Parked[0].Attempts != 0 || state.Parked[0].LastOutcome != schemas.Canceled {
			t.Errorf("parked %+v after the abandoned attempt, want event 1 parked after its Canceled attempt, no attempt counted: the event is not settled", state.Parked)
		}
		cfg.Sink = sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			calls <- b.Events[0].ID
			return nil
		})
		h.Spawn(actors.SubscriptionProps(cfg))
		h.Settle()
		if got := len(calls); got != 1 {
			t.Errorf("%d attempts by the next actor, want 1", got)
		}
		close(release) // the abandoned goroutine ends; its late result goes nowhere
		h.Settle()
	})
}

// An event whose only attempt a stop cut keeps that attempt's outcome when it ends without
// another: its time to live running out while the endpoint is on probation dead-letters it
// with lastDeliveryOutcome Canceled, not Probation, which says an event the probation held
// back from its first attempt. deliveryAttempts counts the attempts that count against
// maxDeliveryAttempts, as explain's attemptsMade does: the cut one is not among them.
func TestCutEventKeepsItsOutcomeWhenItsTimeToLiveEndsOnProbation(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		st := journalWithEvents(t, 11)
		release := make(chan struct{})
		sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			if b.Events[0].ID == "e1" {
				<-release // ignores ctx: cut by the stop
				return nil
			}
			return &sinks.DeliveryError{Outcome: schemas.GenericError, StatusCode: 500}
		})
		var mu sync.Mutex
		var dead []*actors.DeadLetter
		cfg := &actors.SubscriptionConfig{
			SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Metrics: new(metrics.Set), StopGrace: 3 * time.Second, Stops: new(actors.Stops)},
			Name:               "audit", DeliverySchema: schemas.EventGrid,
			Policy: &retry.Policy{NoJitter: true, EventTimeToLive: time.Minute, DeadLetter: true},
			Sink:   sink,
			OnDeadLetter: func(d *actors.DeadLetter) {
				mu.Lock()
				defer mu.Unlock()
				dead = append(dead, d)
			},
		}
		pid := h.Spawn(actors.SubscriptionProps(cfg))
		h.Settle() // e2..e11 failed: the endpoint is on probation; e1's attempt is stuck
		if err := h.System().Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		h.Advance(3 * time.Second) // the stop grace: e1's attempt is cut
		h.Spawn(actors.SubscriptionProps(cfg))
		h.Advance(5 * time.Minute) // every event's time to live ends
		close(release)
		h.Settle()
		mu.Lock()
		defer mu.Unlock()
		var e1 *actors.DeadLetter
		for _, d := range dead {
			if d.Event.ID == "e1" {
				e1 = d
			}
		}
		if e1 == nil {
			t.Fatalf("e1 not dead-lettered (%d dead letters)", len(dead))
		}
		if e1.Reason != schemas.TimeToLiveExceeded || e1.LastOutcome != schemas.Canceled || e1.DeliveryAttempts != 0 || e1.LastAttemptTime.IsZero() {
			t.Errorf("e1 dead-lettered %s after %d attempts, last outcome %s at %s; want TimeToLiveExceeded, lastDeliveryOutcome Canceled (its cut attempt's, not Probation), 0 counted attempts, the cut attempt's time",
				e1.Reason, e1.DeliveryAttempts, e1.LastOutcome, e1.LastAttemptTime)
		}
	})
}
