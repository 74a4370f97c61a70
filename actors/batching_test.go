package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// batched is spec with batching on: maxEventsPerBatch and preferredBatchSizeInKilobytes as
// given (0 leaves one unset, SPEC §2.3).
func batched(url string, maxEvents, preferredKB int, policy router.RetryPolicy) router.SubscriptionSpec {
	s := spec(url, policy, true)
	s.Destination.Properties.MaxEventsPerBatch = maxEvents
	s.Destination.Properties.PreferredBatchSizeInKilobytes = preferredKB
	return s
}

// requireEachOnce fails the test unless delivered holds every id of want exactly once.
func requireEachOnce(t *testing.T, delivered []string, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range delivered {
		seen[id]++
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("%s delivered %d times, want once", id, seen[id])
		}
		delete(seen, id)
	}
	for id, n := range seen {
		t.Errorf("%s delivered %d times, but was never published", id, n)
	}
}

// 10 000 events all ready at once with maxEventsPerBatch 100: no request carries more than
// 100 events, none carries fewer while more are ready (so exactly 100 requests), and every
// event is delivered exactly once. The events outgrow the subscription's in-memory window
// (4096), so most are read back from the journal.
func TestBatchingTenThousandEvents(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		gate := make(chan struct{})
		hook := h.Endpoint("hook", func(int, *http.Request) testkit.Response {
			<-gate // hold the first requests until every event has been published
			return testkit.Response{Status: http.StatusOK}
		})
		h.Subscribe(topicName, subName, batched(hook.URL(), 100, 0, router.RetryPolicy{}))
		var ids []string
		for chunk := range 10 {
			events := make([]any, 1000)
			for i := range events {
				id := fmt.Sprintf("e%05d", chunk*1000+i)
				ids = append(ids, id)
				events[i] = h.EventGridEvent(testkit.ID(id))
			}
			h.Publish(topicName, events...)
		}
		close(gate)
		h.Settle()

		attempts := hook.Attempts()
		for i, a := range attempts {
			if n := len(a.EventIDs()); n > 100 || n == 0 {
				t.Fatalf("request %d carried %d events; want 1 to 100", i, n)
			}
		}
		if len(attempts) != 100 {
			t.Errorf("%d requests for 10 000 ready events, want 100 full batches", len(attempts))
		}
		requireEachOnce(t, hook.Delivered(), ids)
		requireCounters(t, h, topicName, subName, map[string]int64{"DeliverySuccessCount": 10000})
	})
}

// With preferredBatchSizeInKilobytes 4, a 10 KB event goes alone and the small events around
// it share batches (SPEC §2.3: a single event larger than the preferred size goes alone).
func TestOversizeEventGoesAlone(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook")
		h.Subscribe(topicName, subName, batched(hook.URL(), 0, 4, router.RetryPolicy{}))
		big := strings.Repeat("x", 10*1024)
		h.Publish(topicName,
			h.EventGridEvent(testkit.ID("small-1")), h.EventGridEvent(testkit.ID("small-2")),
			h.EventGridEvent(testkit.ID("big"), testkit.Data(map[string]string{"blob": big})),
			h.EventGridEvent(testkit.ID("small-3")), h.EventGridEvent(testkit.ID("small-4")),
		)
		h.Settle()

		var got []string
		for _, a := range hook.Attempts() {
			got = append(got, strings.Join(a.EventIDs(), ","))
			if len(a.Body) > 4096 && len(a.EventIDs()) != 1 {
				t.Errorf("a %d-byte request carried %v; only a single event may exceed the preferred 4 KB", len(a.Body), a.EventIDs())
			}
		}
		slices.Sort(got) // the requests run concurrently
		if want := []string{"big", "small-1,small-2", "small-3,small-4"}; !slices.Equal(got, want) {
			t.Errorf("requests %q, want %q", got, want)
		}
	})
}

// A failing batch is retried as a whole: all its events are attempted again, none is lost and
// none is delivered twice. One attempt at a time (MaxInFlight 1) makes the order exact.
func TestFailingBatchRetriesAllItsEvents(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Sequence(500, 200, 500, 200))
		h.Subscribe(topicName, subName, batched(hook.URL(), 10, 0, router.RetryPolicy{}))
		var ids []string
		var events []any
		for i := range 25 {
			ids = append(ids, fmt.Sprintf("e%02d", i))
			events = append(events, h.EventGridEvent(testkit.ID(ids[i])))
		}
		h.Publish(topicName, events...)
		h.Advance(time.Minute)

		var requests []string
		for _, a := range hook.Attempts() {
			requests = append(requests, fmt.Sprintf("+%v %d %s", a.At, a.Status, strings.Join(a.EventIDs(), ",")))
		}
		want := []string{
			"+0s 500 e00,e01,e02,e03,e04,e05,e06,e07,e08,e09",
			"+0s 200 e10,e11,e12,e13,e14,e15,e16,e17,e18,e19",
			"+0s 500 e20,e21,e22,e23,e24",
			"+10s 200 e00,e01,e02,e03,e04,e05,e06,e07,e08,e09",
			"+10s 200 e20,e21,e22,e23,e24",
		}
		if !slices.Equal(requests, want) {
			t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(requests, "\n"), strings.Join(want, "\n"))
		}
		requireEachOnce(t, hook.Delivered(), ids)
		h.DeadLetters(subName).RequireNone(t)
		requireCounters(t, h, topicName, subName, map[string]int64{
			"DeliverySuccessCount": 25, "DeliveryAttemptFailCount{GenericError}": 15,
		})
		for i, a := range hook.Attempts() {
			if want := []string{"0", "0", "0", "1", "1"}[i]; a.Header.Get("aeg-delivery-count") != want {
				t.Errorf("request %d: aeg-delivery-count %q, want %s", i, a.Header.Get("aeg-delivery-count"), want)
			}
		}
	}, testkit.WithoutJitter(), testkit.WithConfig(router.Config{MaxInFlight: 1}))
}

