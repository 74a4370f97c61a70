package router_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// objectKeyRE is the key layout of SPEC §5 for a classic topic's subscription.
func objectKeyRE(sub string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(strings.ToUpper(sub)) + `/[0-9]{4}/[1-9][0-9]?/[1-9][0-9]?/[0-9]{1,2}/[0-9a-f-]{36}\.json$`)
}

func mustJSON(t *testing.T, body []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, body, "", "  "); err != nil {
		t.Fatalf("object is not JSON: %v\n%s", err, body)
	}
	return append(b.Bytes(), '\n')
}

func topicIDOf(h *testkit.Harness, topic string) string { return h.Router().TopicID(topic) }

// switchable answers 500 until healthy is set, then 200.
func switchable(healthy *atomic.Bool, failStatus int) testkit.Behavior {
	return func(int, *http.Request) testkit.Response {
		if healthy.Load() {
			return testkit.Response{Status: http.StatusOK}
		}
		return testkit.Response{Status: failStatus}
	}
}

// Always-500 with three attempts: the event is dead-lettered after its third attempt (at
// +40 s), written five minutes later (within the 30 s slack) as one object at the key of SPEC
// §5 holding a one-record array: the golden file pins the record, byte for byte.
func TestDeadLetterObjectAfterTheDelay(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusInternalServerError))
		h.CreateSubscription("orders", "sub-500", hook, router.RetryPolicy{MaxDeliveryAttempts: 3})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1"), testkit.Subject("/orders/1"), testkit.Data(map[string]any{"total": 42})))
		h.Advance(40*time.Second + 5*time.Minute)
		hook.RequireAttempts(t, 3)
		objects := h.DeadLetterObjects()
		if n := len(objects.Objects("deadletters")); n != 0 {
			t.Fatalf("%d objects before the 5-minute delay was over", n)
		}
		h.Advance(30 * time.Second)
		objs := objects.Objects("deadletters")
		if len(objs) != 1 {
			t.Fatalf("%d objects, want exactly one", len(objs))
		}
		if !objectKeyRE("sub-500").MatchString(objs[0].Key) || !strings.HasPrefix(objs[0].Key, "SUB-500/2000/1/1/0/") {
			t.Errorf("key %s, want SUB-500/2000/1/1/0/<uuid>.json", objs[0].Key)
		}
		body, _, err := objects.Get(context.Background(), "deadletters", objs[0].Key, 0)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Golden(t, "deadletter_500", string(mustJSON(t, body)))
		if objs[0].ContentType != "application/json" {
			t.Errorf("content type %q, want application/json", objs[0].ContentType)
		}
	}, testkit.WithoutJitter())
}

// Dead letters of a subscription deleted, or whose topic was deleted, before they were
// written are still written at their due time, to the destination they were dead-lettered to:
// the outbox records carry it (cluster mode does the same: router/cluster's
// TestDeadLettersOfADeletedSubscriptionAreWritten).
func TestDeadLettersOfADeletedSubscriptionAreWritten(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{MaxDeliveryAttempts: 3})
		h.CreateSubscription("gone", "shipping", hook, router.RetryPolicy{MaxDeliveryAttempts: 3})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e-orders")))
		h.Publish("gone", h.EventGridEvent(testkit.ID("e-gone")))
		h.Advance(time.Minute)
		ids := map[string]string{"orders": topicIDOf(h, "orders"), "gone": topicIDOf(h, "gone")}
		if err := h.Router().DeleteSubscription(ctx, "orders", "billing"); err != nil {
			t.Fatal(err)
		}
		if err := h.Router().DeleteTopic(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		objects := h.DeadLetterObjects()
		if n := len(objects.Objects("deadletters")); n != 0 {
			t.Fatalf("%d objects before the 5-minute delay was over", n)
		}
		h.Advance(5 * time.Minute)
		for _, c := range []struct{ topic, prefix, id string }{{"orders", "BILLING/", "e-orders"}, {"gone", "SHIPPING/", "e-gone"}} {
			recs := objects.Records(t, "deadletters", c.prefix, schemas.EventGrid, ids[c.topic])
			if len(recs) != 1 || recs[0].Event.ID != c.id {
				t.Errorf("dead letters under %s: %+v, want %s once", c.prefix, recs, c.id)
			}
		}
	}, testkit.WithoutJitter())
}

func TestBadRequestDeadLettersAfterOneAttempt(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "sub-400", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(6 * time.Minute)
		hook.RequireAttempts(t, 1)
		recs := h.DeadLetterObjects().Records(t, "deadletters", "SUB-400/", schemas.EventGrid, topicIDOf(h, "orders"))
		if len(recs) != 1 {
			t.Fatalf("%d records, want 1", len(recs))
		}
		r := recs[0]
		if r.Reason != schemas.UndeliverableDueToHTTPBadRequest || r.DeliveryAttempts != 1 || r.LastOutcome != schemas.BadRequest || r.LastHTTPStatus != 400 || r.Event.ID != "e1" {
			t.Errorf("record %s/%d/%s/%d for %s, want UndeliverableDueToHttpBadRequest after 1 attempt, BadRequest, 400, e1",
				r.Reason, r.DeliveryAttempts, r.LastOutcome, r.LastHTTPStatus, r.Event.ID)
		}
	})
}

