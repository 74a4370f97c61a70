package router_test

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

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// A 503 then a 200: the explanation lists both attempts, the floor rule that timed the retry
// and "Delivered".
func TestExplainRetriedThenDelivered(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Sequence(503, 200))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		published := time.Now()
		h.Publish("orders", h.EventGridEvent(testkit.ID("order-1")))
		h.Advance(time.Minute)
		hook.RequireAttempts(t, 2)

		e, err := h.Router().Explain(context.Background(), "ORDERS", "SUB-1", "order-1")
		if err != nil {
			t.Fatalf("Explain: %v", err)
		}
		if e.State != router.EventDelivered || e.Topic != "orders" || e.Subscription != "sub-1" || e.EventID != "order-1" {
			t.Fatalf("explanation %+v: want order-1 of orders/sub-1 Delivered", e)
		}
		if !e.PublishTime.Equal(published) || e.AttemptsMade != 2 || e.MaxDeliveryAttempts != 30 {
			t.Fatalf("published %s, %d of %d attempts: want %s, 2 of 30", e.PublishTime, e.AttemptsMade, e.MaxDeliveryAttempts, published)
		}
		if len(e.Attempts) != 2 {
			t.Fatalf("%d attempts listed, want 2: %+v", len(e.Attempts), e.Attempts)
		}
		first, second := e.Attempts[0], e.Attempts[1]
		if first.Attempt != 1 || first.StatusCode != 503 || first.Outcome != schemas.Busy.String() || first.Rule != "Floor" || first.Decision != "Retry" {
			t.Fatalf("first attempt %+v: want a 503 retried by the floor rule", first)
		}
		wantDue := published.Add(30 * time.Second)
		if !first.Due.Equal(wantDue) || first.Explanation != "503: floor 30s (over schedule step 1 = 10s), due "+wantDue.UTC().Format(time.TimeOnly) {
			t.Fatalf("first attempt due %s explained %q", first.Due, first.Explanation)
		}
		if !strings.Contains(first.Response, "503") || strings.Contains(first.Response, "?") {
			t.Fatalf("first attempt response %q: want the 503 answer, no query string", first.Response)
		}
		if second.Attempt != 2 || second.Outcome != schemas.Delivered.String() || second.Explanation != "delivered" || !second.Time.Equal(wantDue) {
			t.Fatalf("second attempt %+v: want delivered at %s", second, wantDue)
		}
		if e.AttemptsLeft != 0 || e.Reason != "" || e.DeadLetterObject != "" {
			t.Fatalf("a delivered event has attempts left %d, reason %q, object %q", e.AttemptsLeft, e.Reason, e.DeadLetterObject)
		}
	}, testkit.WithoutJitter())
}

// While the event waits for its retry, the explanation says when, and what is left of its
// attempts and time to live.
func TestExplainRetrying(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(500))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{MaxDeliveryAttempts: 5, EventTimeToLiveInMinutes: 60})
		h.Publish("orders", h.EventGridEvent(testkit.ID("order-1")))
		h.Advance(5 * time.Second)
		e, err := h.Router().Explain(context.Background(), "orders", "sub-1", "order-1")
		if err != nil {
			t.Fatalf("Explain: %v", err)
		}
		if e.State != router.EventRetrying || e.AttemptsLeft != 4 || e.TimeToLiveLeft != 59*time.Minute+55*time.Second {
			t.Fatalf("state %s, %d attempts and %s left: want Retrying, 4, 59m55s", e.State, e.AttemptsLeft, e.TimeToLiveLeft)
		}
		if !e.NextAttempt.Equal(e.PublishTime.Add(10 * time.Second)) {
			t.Fatalf("next attempt %s, want 10 s after publishing", e.NextAttempt)
		}
	}, testkit.WithoutJitter())
}

// A dead-lettered event's explanation names the reason and, once written, the object key.
func TestExplainDeadLettered(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(500))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{MaxDeliveryAttempts: 2})
		h.Publish("orders", h.EventGridEvent(testkit.ID("order-1")))
		h.Advance(time.Minute)
		e, err := h.Router().Explain(context.Background(), "orders", "sub-1", "order-1")
		if err != nil {
			t.Fatalf("Explain: %v", err)
		}
		if e.State != router.EventDeadLettered || e.Reason != schemas.MaxDeliveryAttemptsExceeded || e.DeadLetterObject != "" {
			t.Fatalf("before the write: state %s, reason %s, object %q: want DeadLettered, MaxDeliveryAttemptsExceeded, none yet", e.State, e.Reason, e.DeadLetterObject)
		}
		last := e.Attempts[len(e.Attempts)-1]
		if last.Rule != "MaxAttempts" || !strings.Contains(last.Explanation, "attempt 2 of maxDeliveryAttempts 2 → DeadLetter (MaxDeliveryAttemptsExceeded)") {
			t.Fatalf("last attempt %+v", last)
		}

		h.Advance(10 * time.Minute) // past the 5-minute dead-letter delay
		e, err = h.Router().Explain(context.Background(), "orders", "sub-1", "order-1")
		if err != nil {
			t.Fatalf("Explain: %v", err)
		}
		objs, err := listedObjects(h.Router().DeadLetterObjects(context.Background(), "orders", "sub-1", router.DeadLetterQuery{}))
		if err != nil || len(objs) != 1 {
			t.Fatalf("dead-letter objects %v, %v: want one", objs, err)
		}
		if e.DeadLetterObject != objs[0].Key {
			t.Fatalf("object %q, want %q", e.DeadLetterObject, objs[0].Key)
		}
	})
}