// Retried events are batched with new ones, and each keeps its own attempt count, schedule and
// limit (SPEC §2.3). The endpoint refuses connections at first (SocketError: probation 30 s),
// so the retries of e1-e3 (due at +10s) and the new e4, e5 (published at +5s) all wait and go
// out together as the probe at +30s. That batch fails with 500: e1-e3 have had their 2
// attempts and are dead-lettered, while e4 and e5, on their first attempt, are retried and
// delivered.
func TestRetriedEventsRebatchedWithNewOnes(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Sequence(500, 200))
		h.Transport().Refuse("hook.test")
		h.Subscribe(topicName, subName, batched(hook.URL(), 10, 0, router.RetryPolicy{MaxDeliveryAttempts: 2}))
		h.Publish(topicName, h.EventGridEvent(testkit.ID("e1")), h.EventGridEvent(testkit.ID("e2")), h.EventGridEvent(testkit.ID("e3")))
		h.Advance(5 * time.Second)
		h.Publish(topicName, h.EventGridEvent(testkit.ID("e4")), h.EventGridEvent(testkit.ID("e5")))
		h.Advance(15 * time.Second)
		h.Transport().Handle("hook.test", hook) // the endpoint comes up at +20s
		h.Advance(2 * time.Minute)

		testkit.Golden(t, "timeline-rebatched", report(h, "retried events re-batched with new ones; max attempts 2", topicName, subName))
		att := hook.Attempts()
		if len(att) != 2 {
			t.Fatalf("%d requests reached the endpoint, want 2", len(att))
		}
		if ids := att[0].EventIDs(); att[0].At != 30*time.Second || !slices.Equal(ids, []string{"e4", "e5", "e1", "e2", "e3"}) {
			t.Errorf("first request at +%v with %v; want the probe at +30s with e4, e5, e1, e2, e3", att[0].At, ids)
		}
		if got := att[0].Header.Get("aeg-delivery-count"); got != "1" {
			t.Errorf("mixed batch: aeg-delivery-count %q, want 1 (the most earlier attempts of any of its events)", got)
		}
		requireEachOnce(t, hook.Delivered(), []string{"e4", "e5"})
		recs := h.DeadLetters(subName).Records()
		var dl []string
		for _, r := range recs {
			dl = append(dl, fmt.Sprintf("%s %s %d", r.Event.ID, r.Reason, r.DeliveryAttempts))
		}
		if want := []string{"e1 MaxDeliveryAttemptsExceeded 2", "e2 MaxDeliveryAttemptsExceeded 2", "e3 MaxDeliveryAttemptsExceeded 2"}; !slices.Equal(dl, want) {
			t.Errorf("dead letters %q, want %q", dl, want)
		}
		requireCounters(t, h, topicName, subName, map[string]int64{
			"DeliverySuccessCount": 2, "DeliveryAttemptFailCount{SocketError}": 3, "DeliveryAttemptFailCount{GenericError}": 5,
			"DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 3,
		})
	}, testkit.WithoutJitter())
}