// deadLettering is a spec delivering to url in batches of up to 100 events, dead-lettering to
// the bucket "deadletters".
func deadLettering(url string) router.SubscriptionSpec {
	spec := router.SubscriptionSpec{Destination: router.WebHook(url)}
	spec.Destination.Properties.MaxEventsPerBatch = 100
	spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
	spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
	return spec
}

// 50 events failing together (in one batch) give one object per subscription per flush, not
// 50.
func TestFiftyFailuresOneObjectPerSubscription(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		for _, sub := range []string{"sub-a", "sub-b"} {
			h.Subscribe("orders", sub, deadLettering(h.Endpoint(sub, testkit.Always(http.StatusBadRequest)).URL()))
		}
		events := make([]any, 50)
		for i := range events {
			events[i] = h.EventGridEvent(testkit.ID(fmt.Sprintf("e%02d", i)))
		}
		h.Publish("orders", events...)
		h.Advance(6 * time.Minute)
		objs := h.DeadLetterObjects().Objects("deadletters")
		if len(objs) != 2 {
			t.Fatalf("%d objects, want one per subscription (2)", len(objs))
		}
		for _, sub := range []string{"sub-a", "sub-b"} {
			recs := h.DeadLetterObjects().Records(t, "deadletters", strings.ToUpper(sub)+"/", schemas.EventGrid, topicIDOf(h, "orders"))
			if len(recs) != 50 {
				t.Errorf("%s: %d records, want 50", sub, len(recs))
			}
		}
	})
}

// MinIO down for an hour: nothing is written, nothing is lost; back up: every record is
// written exactly once.
func TestDeadLetterStoreDownThenUp(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		h.DeadLetterStore().Down()
		var ids []string
		for i := range 10 {
			id := fmt.Sprintf("e%d", i)
			ids = append(ids, id)
			h.Publish("orders", h.EventGridEvent(testkit.ID(id)))
			h.Advance(time.Minute)
		}
		h.Advance(time.Hour)
		if n := h.DeadLetterObjects().Puts(); n != 0 {
			t.Fatalf("%d objects written while the store was down", n)
		}
		st, err := h.Router().DeadLetterStatus(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending() != 10 || st.RecordsDropped != 0 {
			t.Fatalf("status %+v, want 10 pending and none dropped", st)
		}
		h.DeadLetterStore().Up()
		h.Advance(5 * time.Minute)
		var got []string
		for _, r := range h.DeadLetterObjects().Records(t, "deadletters", "", schemas.EventGrid, topicIDOf(h, "orders")) {
			got = append(got, r.Event.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, ids) {
			t.Errorf("written %v, want each of %v once", got, ids)
		}
	})
}

// MinIO down past the four-hour limit: the records are dropped and counted exactly.
func TestDeadLetterStoreDownPastFourHours(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		h.DeadLetterStore().Down()
		for i := range 7 {
			h.Publish("orders", h.EventGridEvent(testkit.ID(fmt.Sprintf("e%d", i))))
		}
		h.Advance(5*time.Minute + 30*time.Second + 4*time.Hour)
		m := h.Metrics()
		if got := m[metrics.Key{Name: metrics.DroppedEventCount, Scope: "orders/sub-1", Dim: "DeadLetterDestinationUnavailable"}]; got != 7 {
			t.Errorf("DroppedEventCount(DeadLetterDestinationUnavailable) = %d, want 7", got)
		}
		if got := m[metrics.Key{Name: metrics.DeadLetteredCount, Scope: "orders/sub-1", Dim: "UndeliverableDueToHttpBadRequest"}]; got != 7 {
			t.Errorf("DeadLetteredCount = %d, want 7", got)
		}
		h.DeadLetterStore().Up()
		h.Advance(24 * time.Hour)
		if n := h.DeadLetterObjects().Puts(); n != 0 {
			t.Errorf("%d objects written after the records were dropped", n)
		}
	})
}

