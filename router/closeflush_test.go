package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// Close returns only once the last state write of a subscription actor is in the store, even
// when the write takes longer than the actor's stop grace: the actor terminates at once and
// waits for the write off its mailbox, and Close waits for that wait and then for the
// topic's state writer, so the store (closed by its owner after Close) sees the write first.
func TestCloseWaitsForTheLastStateWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := &heldStateStore{Store: store.NewMemory()}
		delivered := make(chan string, 4)
		r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{Store: st,
			Sinks: map[string]sinks.Sink{"hook": sinks.Func(func(_ context.Context, b *sinks.Batch) error {
				for _, ev := range b.Events {
					delivered <- ev.ID
				}
				return nil
			})}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		hold := make(chan struct{})
		st.mu.Lock()
		st.hold, st.journal = hold, nil
		st.mu.Unlock()
		if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("e1"))); err != nil {
			t.Fatal(err)
		}
		if id := <-delivered; id != "e1" {
			t.Fatalf("delivered %s, want e1", id)
		}
		synctest.Wait() // its cursor's write is held in the store
		closed := make(chan error, 1)
		go func() { closed <- r.Close(ctx) }()
		<-time.After(3 * actors.DefaultStopGrace) // well past the stop grace
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) with the last state write still held", err)
		default:
		}
		close(hold)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		st.mu.Lock()
		got := append([]string(nil), st.journal...)
		st.mu.Unlock()
		if len(got) != 1 || got[0] != "write" {
			t.Errorf("when Close returned the store had seen %q, want the held write", got)
		}
		state, err := st.Store.LoadSubscription(ctx, "orders", "sub")
		if err != nil {
			t.Fatal(err)
		}
		if state.Cursor != 1 {
			t.Errorf("stored cursor %d after Close, want 1 (e1 delivered)", state.Cursor)
		}
	})
}

// Close waits for a sink call that ignores its cancelled context, up to the subscription's
// stop grace, before it goes on to close the sinks and the store: the actor terminates at
// once and waits for the call off its mailbox, and Close waits for that wait ([actors.Stops]).
// Before it cancels the call it gives it the stop grace to be answered ([actors.Drain]): two
// graces in all.
func TestCloseWaitsForSinkCallsUpToTheStopGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		entered, release := make(chan struct{}, 1), make(chan struct{})
		r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{Store: store.NewMemory(),
			Sinks: map[string]sinks.Sink{"hook": sinks.Func(func(context.Context, *sinks.Batch) error {
				entered <- struct{}{}
				<-release // ignores its context
				return nil
			})}})
		if err != nil {
			t.Fatal(err)
		}
		defer close(release)
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
			t.Fatal(err)
		}
		if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("e1"))); err != nil {
			t.Fatal(err)
		}
		<-entered
		start := time.Now()
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 2*actors.DefaultStopGrace {
			t.Errorf("Close returned after %v with a sink call that ignores its context, want twice the stop grace (%v)", waited, 2*actors.DefaultStopGrace)
		}
	})
}

// heldOutboxStore is a store whose dead-letter outbox puts wait, once hold is set, until it
// is closed; it notes the puts that landed.
type heldOutboxStore struct {
	store.Store
	mu     sync.Mutex
	hold   chan struct{}
	landed int
}

func (s *heldOutboxStore) PutDeadLetters(ctx context.Context, recs []store.DeadLetterRecord) error {
	s.mu.Lock()
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		<-hold
	}
	err := s.Store.PutDeadLetters(ctx, recs)
	s.mu.Lock()
	s.landed++
	s.mu.Unlock()
	return err
}

// Close returns only once the dead-letter actor's outbox save in flight is in the store,
// though the save takes longer than protoactor's 10 s wait for a stopping actor: the actor
// terminates at once and waits for the save off its mailbox (deadletter.Stops), and Close
// waits for that before it goes on to close the store.
func TestCloseWaitsForTheDeadLetterOutboxSave(t *testing.T) {
	st := &heldOutboxStore{Store: store.NewMemory()}
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(time.Minute) // ended at its first attempt (400), handed to the dead-letter actor
		hold := make(chan struct{})
		st.mu.Lock()
		st.hold = hold
		st.mu.Unlock()
		h.Advance(5 * time.Minute) // its write starts by saving its write state: held
		st.mu.Lock()
		landed := st.landed
		st.mu.Unlock()
		closed := make(chan error, 1)
		go func() { closed <- h.Router().Close(context.Background()) }()
		<-time.After(30 * time.Second) // past protoactor's 10 s, within the actor's WriteTimeout
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) with the dead-letter outbox save still held", err)
		default:
		}
		close(hold)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		st.mu.Lock()
		after := st.landed
		st.mu.Unlock()
		if after <= landed {
			t.Errorf("when Close returned the held outbox save had not landed (%d puts before, %d after)", landed, after)
		}
	}, testkit.WithStore(st))
}

