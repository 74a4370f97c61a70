package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// holdingSink is a Go-function sink that holds the attempts of one event (held) until release
// is closed or the attempt's context ends, as a webhook whose answer is slow; it answers
// every other event at once. It notes every delivered event in delivered.
type holdingSink struct {
	held      string
	entered   chan struct{} // a value each time held's attempt begins
	release   chan struct{}
	delivered chan string

	mu  sync.Mutex
	got []string
}

func newHoldingSink(held string) *holdingSink {
	return &holdingSink{held: held, entered: make(chan struct{}, 4), release: make(chan struct{}), delivered: make(chan string, 64)}
}

func (s *holdingSink) sink() sinks.Sink {
	return sinks.Func(func(ctx context.Context, b *sinks.Batch) error {
		for _, ev := range b.Events {
			if ev.ID == s.held {
				s.entered <- struct{}{}
				select {
				case <-s.release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		for _, ev := range b.Events {
			s.mu.Lock()
			s.got = append(s.got, ev.ID)
			s.mu.Unlock()
			s.delivered <- ev.ID
		}
		return nil
	})
}

func (s *holdingSink) deliveries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// closeWithHeldAttempt runs a router on a disk store in dir whose subscription (retry policy
// policy) has a sink that holds s5 of s1..s20; once the 19 others are delivered it closes the
// router (and the store) while s5's attempt is in flight, calling during while Close runs.
func closeWithHeldAttempt(t *testing.T, dir string, policy router.RetryPolicy, during func(s *holdingSink)) {
	t.Helper()
	ctx := context.Background()
	st, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := newHoldingSink("s5")
	r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true},
		router.Deps{Store: st, Sinks: map[string]sinks.Sink{"hook": s.sink()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("hook"), RetryPolicy: policy}); err != nil {
		t.Fatal(err)
	}
	var evs []any
	for i := 1; i <= 20; i++ {
		evs = append(evs, json.RawMessage(egEvent(fmt.Sprintf("s%d", i))))
	}
	if err := r.Publish(ctx, "orders", evs...); err != nil {
		t.Fatal(err)
	}
	<-s.entered
	for range 19 {
		<-s.delivered
	}
	synctest.Wait() // their state update is written
	closed := make(chan error, 1)
	go func() { closed <- r.Close(ctx) }()
	during(s)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// reopen starts a router again on the disk store in dir with a sink answering every event at
// once, lets it deliver what it has, and returns what it delivered, closed again.
func reopen(t *testing.T, dir string, check func(r *router.Router)) []string {
	t.Helper()
	s := newHoldingSink("")
	reopenWith(t, dir, s.sink(), check)
	return s.deliveries()
}

// reopenWith starts a router again on the disk store in dir with sink as its "hook", lets it
// attempt what is due, calls check, and closes it again.
func reopenWith(t *testing.T, dir string, sink sinks.Sink, check func(r *router.Router)) {
	t.Helper()
	st, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true},
		router.Deps{Store: st, Sinks: map[string]sinks.Sink{"hook": sink}})
	if err != nil {
		t.Fatal(err)
	}
	synctest.Wait() // the subscription loaded its state and attempted what was due
	if check != nil {
		check(r)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// A shutdown gives the attempt in flight its stop grace: the router's Close waits for it (it
// stops starting attempts and waits before it cancels them), so an answer within the grace
// settles its event, and the events delivered after it stay delivered: the next start
// delivers nothing again.
func TestCloseLetsAnAttemptInFlightFinishWithinTheStopGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		closeWithHeldAttempt(t, dir, router.RetryPolicy{}, func(s *holdingSink) {
			<-time.After(actors.DefaultStopGrace - time.Second) // the receiver answers 4 s later
			close(s.release)
			select {
			case id := <-s.delivered:
				if id != "s5" {
					t.Errorf("delivered %s, want s5", id)
				}
			case <-time.After(time.Minute):
				t.Error("s5's attempt, answered within the stop grace, was not delivered: the shutdown cut it")
			}
		})
		if again := reopen(t, dir, nil); len(again) != 0 {
			t.Errorf("after the restart %d events were delivered again (%v), want none: every one was delivered before the shutdown", len(again), again)
		}
	})
}