// Each object written is announced as Microsoft.Storage.BlobCreated on the system topic, which
// handlers subscribe to like any topic (SPEC §5).
func TestBlobCreatedNotification(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		notify := h.Endpoint("notify")
		h.Subscribe(router.DefaultDeadLetterTopic, "on-dead-letters", router.SubscriptionSpec{
			Destination: router.WebHook(notify.URL()),
			Filter:      filter.Spec{SubjectBeginsWith: "/blobServices/default/containers/deadletters/blobs/SUB-1/"},
		})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(6 * time.Minute)
		objs := h.DeadLetterObjects().Objects("deadletters")
		if len(objs) != 1 {
			t.Fatalf("%d objects, want 1", len(objs))
		}
		notify.RequireAttempts(t, 1)
		var evs []struct {
			ID, Subject, EventType, Topic string
			Data                          router.BlobCreatedData
		}
		if err := json.Unmarshal(notify.Attempts()[0].Body, &evs); err != nil || len(evs) != 1 {
			t.Fatalf("notification body %s: %v", notify.Attempts()[0].Body, err)
		}
		ev, o := evs[0], objs[0]
		if ev.EventType != "Microsoft.Storage.BlobCreated" || ev.Subject != "/blobServices/default/containers/deadletters/blobs/"+o.Key ||
			!strings.HasSuffix(ev.Topic, "/topics/egrid-deadletters") {
			t.Errorf("notification %+v, want BlobCreated with the object's key in its subject", ev)
		}
		d := ev.Data
		if d.API != "PutBlob" || d.BlobType != "BlockBlob" || d.ContentType != "application/json" || d.ContentLength != o.Size ||
			d.ETag != o.ETag || d.URL != o.URL || d.Sequencer == "" {
			t.Errorf("notification data %+v, want PutBlob of the object %+v", d, o)
		}
	})
}

// Dead letters of the notification topic's own subscriptions are written but not announced:
// a failing notification handler must not feed itself.
func TestNotificationTopicDeadLettersAreNotAnnounced(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		h.CreateSubscription(router.DefaultDeadLetterTopic, "broken-handler", h.Endpoint("notify", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(24 * time.Hour)
		if n := len(h.DeadLetterObjects().Objects("deadletters")); n != 2 {
			t.Fatalf("%d objects, want 2: the event's and the failed notification's", n)
		}
		if got := h.Metrics()[metrics.Key{Name: metrics.PublishSuccessCount, Scope: router.DefaultDeadLetterTopic}]; got != 1 {
			t.Errorf("%d notifications published, want 1 (only the event's object)", got)
		}
	})
}