// Close waits for a subscription actor whose turn holds its mailbox past protoactor's 10 s
// StopFuture (here in the attempt observer, which should not block, but a slow one makes a
// long turn): the actor's stop work begins in its stopping turn, so Close waits for it to
// terminate before it waits for that stop work and closes the topic's state writer. Had it
// gone on after the 10 s, it found no stop work begun and closed the writer before the
// actor's last write: the cursor of the delivered event was never stored.
func TestCloseWaitsForASubscriptionTurnHeldPastTheStopFuture(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := store.NewMemory()
		entered, release := make(chan struct{}), make(chan struct{})
		r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{Store: st,
			Sinks: map[string]sinks.Sink{"hook": sinks.Func(func(context.Context, *sinks.Batch) error { return nil })},
			OnAttempt: func(*router.AttemptRecord) {
				close(entered)
				<-release
			}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
			t.Fatal(err)
		}
		if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("e1"))); err != nil {
			t.Fatal(err)
		}
		<-entered // the turn that took e1's delivery in holds the mailbox
		closed := make(chan error, 1)
		go func() { closed <- r.Close(ctx) }()
		<-time.After(time.Minute) // well past the StopFuture's 10 s
		synctest.Wait()
		select {
		case err := <-closed:
			t.Errorf("Close returned (%v) while a subscription actor's turn still held its mailbox", err)
			closed <- nil
			// The actor's late messages then reach the shut-down system: let protoactor's
			// dead-letter log throttle, a ticker, end before the bubble does.
			defer func() { <-time.After(time.Minute) }()
		default:
		}
		close(release)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // on a Close that returned early, the actor's last write fails after it
		state, err := st.LoadSubscription(ctx, "orders", "sub")
		if err != nil {
			t.Fatal(err)
		}
		if state.Cursor != 1 {
			t.Errorf("stored cursor %d after Close, want 1: e1 was delivered, and the actor's last write saves it", state.Cursor)
		}
	})
}

// Close waits for a dead-letter replay whose subscription actor's turn holds its mailbox past
// protoactor's 10 s StopFuture: the replay terminates after its subscription actor, whose stop
// work (its last write, which hands the events it dead-lettered again to the dead-letter
// actor) has begun then, so Close waits for that before it stops the dead-letter actor. Had it
// gone on after the 10 s, the event the replay dead-lettered again never reached the outbox.
func TestCloseWaitsForAReplayTurnHeldPastTheStopFuture(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := store.NewMemory()
		objects := testkit.NewObjectStore()
		var hold atomic.Bool
		entered, release := make(chan struct{}), make(chan struct{})
		r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{Store: st, DeadLetterStore: objects,
			Sinks: map[string]sinks.Sink{"hook": sinks.Func(func(context.Context, *sinks.Batch) error {
				return &sinks.DeliveryError{Outcome: schemas.GenericError, StatusCode: http.StatusBadRequest}
			})},
			OnAttempt: func(*router.AttemptRecord) {
				if hold.CompareAndSwap(true, false) {
					close(entered)
					<-release
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		spec := router.SubscriptionSpec{Destination: router.SinkDestination("hook"), DeadLetterDestination: &router.DeadLetterDestination{EndpointType: "StorageBlob"}}
		spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
		if err := r.CreateSubscription(ctx, "orders", "sub", spec); err != nil {
			t.Fatal(err)
		}
		if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("e1"))); err != nil {
			t.Fatal(err)
		}
		<-time.After(10 * time.Minute) // dead-lettered at its first attempt (400), then written
		synctest.Wait()
		if n := len(objects.Objects("deadletters")); n != 1 {
			t.Fatalf("%d dead-letter objects, want 1", n)
		}
		hold.Store(true)
		if _, err := r.ReplayDeadLetters(ctx, "orders", "sub", router.ReplayOptions{}); err != nil {
			t.Fatal(err)
		}
		<-entered // the replay's attempt (400 again) is in, its turn holds the mailbox
		closed := make(chan error, 1)
		go func() { closed <- r.Close(ctx) }()
		<-time.After(time.Minute) // well past the StopFuture's 10 s
		synctest.Wait()
		select {
		case err := <-closed:
			t.Errorf("Close returned (%v) while the turn of a replay's subscription actor still held its mailbox", err)
			closed <- nil
			defer func() { <-time.After(time.Minute) }() // late messages: let protoactor's dead-letter log throttle end
		default:
		}
		close(release)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		recs, err := st.DeadLetters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 {
			t.Errorf("%d records in the dead-letter outbox after Close, want 1: e1, which the replay dead-lettered again", len(recs))
		}
	})
}

// The WARN of a shutdown whose stop grace ends with attempts still in flight names each
// subscription whose attempts are cut, with its topic and how many: it named neither, so an
// operator could not tell which endpoints were slow, nor log folding tell two shutdowns' apart.
func TestCutAttemptsAtCloseNameTheirSubscriptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var (
			logMu sync.Mutex
			logs  bytes.Buffer
		)
		entered, release := make(chan struct{}, 4), make(chan struct{})
		r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{Store: store.NewMemory(),
			Logger: slog.New(slog.NewJSONHandler(lockedWriter{&logMu, &logs}, nil)),
			Sinks: map[string]sinks.Sink{"hook": sinks.Func(func(ctx context.Context, _ *sinks.Batch) error {
				entered <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
				}
				return ctx.Err()
			})}})
		if err != nil {
			t.Fatal(err)
		}
		defer close(release)
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		for _, sub := range []string{"slow-a", "slow-b"} {
			if err := r.CreateSubscription(ctx, "orders", sub, router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("e1"))); err != nil {
			t.Fatal(err)
		}
		<-entered
		<-entered
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		cut := map[string]bool{}
		for line := range strings.Lines(logs.String()) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if !strings.Contains(fmt.Sprint(rec["msg"]), "attempts still in flight") {
				continue
			}
			if rec[logattr.Topic] != "orders" || rec[logattr.Subscription] == nil || rec["attemptsInFlight"] != 1.0 {
				t.Errorf("cut attempts logged as %s; want the topic, the subscription and how many attempts", line)
				continue
			}
			cut[fmt.Sprint(rec[logattr.Subscription])] = true
		}
		if !cut["slow-a"] || !cut["slow-b"] || len(cut) != 2 {
			t.Errorf("subscriptions named by the cut-attempts WARN: %v, want slow-a and slow-b; log:\n%s", cut, logs.String())
		}
	})
}