// An event the subscription never saw is reported as such, with its id; an unknown
// subscription as always.
func TestExplainUnknown(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook")
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		_, err := h.Router().Explain(context.Background(), "orders", "sub-1", "nope-42")
		if !errors.Is(err, router.ErrEventNotFound) || !strings.Contains(err.Error(), `"nope-42"`) {
			t.Fatalf("unknown event: err %v, want ErrEventNotFound naming nope-42", err)
		}
		if _, err := h.Router().Explain(context.Background(), "orders", "sub-2", "x"); !errors.Is(err, router.ErrSubscriptionNotFound) {
			t.Fatalf("unknown subscription: err %v", err)
		}
	})
}

// The history keeps the latest attempts only, counting the older ones.
func TestExplainKeepsTheLatestAttempts(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(500))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{MaxDeliveryAttempts: 6})
		h.Publish("orders", h.EventGridEvent(testkit.ID("order-1")))
		h.Advance(time.Hour)
		hook.RequireAttempts(t, 6)
		e, err := h.Router().Explain(context.Background(), "orders", "sub-1", "order-1")
		if err != nil {
			t.Fatalf("Explain: %v", err)
		}
		if len(e.Attempts) != 4 || e.EarlierAttempts != 2 || e.Attempts[0].Attempt != 3 || e.AttemptsMade != 6 {
			t.Fatalf("%d attempts listed from #%d, %d earlier, %d made: want 4 from #3, 2 earlier, 6 made",
				len(e.Attempts), e.Attempts[0].Attempt, e.EarlierAttempts, e.AttemptsMade)
		}
	}, testkit.WithoutJitter(), testkit.WithConfig(router.Config{History: router.HistoryConfig{Attempts: 4}}))
}

// An event published while the endpoint is on probation waits it out; its explanation says
// how long it was held and that it went out as the probe.
func TestExplainProbationWait(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Sequence(503, 200, 200))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("first"))) // its 503 starts a 10 s probation (Busy)
		h.Advance(time.Second)
		h.Publish("orders", h.EventGridEvent(testkit.ID("second")))
		h.Advance(time.Minute)
		hook.RequireAttempts(t, 3)

		e, err := h.Router().Explain(context.Background(), "orders", "sub-1", "second")
		if err != nil {
			t.Fatalf("Explain: %v", err)
		}
		if e.State != router.EventDelivered || len(e.Attempts) != 1 {
			t.Fatalf("explanation %+v: want one delivered attempt", e)
		}
		if a := e.Attempts[0]; !a.Probe || a.HeldBack != 9*time.Second {
			t.Fatalf("attempt %+v: want the probe, held back 9s by the probation", a)
		}
	}, testkit.WithoutJitter())
}

// An event the subscription holds but has no step of yet is explained by where it stands:
// InFlight while its first attempt waits for the endpoint, Pending while a probation holds it
// back. Before, both answered ErrEventNotFound, "no delivery history".
func TestExplainEventsHeldWithoutAHistory(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		slow := h.Endpoint("slow", testkit.Hang())
		h.CreateSubscription("orders", "slow-1", slow, router.RetryPolicy{MaxDeliveryAttempts: 3, EventTimeToLiveInMinutes: 60})
		h.Publish("orders", h.EventGridEvent(testkit.ID("order-1")))
		h.Advance(5 * time.Second) // its attempt runs: the endpoint does not answer
		e, err := h.Router().Explain(context.Background(), "orders", "slow-1", "order-1")
		if err != nil {
			t.Fatalf("Explain of an event in flight: %v", err)
		}
		if e.State != router.EventInFlight || e.AttemptsMade != 0 || e.AttemptsLeft != 3 || e.MaxDeliveryAttempts != 3 ||
			!e.AttemptStarted.Equal(e.PublishTime) || e.TimeToLiveLeft != 59*time.Minute+55*time.Second || e.EventID != "order-1" {
			t.Fatalf("explanation %+v: want InFlight since its publish, 0 of 3 attempts made, 59m55s to live", e)
		}

		hook := h.Endpoint("hook", testkit.Sequence(503, 200, 200))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("first"))) // its 503 starts a 10 s probation (Busy)
		h.Advance(time.Second)
		h.Publish("orders", h.EventGridEvent(testkit.ID("second")))
		h.Advance(time.Second)
		e, err = h.Router().Explain(context.Background(), "orders", "sub-1", "second")
		if err != nil {
			t.Fatalf("Explain of an event held back by a probation: %v", err)
		}
		if e.State != router.EventPending || e.AttemptsMade != 0 || len(e.Attempts) != 0 {
			t.Fatalf("explanation %+v: want Pending, no attempt made", e)
		}
		if _, err := h.Router().Explain(context.Background(), "orders", "sub-1", "nope-42"); !errors.Is(err, router.ErrEventNotFound) {
			t.Fatalf("an event the subscription does not hold: %v, want ErrEventNotFound", err)
		}
	}, testkit.WithoutJitter())
}