// Replay re-delivers to that one subscription, with fresh attempts and the same ids; a dry run
// changes nothing; --reason selects.
func TestReplayDeadLetters(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		var healthy atomic.Bool
		fixme := h.Endpoint("fixme", switchable(&healthy, http.StatusBadRequest))
		other := h.Endpoint("other")
		h.CreateSubscription("orders", "fixme", fixme, router.RetryPolicy{})
		h.CreateSubscription("orders", "other", other, router.RetryPolicy{})
		ids := []string{"e1", "e2", "e3"}
		for _, id := range ids {
			h.Publish("orders", h.EventGridEvent(testkit.ID(id)))
		}
		h.Advance(6 * time.Minute)
		fixme.RequireAttempts(t, 3)
		other.RequireAttempts(t, 3)
		ctx := context.Background()

		dry, err := h.Router().ReplayDeadLetters(ctx, "orders", "fixme", router.ReplayOptions{DryRun: true, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if !dry.DryRun || dry.Replayed != 3 || dry.Found != 3 || dry.Objects != 1 || len(dry.Events) != 3 || dry.Delivered != 0 {
			t.Errorf("dry run summary %+v, want 3 events that would be replayed", dry)
		}
		h.Advance(time.Hour)
		fixme.RequireAttempts(t, 3)

		none, err := h.Router().ReplayDeadLetters(ctx, "orders", "fixme", router.ReplayOptions{Reason: schemas.MaxDeliveryAttemptsExceeded, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if none.Replayed != 0 || none.Skipped != 3 || !none.Completed {
			t.Errorf("replay of another reason: %+v, want nothing replayed and 3 skipped", none)
		}

		healthy.Store(true)
		var stages []router.ReplayProgress
		sum, err := h.Router().ReplayDeadLetters(ctx, "orders", "fixme", router.ReplayOptions{
			Reason: schemas.UndeliverableDueToHTTPBadRequest, Wait: true,
			Progress: func(p router.ReplayProgress) { stages = append(stages, p) },
		})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Replayed != 3 || sum.Delivered != 3 || !sum.Completed || sum.DeadLettered != 0 {
			t.Errorf("summary %+v, want 3 replayed and delivered", sum)
		}
		if last := stages[len(stages)-1]; last != (router.ReplayProgress{Stage: router.ReplayDelivering, Done: 3, Total: 3}) || stages[0].Stage != router.ReplayReading {
			t.Errorf("progress %+v, want reading first and delivering 3/3 last", stages)
		}
		att := fixme.Attempts()[3:]
		var got []string
		for _, a := range att {
			got = append(got, a.EventIDs()...)
			if a.Header.Get("aeg-delivery-count") != "0" || a.Header.Get("aeg-subscription-name") != "FIXME" {
				t.Errorf("replayed attempt with aeg-delivery-count %s, subscription %s; want a fresh 0 to FIXME",
					a.Header.Get("aeg-delivery-count"), a.Header.Get("aeg-subscription-name"))
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, ids) {
			t.Errorf("replayed %v, want each of %v once with its original id", got, ids)
		}
		h.Advance(time.Hour)
		other.RequireAttempts(t, 3) // the other subscription never sees a replay
	})
}

// Events that fail again are dead-lettered again; a later replay takes each id once, from its
// newest record.
func TestReplayThatFailsAgain(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")), h.EventGridEvent(testkit.ID("e2")))
		h.Advance(6 * time.Minute)
		sum, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "sub-1", router.ReplayOptions{Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if sum.DeadLettered != 2 || !sum.Completed {
			t.Fatalf("summary %+v, want both dead-lettered again", sum)
		}
		h.Advance(6 * time.Minute)
		if n := len(h.DeadLetterObjects().Objects("deadletters")); n != 2 {
			t.Fatalf("%d objects, want the first one and the replay's", n)
		}
		again, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "sub-1", router.ReplayOptions{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if again.Found != 4 || again.Replayed != 2 || again.Skipped != 2 {
			t.Errorf("second replay %+v, want 4 records found, 2 replayed, 2 skipped as older duplicates", again)
		}
	})
}

func TestReplayErrors(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.Subscribe("orders", "no-dl", router.SubscriptionSpec{Destination: router.WebHook(h.Endpoint("hook").URL())})
		ctx := context.Background()
		if _, err := h.Router().ReplayDeadLetters(ctx, "orders", "no-dl", router.ReplayOptions{}); !errors.Is(err, router.ErrNoDeadLetterDestination) {
			t.Errorf("replay of a subscription without deadLetterDestination: %v", err)
		}
		if _, err := h.Router().ReplayDeadLetters(ctx, "orders", "missing", router.ReplayOptions{}); !errors.Is(err, router.ErrSubscriptionNotFound) {
			t.Errorf("replay of a missing subscription: %v", err)
		}
		h.CreateSubscription("orders", "fresh", h.Endpoint("hook2"), router.RetryPolicy{})
		sum, err := h.Router().ReplayDeadLetters(ctx, "orders", "fresh", router.ReplayOptions{Wait: true})
		if err != nil || sum.Found != 0 || sum.Replayed != 0 {
			t.Errorf("replay with nothing dead-lettered yet: %+v, %v; want an empty summary", sum, err)
		}
	})
}

// A replay whose subscription is deleted between the replay's lookup of it and the start of
// its actor is stopped by the delete: nothing reaches the deleted subscription's endpoint after
// DeleteSubscription returned. Before, the delete found no replay to stop, and the replay then
// started and went on retrying against the endpoint of a subscription that no longer existed.
func TestReplayStartingWhileItsSubscriptionIsDeleted(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Sequence(http.StatusBadRequest, http.StatusServiceUnavailable))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(6 * time.Minute) // dead-lettered at its first attempt, its object written
		lookedUp, resume := make(chan struct{}), make(chan struct{})
		router.OnReplayLookedUp(h.Router(), func() { close(lookedUp); <-resume })
		replayed := make(chan error, 1)
		go func() {
			_, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "sub-1", router.ReplayOptions{})
			replayed <- err
		}()
		<-lookedUp
		deleted := make(chan error, 1)
		go func() { deleted <- h.Router().DeleteSubscription(context.Background(), "orders", "sub-1") }()
		synctest.Wait() // the delete is done, or waits for the replay's start
		close(resume)
		if err := <-replayed; err != nil && !errors.Is(err, router.ErrSubscriptionNotFound) {
			t.Fatalf("replay: %v; want it started (then stopped by the delete) or not found", err)
		}
		if err := <-deleted; err != nil {
			t.Fatal(err)
		}
		at := h.Elapsed()
		h.Advance(time.Hour) // the endpoint answers 503: a running replay would retry
		for _, a := range hook.Attempts() {
			if a.At > at && slices.Contains(a.EventIDs(), "e1") {
				t.Errorf("e1 replayed at +%v, after its subscription was deleted at +%v", a.At, at)
			}
		}
	})
}