// CloudEvents delivery framing (SPEC §2.3): unbatched, each event alone as
// application/cloudevents+json; with batching on, a JSON array as
// application/cloudevents-batch+json — also when only one event is ready, so a batching
// receiver sees one format.
func TestCloudEventsBatchContentType(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateTopic("ce-topic", router.TopicSpec{InputSchema: "CloudEventSchemaV1_0"})
		batchHook, singleHook := h.Endpoint("batch"), h.Endpoint("single")
		bs := batched(batchHook.URL(), 10, 0, router.RetryPolicy{})
		bs.EventDeliverySchema = "CloudEventSchemaV1_0"
		h.Subscribe("ce-topic", "batching", bs)
		ss := spec(singleHook.URL(), router.RetryPolicy{}, false)
		ss.EventDeliverySchema = "CloudEventSchemaV1_0"
		h.Subscribe("ce-topic", "single", ss)

		h.Publish("ce-topic", h.CloudEvent(testkit.ID("c1")), h.CloudEvent(testkit.ID("c2")), h.CloudEvent(testkit.ID("c3")))
		h.Settle()
		h.Publish("ce-topic", h.CloudEvent(testkit.ID("c4")))
		h.Settle()

		const batchType, singleType = "application/cloudevents-batch+json; charset=utf-8", "application/cloudevents+json; charset=utf-8"
		ba := batchHook.Attempts()
		if len(ba) != 2 {
			t.Fatalf("batching subscription: %d requests, want 2", len(ba))
		}
		for i, want := range [][]string{{"c1", "c2", "c3"}, {"c4"}} {
			var arr []map[string]any
			if err := json.Unmarshal(ba[i].Body, &arr); err != nil {
				t.Errorf("batch request %d: body %s is not a JSON array: %v", i, ba[i].Body, err)
			}
			if ct := ba[i].Header.Get("Content-Type"); ct != batchType {
				t.Errorf("batch request %d: Content-Type %q, want %q", i, ct, batchType)
			}
			if ids := ba[i].EventIDs(); !slices.Equal(ids, want) {
				t.Errorf("batch request %d: events %v, want %v", i, ids, want)
			}
		}
		sa := singleHook.Attempts()
		if len(sa) != 4 {
			t.Fatalf("unbatched subscription: %d requests, want 4", len(sa))
		}
		for i, a := range sa {
			var obj map[string]any
			if err := json.Unmarshal(a.Body, &obj); err != nil || obj["specversion"] != "1.0" {
				t.Errorf("unbatched request %d: body %s, want one structured CloudEvent", i, a.Body)
			}
			if ct := a.Header.Get("Content-Type"); ct != singleType {
				t.Errorf("unbatched request %d: Content-Type %q, want %q", i, ct, singleType)
			}
		}
	})
}

// slowReads is a store whose journal reads take readDelay (virtual time), as a disk's or
// JetStream's do. Once crashed is set it drops subscription state updates, as a process killed
// before its last state write would have.
type slowReads struct {
	store.Store
	crashed *atomic.Bool
}

func (s slowReads) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if s.crashed != nil && s.crashed.Load() {
		return nil
	}
	return s.Store.UpdateSubscription(ctx, topic, sub, u)
}

const readDelay = 5 * time.Millisecond

func (s slowReads) Read(ctx context.Context, topic string, from uint64, max int) ([]store.Entry, error) {
	<-time.After(readDelay)
	return s.Store.Read(ctx, topic, from, max)
}

// TestBatchWaitsForOneCatchUpReadAtMost restarts a batching subscription whose filter matches
// one event in 100 001, as after a crash with that event in flight (its last state update is
// lost, so the cursor stays before it): its catch-up reads the journal a window at a time, and
// the matched event, fewer than a batch, waits for the read in flight and then goes, with its
// catch-up still under way; it waited for every read of the catch-up (~100 of them), its time
// to live running. (A graceful stop parks the event it cuts instead, and the cursor passes the
// rest: TestCloseCutsOnlyTheAttemptPastTheStopGrace in router.)
func TestBatchWaitsForOneCatchUpReadAtMost(t *testing.T) {
	var crashed atomic.Bool
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		var restarted atomic.Bool
		hook := h.Endpoint("hook", func(n int, r *http.Request) testkit.Response {
			if !restarted.Load() {
				return testkit.Response{Hang: true} // in flight at the restart: read again after it
			}
			return testkit.Response{Status: http.StatusOK}
		})
		s := spec(hook.URL(), router.RetryPolicy{}, false)
		s.Filter = filter.Spec{SubjectBeginsWith: "/match"}
		s.Destination.Properties.PreferredBatchSizeInKilobytes = 64 // a batch of up to 5 000 events
		h.Subscribe(topicName, subName, s)
		h.Publish(topicName, h.EventGridEvent(testkit.ID("m1"), testkit.Subject("/match/1")))
		h.Settle()
		for range 20 {
			events := make([]any, 5000)
			for i := range events {
				events[i] = h.EventGridEvent(testkit.Subject("/other"))
			}
			h.Publish(topicName, events...)
		}
		h.Settle()
		crashed.Store(true)
		restarted.Store(true)
		h.Restart()
		crashed.Store(false)
		restart := h.Elapsed()
		h.Advance(time.Minute)
		att := hook.Attempts()
		last := att[len(att)-1]
		if last.Status != http.StatusOK || !slices.Equal(last.EventIDs(), []string{"m1"}) {
			t.Fatalf("last attempt %v answered %d; want m1 delivered after the restart", last.EventIDs(), last.Status)
		}
		if waited := last.At - restart; waited > 3*readDelay {
			t.Fatalf("m1 went out %v after the restart; want it after one journal read or two (%v each), not after the catch-up", waited, readDelay)
		}
	}, testkit.WithStore(slowReads{store.NewMemory(), &crashed}))
}