// holdingHistoryStore is a memory store whose next PutHistory, once hold is called, waits
// until the returned release is called.
type holdingHistoryStore struct {
	*store.Memory
	mu      sync.Mutex
	entered chan struct{} // closed as the held write starts; nil: none held
	release chan struct{}
}

// hold makes the next PutHistory wait; it returns a channel closed as that write starts and
// the function that lets it go on.
func (s *holdingHistoryStore) hold() (entered <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entered, s.release = make(chan struct{}), make(chan struct{})
	r := s.release
	return s.entered, func() { close(r) }
}

func (s *holdingHistoryStore) PutHistory(ctx context.Context, topic, sub string, epoch uint64, recs []store.HistoryRecord) error {
	s.mu.Lock()
	entered, release := s.entered, s.release
	s.entered = nil
	s.mu.Unlock()
	if entered != nil {
		close(entered)
		<-release
	}
	return s.Memory.PutHistory(ctx, topic, sub, epoch, recs)
}

// A history write of a deleted subscription still under way as the subscription is deleted
// and created again under its name shows nothing under the new subscription: explaining the
// event there finds no history, while the new subscription's own events have theirs. Before,
// the late write landed on the new subscription, whose explanation then listed the old one's
// attempts.
func TestExplainShowsNothingOfADeletedNamesake(t *testing.T) {
	st := &holdingHistoryStore{Memory: store.NewMemory()}
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		old := h.Endpoint("old")
		h.CreateSubscription("orders", "sub-1", old, router.RetryPolicy{})
		entered, release := st.hold()
		h.Publish("orders", h.EventGridEvent(testkit.ID("order-1")))
		<-entered // delivered; its history write waits
		old.RequireAttempts(t, 1)
		renewed := h.Endpoint("new")
		recreated := make(chan error, 1)
		go func() {
			if err := h.Router().DeleteSubscription(ctx, "orders", "sub-1"); err != nil {
				recreated <- err
				return
			}
			spec := router.SubscriptionSpec{Destination: router.WebHook(renewed.URL())}
			recreated <- h.Router().CreateSubscription(ctx, "orders", "sub-1", spec)
		}()
		synctest.Wait() // deleted and created again, or the delete waits for the write
		release()
		if err := <-recreated; err != nil {
			t.Fatal(err)
		}
		if e, err := h.Router().Explain(ctx, "orders", "sub-1", "order-1"); !errors.Is(err, router.ErrEventNotFound) {
			t.Errorf("explaining the deleted subscription's event under the new one: %+v, %v; want ErrEventNotFound", e, err)
		}
		h.Publish("orders", h.EventGridEvent(testkit.ID("order-2")))
		h.Advance(time.Second)
		renewed.RequireAttempts(t, 1)
		e, err := h.Router().Explain(ctx, "orders", "sub-1", "order-2")
		if err != nil || e.State != router.EventDelivered || len(e.Attempts) != 1 {
			t.Errorf("the new subscription's own event: %+v, %v; want one delivered attempt", e, err)
		}
	}, testkit.WithStore(st))
}