// A replay that looked its subscription up before the router closed, and registers only after
// Close has taken the replays to stop, is refused with ErrClosed: nothing is delivered after
// Close returned. Before, Close found no replay to stop and the replay was then spawned into
// the shut-down actor system, which stops nothing, and went on retrying against the endpoint.
func TestReplayStartingWhileTheRouterCloses(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Sequence(http.StatusBadRequest, http.StatusServiceUnavailable))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(6 * time.Minute) // dead-lettered at its first attempt, its object written
		lookedUp, resume := make(chan struct{}), make(chan struct{})
		router.OnReplayLookedUp(h.Router(), func() { close(lookedUp); <-resume })
		replayed := make(chan error, 1)
		go func() {
			_, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "sub-1", router.ReplayOptions{})
			replayed <- err
		}()
		<-lookedUp
		if err := h.Router().Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		at := h.Elapsed()
		close(resume)
		if err := <-replayed; !errors.Is(err, router.ErrClosed) {
			t.Errorf("replay registering after Close: %v, want ErrClosed", err)
		}
		h.Advance(time.Hour) // the endpoint answers 503: a running replay would retry
		for _, a := range hook.Attempts() {
			if a.At >= at && slices.Contains(a.EventIDs(), "e1") {
				t.Errorf("e1 replayed at +%v, after the router closed at +%v", a.At, at)
			}
		}
	})
}

// A replay's delivery history still being written as its subscription is deleted and created
// again under its name shows nothing under the new subscription: the delete waits for the
// histories reported before it, then removes them. Before, the replay's late history landed
// on the new subscription.
func TestReplayHistoryOfADeletedSubscription(t *testing.T) {
	st := &holdingHistoryStore{Memory: store.NewMemory()}
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		ctx := context.Background()
		hook := h.Endpoint("hook", testkit.Sequence(http.StatusBadRequest, http.StatusOK))
		h.CreateSubscription("orders", "sub-1", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(6 * time.Minute) // dead-lettered at its first attempt, its object written
		entered, release := st.hold()
		replayed := make(chan error, 1)
		go func() {
			_, err := h.Router().ReplayDeadLetters(ctx, "orders", "sub-1", router.ReplayOptions{Wait: true})
			replayed <- err
		}()
		<-entered // the replay delivered e1; its history write waits
		if err := <-replayed; err != nil {
			t.Fatal(err)
		}
		recreated := make(chan error, 1)
		go func() {
			if err := h.Router().DeleteSubscription(ctx, "orders", "sub-1"); err != nil {
				recreated <- err
				return
			}
			recreated <- h.Router().CreateSubscription(ctx, "orders", "sub-1", router.SubscriptionSpec{Destination: router.WebHook(h.Endpoint("new").URL())})
		}()
		synctest.Wait() // deleted and created again, or the delete waits for the write
		release()
		if err := <-recreated; err != nil {
			t.Fatal(err)
		}
		if e, err := h.Router().Explain(ctx, "orders", "sub-1", "e1"); !errors.Is(err, router.ErrEventNotFound) {
			t.Errorf("explaining the replayed event under the new subscription: %+v, %v; want ErrEventNotFound", e, err)
		}
	}, testkit.WithStore(st))
}

// A subscription with a deadLetterDestination needs somewhere to put dead letters: a router
// without a dead-letter store refuses it at create time, as Event Grid refuses a destination
// it cannot reach.
func TestDeadLetterDestinationNeedsAStore(t *testing.T) {
	ctx := context.Background()
	spec := router.SubscriptionSpec{Destination: router.SinkDestination("s")}
	spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
	spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
	newRouter := func(deps router.Deps) *router.Router {
		deps.Sinks = map[string]sinks.Sink{"s": sinks.Func(func(context.Context, *sinks.Batch) error { return nil })}
		r, err := router.New(router.Config{}, deps)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close(ctx) })
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	err := newRouter(router.Deps{}).CreateSubscription(ctx, "orders", "sub-1", spec)
	if err == nil || !strings.Contains(err.Error(), "--minio-endpoint") {
		t.Errorf("without a store: %v, want a refusal that says how to configure one", err)
	}
	observed := newRouter(router.Deps{OnDeadLetter: func(*router.DeadLetter) {}})
	if err := observed.CreateSubscription(ctx, "orders", "sub-1", spec); err != nil {
		t.Errorf("with an OnDeadLetter observer: %v", err)
	}
	withStore := newRouter(router.Deps{DeadLetterStore: testkit.NewObjectStore()})
	if err := withStore.CreateSubscription(ctx, "orders", "sub-1", spec); err != nil {
		t.Errorf("with a store: %v", err)
	}
	if !slices.Contains(withStore.Topics(), router.DefaultDeadLetterTopic) {
		t.Errorf("topics %v: the notification topic was not created", withStore.Topics())
	}
	bad := spec
	bad.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
	bad.DeadLetterDestination.Properties.BlobContainerName = "Dead_Letters"
	if err := withStore.CreateSubscription(ctx, "orders", "sub-2", bad); err == nil || !strings.Contains(err.Error(), "blobContainerName") {
		t.Errorf("an invalid container name: %v, want a refusal naming blobContainerName", err)
	}
	// MinIO reserves "minio": it refuses every request on it (AllAccessDisabled), so the
	// destination could never be written.
	bad.DeadLetterDestination.Properties.BlobContainerName = "minio"
	if err := withStore.CreateSubscription(ctx, "orders", "sub-2", bad); err == nil || !strings.Contains(err.Error(), "reserved by MinIO") {
		t.Errorf("the reserved container name minio: %v, want a refusal saying MinIO reserves it", err)
	}
}