// An attempt still in flight when the stop grace is over is cut, and only its event is
// delivered again after the restart; the events delivered after it stay delivered. Its
// explanation says the shutdown cut the first attempt, which does not count (the attempt
// after it has its number), and does not count the time the router was stopped as held back.
func TestCloseCutsOnlyTheAttemptPastTheStopGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		var cutAt time.Time
		closeWithHeldAttempt(t, dir, router.RetryPolicy{}, func(*holdingSink) {
			<-time.After(actors.DefaultStopGrace) // the receiver never answers
			cutAt = time.Now()
		})
		<-time.After(time.Minute) // the server is stopped for a minute
		restart := time.Now()
		again := reopen(t, dir, func(r *router.Router) {
			e, err := r.Explain(context.Background(), "orders", "sub", "s5")
			if err != nil {
				t.Errorf("Explain: %v", err)
				return
			}
			if e.State != router.EventDelivered || len(e.Attempts) != 2 {
				t.Errorf("explanation %+v: want s5 delivered after 2 attempts", e)
				return
			}
			first, second := e.Attempts[0], e.Attempts[1]
			if first.Attempt != 1 || first.Outcome != schemas.Canceled.String() || first.Rule != "Stopped" || first.Decision != "Retry" ||
				first.Duration != cutAt.Sub(first.Time) {
				t.Errorf("first attempt %+v: want attempt 1 Canceled by the stop, retried", first)
			}
			if first.Explanation != "Canceled: cut when the subscription stopped (a shutdown, an update, a move to another node) before the answer; not counted against maxDeliveryAttempts, attempted again when it runs again" {
				t.Errorf("first attempt explained %q", first.Explanation)
			}
			if second.Attempt != 1 || second.Outcome != schemas.Delivered.String() || !second.Time.Equal(restart) || second.HeldBack != 0 {
				t.Errorf("second attempt %+v: want attempt 1 (the cut one not counted) delivered at the restart (%s), not held back", second, restart)
			}
		})
		if !slices.Equal(again, []string{"s5"}) {
			t.Errorf("after the restart %v were delivered, want s5 alone: the others were delivered before the shutdown", again)
		}
	})
}

// An attempt a shutdown cuts does not count against maxDeliveryAttempts: with a limit of 1,
// the event cut in its first attempt is delivered by the attempt after the restart, which is
// its first, and the explanation says "1 of 1" with the cut attempt apart, not "2 of 1".
func TestCutAttemptDoesNotCountAgainstMaxDeliveryAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		closeWithHeldAttempt(t, dir, router.RetryPolicy{MaxDeliveryAttempts: 1}, func(*holdingSink) {
			<-time.After(actors.DefaultStopGrace) // the receiver never answers
		})
		again := reopen(t, dir, func(r *router.Router) {
			e, err := r.Explain(context.Background(), "orders", "sub", "s5")
			if err != nil {
				t.Errorf("Explain: %v", err)
				return
			}
			if e.State != router.EventDelivered || e.AttemptsMade != 1 || e.MaxDeliveryAttempts != 1 || e.CutAttempts != 1 {
				t.Errorf("explanation: state %s, attemptsMade %d of %d, cutAttempts %d; want Delivered, 1 of 1, 1 cut",
					e.State, e.AttemptsMade, e.MaxDeliveryAttempts, e.CutAttempts)
			}
			if len(e.Attempts) != 2 || e.Attempts[0].Rule != "Stopped" || e.Attempts[0].Attempt != 1 ||
				e.Attempts[1].Outcome != schemas.Delivered.String() || e.Attempts[1].Attempt != 1 {
				t.Errorf("attempts %+v: want attempt 1 cut by the stop, then attempt 1 delivered", e.Attempts)
			}
		})
		if !slices.Equal(again, []string{"s5"}) {
			t.Errorf("after the restart %v were delivered, want s5", again)
		}
	})
}

// With maxDeliveryAttempts 2, an event whose first attempt a shutdown cut and whose next one
// fails is retried: the failure is its first counted attempt, not its second.
func TestCutAttemptLeavesItsRetryToTheEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		closeWithHeldAttempt(t, dir, router.RetryPolicy{MaxDeliveryAttempts: 2}, func(*holdingSink) {
			<-time.After(actors.DefaultStopGrace) // the receiver never answers
		})
		failing := sinks.Func(func(context.Context, *sinks.Batch) error {
			return &sinks.DeliveryError{Outcome: schemas.GenericError, StatusCode: 500}
		})
		reopenWith(t, dir, failing, func(r *router.Router) {
			e, err := r.Explain(context.Background(), "orders", "sub", "s5")
			if err != nil {
				t.Errorf("Explain: %v", err)
				return
			}
			if e.State != router.EventRetrying || e.AttemptsMade != 1 || e.AttemptsLeft != 1 || e.CutAttempts != 1 {
				t.Errorf("explanation: state %s (%s), attemptsMade %d, attemptsLeft %d, cutAttempts %d; want Retrying, 1 made, 1 left, 1 cut",
					e.State, e.Reason, e.AttemptsMade, e.AttemptsLeft, e.CutAttempts)
			}
		})
	})
}