// Explain's search for a dead-lettered event's object reads a bounded number of the objects
// written after the event ended, oldest first, and when it stops before finding the event's
// record it says where and how to look further, instead of reading every object since.
func TestExplainDeadLetterSearchIsBounded(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e0")))
		h.Advance(6 * time.Minute)
		store := h.DeadLetterObjects()
		objs := store.Objects("deadletters")
		if len(objs) != 1 {
			t.Fatalf("%d objects, want e0's", len(objs))
		}
		other, _, err := store.Get(ctx, "deadletters", objs[0].Key, 0)
		if err != nil {
			t.Fatal(err)
		}

		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(time.Second) // e1 ended; its record waits out the delay
		// Objects of other events, written after e1 ended and before e1's own.
		const others = router.ExplainDeadLetterObjects + 6
		for i := range others {
			// Named as egrid names them: by the hour they are written in.
			key := deadletter.Key("BILLING", time.Now(), fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
			if _, err := store.Put(ctx, "deadletters", key, other, sinks.PutOptions{
				ContentType: "application/json", Metadata: map[string]string{deadletter.TopicMetadata: "orders"},
			}); err != nil {
				t.Fatal(err)
			}
			h.Advance(time.Millisecond)
		}
		h.Advance(6 * time.Minute)
		if n := len(store.Objects("deadletters")); n != others+2 {
			t.Fatalf("%d objects, want %d", n, others+2)
		}

		e, err := h.Router().Explain(ctx, "orders", "billing", "e1")
		if err != nil {
			t.Fatal(err)
		}
		if e.State != router.EventDeadLettered || e.DeadLetterObject != "" {
			t.Fatalf("state %s, object %q: want DeadLettered and the search stopped before e1's object", e.State, e.DeadLetterObject)
		}
		want := fmt.Sprintf("not in the %d dead-letter objects", router.ExplainDeadLetterObjects)
		for _, part := range []string{want, "those written since were not read", "egrid deadletter show --topic orders --subscription billing --since "} {
			if !strings.Contains(e.DeadLetterSearch, part) {
				t.Errorf("search note %q, want it to hold %q", e.DeadLetterSearch, part)
			}
		}

		// e0's object is the first written after e0 ended: found, no note.
		e, err = h.Router().Explain(ctx, "orders", "billing", "e0")
		if err != nil {
			t.Fatal(err)
		}
		if e.DeadLetterObject != objs[0].Key || e.DeadLetterSearch != "" {
			t.Fatalf("e0: object %q, note %q: want %q and no note", e.DeadLetterObject, e.DeadLetterSearch, objs[0].Key)
		}
	})
}

// A dead-lettered event whose record the dead-letter store never took — down past the
// four-hour limit — is explained as dropped, with reason DeadLetterDestinationUnavailable and
// a last step saying why: not as waiting in the outbox.
func TestExplainDeadLetterDroppedUnwritten(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(400)), router.RetryPolicy{})
		h.DeadLetterStore().Down()
		h.Publish("orders", h.EventGridEvent(testkit.ID("m1")), h.EventGridEvent(testkit.ID("m2")))
		h.Advance(5*time.Minute + 30*time.Second + 4*time.Hour)
		st, err := h.Router().DeadLetterStatus(context.Background())
		if err != nil || st.RecordsDropped != 2 {
			t.Fatalf("status %+v, %v: want 2 dropped", st, err)
		}
		for _, id := range []string{"m1", "m2"} {
			e, err := h.Router().Explain(context.Background(), "orders", "sub-1", id)
			if err != nil {
				t.Fatalf("Explain %s: %v", id, err)
			}
			if e.State != router.EventDropped || e.Reason != schemas.DeadLetterDestinationUnavailable || e.AttemptsMade != 1 {
				t.Fatalf("%s: state %s, reason %s after %d attempts: want Dropped, DeadLetterDestinationUnavailable after 1", id, e.State, e.Reason, e.AttemptsMade)
			}
			if n := len(e.Attempts); n != 2 || e.Attempts[0].Decision != "DeadLetter" {
				t.Fatalf("%s: attempts %+v, want the attempt that dead-lettered it, then the drop", id, e.Attempts)
			}
			last := e.Attempts[1]
			if last.Step != router.StepDeadLetterDropped || last.Decision != "Drop" || !strings.Contains(last.Explanation, "unavailable for 4h") {
				t.Errorf("%s: last step %+v, want DeadLetterDropped saying the destination was unavailable for 4h", id, last)
			}
		}
	})
}

// When the dead-letter objects cannot be searched (the store is down after the record was
// written), the explanation says so in deadLetterSearch, instead of calling the record not
// written yet.
func TestExplainDeadLetterSearchThatCannotRunSaysSo(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(400)), router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("m1")))
		h.Advance(10 * time.Minute)
		e, err := h.Router().Explain(context.Background(), "orders", "sub-1", "m1")
		if err != nil || e.DeadLetterObject == "" {
			t.Fatalf("Explain once written: %+v, %v; want the object", e, err)
		}
		h.DeadLetterStore().Down()
		e, err = h.Router().Explain(context.Background(), "orders", "sub-1", "m1")
		if err != nil {
			t.Fatalf("Explain: %v", err)
		}
		if e.State != router.EventDeadLettered || e.DeadLetterObject != "" || !strings.Contains(e.DeadLetterSearch, "could not be searched") {
			t.Errorf("with the store down: state %s, object %q, search %q: want a search that says it could not run", e.State, e.DeadLetterObject, e.DeadLetterSearch)
		}
	})
}