// A subscription stored with a deadLetterDestination and restored by a router started without
// a dead-letter store (egrid serve without --minio-endpoint) does not deliver: delivering would
// drop every event that ends undelivered. It shows Failed, naming the remedy, and keeps its
// events, which a router started with a dead-letter store again delivers and dead-letters.
func TestRestoredWithoutAStoreKeepsItsEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := store.NewMemory()
		spec := router.SubscriptionSpec{Destination: router.SinkDestination("s")}
		spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
		spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
		var attempts atomic.Int64
		failing := map[string]sinks.Sink{"s": sinks.Func(func(context.Context, *sinks.Batch) error {
			attempts.Add(1)
			return &sinks.DeliveryError{Outcome: schemas.BadRequest, StatusCode: 400}
		})}
		objects := testkit.NewObjectStore()
		r1, err := router.New(router.Config{}, router.Deps{Store: st, Sinks: failing, DeadLetterStore: objects})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r1.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := r1.CreateSubscription(ctx, "orders", "sub-1", spec); err != nil {
			t.Fatal(err)
		}
		_ = r1.Close(ctx)

		r2, err := router.New(router.Config{}, router.Deps{Store: st, Sinks: failing})
		if err != nil {
			t.Fatalf("restoring without a store: %v", err)
		}
		p, err := r2.Provisioning("orders", "sub-1")
		if err != nil || p.State != router.StateFailed || !strings.Contains(p.Message, "--minio-endpoint") {
			t.Errorf("restored without a dead-letter store: %+v, %v; want Failed naming --minio-endpoint", p, err)
		}
		if err := r2.Publish(ctx, "orders", json.RawMessage(`{"id":"e1","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`)); err != nil {
			t.Fatal(err)
		}
		testkit.Advance(max(time.Minute, router.TrimIdleMax)) // the journal's trimmer looks meanwhile
		if n := attempts.Load(); n != 0 {
			t.Errorf("%d attempts while it cannot dead-letter, want none", n)
		}
		if got := r2.Metrics().Get(metrics.Key{Name: metrics.DroppedEventCount, Scope: "orders/sub-1", Dim: "DeadLetterDestinationUnavailable"}); got != 0 {
			t.Errorf("DroppedEventCount = %d, want 0: the event is kept", got)
		}
		_ = r2.Close(ctx)

		r3, err := router.New(router.Config{}, router.Deps{Store: st, Sinks: failing, DeadLetterStore: objects})
		if err != nil {
			t.Fatal(err)
		}
		defer r3.Close(ctx)
		testkit.Advance(6 * time.Minute)
		if n := len(objects.Objects("deadletters")); n != 1 || attempts.Load() != 1 {
			t.Errorf("with the store again: %d objects after %d attempts, want the kept event dead-lettered after its one attempt", n, attempts.Load())
		}
	})
}

// Namespace topics use "<namespace>/<topic>/<subscription>/..." keys and seed 002's record
// shape.
func TestNamespaceTopicDeadLetters(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateTopic("ns-orders", router.TopicSpec{Kind: router.KindNamespace})
		h.CreateSubscription("ns-orders", "Sub-1", h.Endpoint("hook", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		h.Publish("ns-orders", h.CloudEvent(testkit.ID("c1")))
		h.Advance(6 * time.Minute)
		objs := h.DeadLetterObjects().Objects("deadletters")
		if len(objs) != 1 || !strings.HasPrefix(objs[0].Key, "egrid/ns-orders/Sub-1/2000/1/1/0/") {
			t.Fatalf("objects %+v, want one under egrid/ns-orders/Sub-1/2000/1/1/0/", objs)
		}
		body, _, _ := h.DeadLetterObjects().Get(context.Background(), "deadletters", objs[0].Key, 0)
		var recs []struct {
			DeadLetterProperties map[string]any `json:"deadLetterProperties"`
			Event                map[string]any `json:"event"`
		}
		if err := json.Unmarshal(body, &recs); err != nil || len(recs) != 1 {
			t.Fatalf("object %s: %v", body, err)
		}
		p := recs[0].DeadLetterProperties
		if p["deliveryresult"] != "BadRequest" || p["deliveryattempts"] != float64(1) || recs[0].Event["id"] != "c1" || p["publishutc"] == nil {
			t.Errorf("record %s, want the namespace shape of seed 002", body)
		}
		read, err := h.Router().DeadLetterRecords(context.Background(), "ns-orders", "Sub-1", router.DeadLetterQuery{})
		if err != nil || len(read.Entries) != 1 || read.Entries[0].Reason != schemas.UndeliverableDueToHTTPBadRequest {
			t.Errorf("records read back: %+v, %v", read, err)
		}
	})
}