// An event whose first attempt a shutdown cut has a history of its own, even when an earlier
// event with the same id (a publisher's retry) was delivered before: the cut attempt starts
// it, as any first attempt does, and the delivery after the restart adds to it. Only a cut
// after an earlier step of the same event continues a history.
func TestCutFirstAttemptStartsItsOwnHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := t.TempDir()
		st, err := disk.Open(dir, disk.Options{})
		if err != nil {
			t.Fatal(err)
		}
		calls := make(chan int, 4)
		n := 0
		hold := sinks.Func(func(ctx context.Context, _ *sinks.Batch) error {
			n++ // one attempt at a time: the subscription's only events are the two copies
			calls <- n
			if n == 1 {
				return nil // the first copy is delivered at once
			}
			<-ctx.Done() // the second copy's attempt is never answered
			return ctx.Err()
		})
		r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true},
			router.Deps{Store: st, Sinks: map[string]sinks.Sink{"hook": hold}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
			t.Fatal(err)
		}
		if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("x"))); err != nil {
			t.Fatal(err)
		}
		<-calls
		<-time.After(time.Hour)
		second := time.Now()
		if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("x"))); err != nil { // the publisher sends it again
			t.Fatal(err)
		}
		<-calls
		synctest.Wait()
		if err := r.Close(ctx); err != nil { // cuts the second copy's attempt after the stop grace
			t.Fatal(err)
		}
		cutAt := time.Now()
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		delivered := reopen(t, dir, func(r *router.Router) {
			e, err := r.Explain(ctx, "orders", "sub", "x")
			if err != nil {
				t.Errorf("Explain: %v", err)
				return
			}
			var steps []string
			for _, a := range e.Attempts {
				steps = append(steps, fmt.Sprintf("#%d %s %s/%s", a.Attempt, a.Time.Format(time.TimeOnly), a.Outcome, a.Rule))
			}
			if !e.PublishTime.Equal(second) || e.State != router.EventDelivered || len(e.Attempts) != 2 ||
				!e.Attempts[0].Time.Equal(second) || e.Attempts[0].Rule != "Stopped" ||
				e.Attempts[1].Outcome != schemas.Delivered.String() || !e.Attempts[1].Time.Equal(cutAt) ||
				e.AttemptsMade != 1 || e.CutAttempts != 1 {
				t.Errorf("explanation of x: published %s, %s, steps %v, attemptsMade %d, cutAttempts %d; want the second copy's own history: published %s, its cut attempt then its delivery at %s, 1 made, 1 cut",
					e.PublishTime.Format(time.TimeOnly), e.State, steps, e.AttemptsMade, e.CutAttempts, second.Format(time.TimeOnly), cutAt.Format(time.TimeOnly))
			}
		})
		if !slices.Equal(delivered, []string{"x"}) {
			t.Errorf("after the restart %v were delivered, want x (the second copy) alone", delivered)
		}
	})
}

// An event cut twice before a counted attempt keeps one history: the second cut adds to the
// first one's steps, and the delivery after them to both.
func TestSecondCutAddsToTheFirstCutsHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		closeWithHeldAttempt(t, dir, router.RetryPolicy{}, func(*holdingSink) {
			<-time.After(actors.DefaultStopGrace) // the receiver never answers
		})
		reopenWith(t, dir, newHoldingSink("s5").sink(), nil) // never answers again: cut again by the Close
		again := reopen(t, dir, func(r *router.Router) {
			e, err := r.Explain(context.Background(), "orders", "sub", "s5")
			if err != nil {
				t.Errorf("Explain: %v", err)
				return
			}
			if e.State != router.EventDelivered || e.AttemptsMade != 1 || e.CutAttempts != 2 || len(e.Attempts) != 3 ||
				e.Attempts[0].Rule != "Stopped" || e.Attempts[1].Rule != "Stopped" || e.Attempts[2].Outcome != schemas.Delivered.String() {
				t.Errorf("explanation: state %s, attemptsMade %d, cutAttempts %d, attempts %+v; want two cut attempts, then attempt 1 delivered",
					e.State, e.AttemptsMade, e.CutAttempts, e.Attempts)
			}
		})
		if !slices.Equal(again, []string{"s5"}) {
			t.Errorf("after the restarts %v were delivered, want s5", again)
		}
	})
}