// Issue 5: the dead-letter outbox is kept in the router's store. A router closed before the
// delay passes leaves its dead letters there, and the next router on the same store writes
// them once the delay after their last attempt has passed (SPEC §5), not earlier.
func TestDeadLettersSurviveRestart(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")), h.EventGridEvent(testkit.ID("e2")))
		h.Settle()
		ended := h.Elapsed() // 400 ends the events at their first attempt
		h.Advance(time.Minute)
		h.Restart()
		h.Settle()
		if n := h.DeadLetterObjects().Puts(); n != 0 {
			t.Fatalf("%d objects written by the restart, want none: the records wait in the store", n)
		}
		h.Advance(deadletter.DefaultDelay - time.Minute - ended - time.Second)
		if n := h.DeadLetterObjects().Puts(); n != 0 {
			t.Fatalf("%d objects written %s after the events ended, before the delay", n, h.Elapsed()-ended)
		}
		h.Advance(time.Minute) // the delay and its slack (Delay/10 = 30 s) have passed
		recs := h.DeadLetterObjects().Records(t, "deadletters", "", schemas.EventGrid, topicIDOf(h, "orders"))
		var ids []string
		for _, r := range recs {
			ids = append(ids, r.Event.ID)
			if r.Reason != schemas.UndeliverableDueToHTTPBadRequest || r.LastHTTPStatus != 400 {
				t.Errorf("record of %s: reason %s, status %d; want UndeliverableDueToHttpBadRequest, 400", r.Event.ID, r.Reason, r.LastHTTPStatus)
			}
		}
		if slices.Sort(ids); !slices.Equal(ids, []string{"e1", "e2"}) {
			t.Fatalf("records written after the restart: %v, want e1 and e2", ids)
		}
		st, err := h.Router().DeadLetterStatus(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Pending() != 0 || st.RecordsWritten != 2 {
			t.Errorf("dead-letter status %+v, want both written and nothing pending", st)
		}
		// Written records leave the store: another restart writes nothing again.
		h.Restart()
		h.Advance(time.Hour)
		if n := h.DeadLetterObjects().Puts(); n != 1 {
			t.Errorf("%d objects after a second restart, want still 1", n)
		}
	})
}

// A router on its own in-memory store (no Deps.Store) keeps the outbox in memory: Close
// writes the dead letters still waiting out their delay rather than lose them.
func TestCloseFlushesAnInMemoryOutbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		objects := testkit.NewObjectStore()
		r := deadLetteringRouter(t, nil, objects)
		if objects.Puts() != 0 {
			t.Fatal("written before the delay")
		}
		topicID := r.TopicID("orders")
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(objects.Records(t, "deadletters", "", schemas.EventGrid, topicID)); n != 1 {
			t.Errorf("%d records written by Close, want 1", n)
		}
	})
}

// The admin routes: list objects, read records, replay with an NDJSON progress stream.
func TestDeadLetterAdminRoutes(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "sub-1", h.Endpoint("hook", testkit.Always(http.StatusBadRequest)), router.RetryPolicy{})
		h.Subscribe("orders", "no-dl", router.SubscriptionSpec{Destination: router.WebHook(h.Endpoint("other").URL())})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")), h.EventGridEvent(testkit.ID("e2")))
		h.Advance(6 * time.Minute)
		handler := httpapi.New(h.Router())
		do := func(method, path, body string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(method, path, strings.NewReader(body))
			req.Host = "localhost" // --insecure-dev lets in requests without credentials from this machine only (router/devguard)
			handler.ServeHTTP(rec, req)
			return rec
		}
		base := "/admin/topics/orders/eventSubscriptions/sub-1/deadLetters"

		rec := do("GET", base, "")
		var list struct {
			Value []struct{ Key string }
		}
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &list) != nil || len(list.Value) != 1 || !objectKeyRE("sub-1").MatchString(list.Value[0].Key) {
			t.Fatalf("GET %s: %d %s", base, rec.Code, rec.Body)
		}
		rec = do("GET", base+"/records?reason=undeliverableduetohttpbadrequest&key="+list.Value[0].Key, "")
		var recs struct {
			Value []httpapi.DeadLetterRecordView
		}
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &recs) != nil || len(recs.Value) != 2 || recs.Value[0].LastHTTPStatusCode != 400 {
			t.Fatalf("GET records: %d %s", rec.Code, rec.Body)
		}
		if rec := do("GET", base+"/records?reason=MaxDeliveryAttemptsExceeded", ""); !strings.Contains(rec.Body.String(), `"value": []`) {
			t.Errorf("records of another reason: %s, want none", rec.Body)
		}
		if strings.Contains(do("GET", base+"/records", "").Body.String(), `"more"`) {
			t.Errorf("GET records within the default limit says there is more")
		}
		rec = do("GET", base+"/records?limit=1", "")
		var limited struct {
			Value []httpapi.DeadLetterRecordView
			More  *httpapi.DeadLetterMoreView
		}
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &limited) != nil || len(limited.Value) != 1 || limited.More == nil ||
			limited.More.Records != 1 || limited.More.Objects != 0 || !limited.More.Since.Equal(limited.Value[0].Written) {
			t.Errorf("GET records?limit=1: %d %s; want one record, and one more in its object", rec.Code, rec.Body)
		}
		for path, want := range map[string]int{
			base + "?since=yesterday":                                    400,
			base + "/records?reason=Sunspots":                            400,
			base + "/records?limit=0":                                    400,
			base + "/records?limit=all":                                  400,
			"/admin/topics/orders/eventSubscriptions/no-dl/deadLetters":  400,
			"/admin/topics/orders/eventSubscriptions/ghost/deadLetters":  404,
			"/admin/topics/nothing/eventSubscriptions/sub-1/deadLetters": 404,
			base + "?since=2000-01-01T00:10:00Z":                         200,
			"/admin/deadLetters":                                         200,
		} {
			if rec := do("GET", path, ""); rec.Code != want {
				t.Errorf("GET %s: %d %s, want %d", path, rec.Code, rec.Body, want)
			}
		}

		rec = do("POST", base+"/replay", `{"dryRun":true,"wait":true}`)
		if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("POST replay: %d %s", rec.Code, rec.Body)
		}
		var lines []httpapi.ReplayStreamLine
		sc := bufio.NewScanner(rec.Body)
		for sc.Scan() {
			var l httpapi.ReplayStreamLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			lines = append(lines, l)
		}
		last := lines[len(lines)-1]
		if lines[0].Progress == nil || last.Summary == nil || last.Summary.Replayed != 2 || !last.Summary.DryRun {
			t.Errorf("replay stream %+v, want progress lines then a dry-run summary of 2 events", lines)
		}
		if rec := do("POST", base+"/replay", `{"reason":"nope"}`); rec.Code != 400 {
			t.Errorf("replay with a bad reason: %d %s", rec.Code, rec.Body)
		}
		if rec := do("POST", base+"/replay", `{"dry_run":true}`); rec.Code != 400 {
			t.Errorf("replay with a misspelt field: %d %s", rec.Code, rec.Body)
		}
	})
}

// countingObjects counts the Puts begun and holds each until its context ends, as a MinIO that
// stopped answering does.
type countingObjects struct {
	sinks.ObjectStore
	puts atomic.Int64
}

func (o *countingObjects) Put(ctx context.Context, bucket, key string, body []byte, opts sinks.PutOptions) (sinks.ObjectInfo, error) {
	o.puts.Add(1)
	<-ctx.Done()
	return sinks.ObjectInfo{}, ctx.Err()
}

// A Close whose deadline has passed gives the in-memory outbox's flush no time: no write is
// begun for it, where the negative time left became no timeout at all and the shutdown went on
// writing for as long as the object store took.
func TestCloseWithADeadlinePastDoesNotFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		objects := &countingObjects{ObjectStore: testkit.NewObjectStore()}
		r := deadLetteringRouter(t, nil, objects) // attempted, waiting out the dead-letter delay
		past, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
		defer cancel()
		_ = r.Close(past)
		testkit.Advance(time.Hour) // whatever the shutdown goes on doing in the background
		if n := objects.puts.Load(); n != 0 {
			t.Errorf("%d object writes begun by a Close whose deadline had passed, want none", n)
		}
	})
}

// deadLetteringRouter is a router (on st, or its own in-memory store when nil) with a
// subscription sub-1 of topic orders that dead-letters to objects every event its sink
// refuses (400), and one event e1 published and attempted a minute ago, its dead letter
// waiting out its delay.
func deadLetteringRouter(t *testing.T, st store.Store, objects sinks.ObjectStore) *router.Router {
	t.Helper()
	ctx := context.Background()
	spec := router.SubscriptionSpec{Destination: router.SinkDestination("s")}
	spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
	spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
	failing := map[string]sinks.Sink{"s": sinks.Func(func(context.Context, *sinks.Batch) error {
		return &sinks.DeliveryError{Outcome: schemas.BadRequest, StatusCode: 400}
	})}
	r, err := router.New(router.Config{}, router.Deps{Store: st, Sinks: failing, DeadLetterStore: objects})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "orders", "sub-1", spec); err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(ctx, "orders", json.RawMessage(`{"id":"e1","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`)); err != nil {
		t.Fatal(err)
	}
	testkit.Advance(time.Minute)
	return r
}
