package router_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// deadLetterEach publishes each id to topic orders, whose subscription dead-letters it at
// once, and waits out the dead-letter delay after each: one object per event, the last one
// newest.
func deadLetterEach(t *testing.T, h *testkit.Harness, ids ...string) {
	t.Helper()
	for _, id := range ids {
		h.Publish("orders", h.EventGridEvent(testkit.ID(id)))
		h.Advance(6 * time.Minute)
	}
	if n := len(h.DeadLetterObjects().Objects("deadletters")); n != len(ids) {
		t.Fatalf("%d dead-letter objects, want %d", n, len(ids))
	}
}

// replayedIDs returns the event ids of the attempts of e after its first n, in order.
func replayedIDs(e *testkit.Endpoint, n int) []string {
	var ids []string
	for _, a := range e.Attempts()[n:] {
		ids = append(ids, a.EventIDs()...)
	}
	return ids
}

// replayHeldOneObjectAtATime dead-letters e1, e2 and e3 of orders/billing, one object each,
// and starts their replay with a window of one byte against an endpoint that holds every
// replayed delivery until release is closed. done receives the replay's summary.
func replayHeldOneObjectAtATime(t *testing.T, h *testkit.Harness) (hook *testkit.Endpoint, release chan struct{}, done chan *router.ReplaySummary) {
	t.Helper()
	var replaying atomic.Bool
	release = make(chan struct{})
	hook = h.Endpoint("hook", func(int, *http.Request) testkit.Response {
		if !replaying.Load() {
			return testkit.Response{Status: http.StatusBadRequest}
		}
		<-release
		return testkit.Response{Status: http.StatusOK}
	})
	h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
	deadLetterEach(t, h, "e1", "e2", "e3")
	router.SetReplayWindow(h.Router(), 1)
	replaying.Store(true)
	done = make(chan *router.ReplaySummary, 1)
	go func() {
		sum, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{Wait: true})
		if err != nil {
			t.Error(err)
		}
		done <- sum
	}()
	return hook, release, done
}

// A replay holds about a window of events, not every object it selected: it takes an object's
// events once those of the newer objects it holds are under the window. With a window of one
// byte, the events of one object at a time are out for delivery. Before, the replay read the
// records of every object selected into memory before it started, and delivered them all at
// once.
func TestReplayReadsObjectsAsEarlierEventsSettle(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook, release, done := replayHeldOneObjectAtATime(t, h)
		h.Settle()
		if got := replayedIDs(hook, 3); !slices.Equal(got, []string{"e3"}) {
			t.Errorf("replayed %v while the newest object's event is being delivered; want only e3", got)
		}
		close(release)
		h.Advance(time.Minute)
		sum := <-done
		if sum == nil {
			t.FailNow()
		}
		if got := replayedIDs(hook, 3); !slices.Equal(got, []string{"e3", "e2", "e1"}) {
			t.Errorf("replayed %v, want each event once, newest object first", got)
		}
		if sum.Objects != 3 || sum.Replayed != 3 || sum.Delivered != 3 || !sum.Completed {
			t.Errorf("summary %+v, want 3 objects, 3 events replayed and delivered", sum)
		}
	})
}

// An object that changed between the replay's selection and the replay coming to it is not
// taken: its events are counted as unread and the summary says so (incomplete, not completed);
// the other objects' events are replayed. (The replay keeps no list of the objects it selected, so it counts what it no
// longer finds rather than naming each object.)
func TestReplaySkipsAnObjectChangedSinceItsSelection(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook, release, done := replayHeldOneObjectAtATime(t, h)
		h.Settle() // e3 is being delivered; e2's object has not been read again yet
		store := h.DeadLetterObjects()
		objs := store.Objects("deadletters")
		slices.SortFunc(objs, func(a, b sinks.ObjectInfo) int { return a.LastModified.Compare(b.LastModified) })
		changed := objs[1] // e2's
		if _, err := store.Put(context.Background(), "deadletters", changed.Key, []byte("[]"), sinks.PutOptions{
			ContentType: "application/json", Metadata: changed.Metadata,
		}); err != nil {
			t.Fatal(err)
		}
		close(release)
		h.Advance(time.Minute)
		sum := <-done
		if sum == nil {
			t.FailNow()
		}
		if got := replayedIDs(hook, 3); !slices.Equal(got, []string{"e3", "e1"}) {
			t.Errorf("replayed %v, want e3 and e1: e2's object changed", got)
		}
		if sum.Replayed != 3 || sum.Delivered != 2 || sum.Unread != 1 || sum.Completed || !sum.Incomplete || len(sum.Problems) != 1 || sum.IncompleteReason != sum.Problems[0] ||
			!strings.HasPrefix(sum.Problems[0], "1 events selected were not found when the replay read their objects again") {
			t.Errorf("summary %+v, want 2 delivered, 1 unread and a problem saying the replay did not find it again", sum)
		}
	})
}

// A replay's summary lists at most MaxListedReplayEvents events (two here) and counts the
// others, so a dry run of many objects answers with a bounded list. Before, it listed every
// event selected.
func TestReplaySummaryListsABoundedNumberOfEvents(t *testing.T) {
	router.SetMaxListedReplayEvents(t, 2)
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		deadLetterEach(t, h, "e1", "e2", "e3")
		sum, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for _, ev := range sum.Events {
			listed = append(listed, ev.ID)
		}
		if sum.Replayed != 3 || sum.Unlisted != 1 || !slices.Equal(listed, []string{"e3", "e2"}) {
			t.Errorf("dry run: %d would be replayed, listed %v, %d unlisted; want 3, the newest two listed and 1 unlisted", sum.Replayed, listed, sum.Unlisted)
		}
	})
}

// A replay whose store fails its walk of the objects again through every retry (1 s, 10 s,
// 1 min) reads no more objects: it ends at once, its summary saying why and how to take what
// it left, counted as unread. Before, each later object was
// tried again just as long: a store gone for good (or credentials revoked) during a replay of
// N objects held the replay — and every other replay of the subscription — for N × 71 s.
func TestReplayStopsReadingWhenTheStoreFails(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		var replaying atomic.Bool
		hook := h.Endpoint("hook", func(int, *http.Request) testkit.Response {
			if !replaying.Load() {
				return testkit.Response{Status: http.StatusBadRequest}
			}
			return testkit.Response{Status: http.StatusOK}
		})
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		deadLetterEach(t, h, "e1", "e2", "e3", "e4", "e5")
		router.SetReplayWindow(h.Router(), 1) // no events kept: each object is read again
		replaying.Store(true)
		store := h.DeadLetterStore()
		defer store.Up()
		done := make(chan *router.ReplaySummary, 1)
		go func() {
			sum, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{Wait: true,
				Progress: func(p router.ReplayProgress) {
					if p.Stage == router.ReplayReading && p.Done == p.Total {
						store.Down() // the selection is made; the objects are read again from here
					}
				}})
			if err != nil {
				t.Error(err)
			}
			done <- sum
		}()
		h.Advance(2 * time.Minute) // the retries of one object
		var sum *router.ReplaySummary
		select {
		case sum = <-done:
		default:
			t.Fatalf("the replay still runs after its store failed the first object's read through every retry (%d failed calls)", store.Failures())
		}
		if sum == nil {
			t.FailNow()
		}
		if store.Failures() != 4 {
			t.Errorf("%d failed store calls, want 4: the first listing and its three retries", store.Failures())
		}
		if sum.Replayed != 5 || sum.Unread != 5 || sum.Delivered != 0 || len(sum.Problems) != 1 {
			t.Fatalf("summary %+v, want 5 selected, 5 unread and one problem", sum)
		}
		if p := sum.Problems[0]; !strings.Contains(p, "store is down") || !strings.Contains(p, "replay again") {
			t.Errorf("problem %q, want the store's error and how to take what is left", p)
		}
	})
}

// A replay whose store fails an object's read again through every retry (1 s, 10 s, 1 min)
// reads no more objects: its summary names the object, counts what it left as unread and
// gives the --until that takes them (and that object) once the store answers.
func TestReplayStopsAtAnObjectTheStoreFailsToRead(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		_, release, done := replayHeldOneObjectAtATime(t, h)
		h.Settle() // e3 is being delivered; e2's object has not been read again yet
		objs := h.DeadLetterObjects().Objects("deadletters")
		slices.SortFunc(objs, func(a, b sinks.ObjectInfo) int { return a.LastModified.Compare(b.LastModified) })
		store := h.DeadLetterStore()
		store.Down()
		defer store.Up()
		close(release)
		h.Advance(2 * time.Minute) // the retries of e2's object
		var sum *router.ReplaySummary
		select {
		case sum = <-done:
		default:
			t.Fatalf("the replay still runs after its store failed an object's read through every retry (%d failed calls)", store.Failures())
		}
		if sum == nil {
			t.FailNow()
		}
		if store.Failures() != 4 {
			t.Errorf("%d failed store calls, want 4: e2's object's read and its three retries", store.Failures())
		}
		until := objs[1].LastModified.Add(time.Nanosecond).UTC().Format(time.RFC3339Nano)
		if sum.Delivered != 1 || sum.Unread != 2 || len(sum.Problems) != 1 ||
			!strings.HasPrefix(sum.Problems[0], objs[1].Key+": not replayed: ") || !strings.Contains(sum.Problems[0], "--until "+until) {
			t.Errorf("summary %+v, want e3 delivered, 2 unread and a problem naming %s and --until %s", sum, objs[1].Key, until)
		}
	})
}

// TestReplayIntoAQueueIsRefusedBeforeReading asks for a replay of a queue subscription's dead
// letters: CanReplay and ReplayDeadLetters refuse it with ErrReplayIntoQueue before reading
// any object (the refusal came only after the replay had read them all, reporting its
// progress), and a dry run still lists them.
func TestReplayIntoAQueueIsRefusedBeforeReading(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("bad")))
		ev := h.Receive(pullTopic, pullSub, 1)
		h.Reject(pullTopic, pullSub, ev[0].LockToken)
		h.Advance(6 * time.Minute)
		if n := len(h.DeadLetterObjects().Objects("deadletters")); n == 0 {
			t.Fatal("no dead-letter object written")
		}
		if err := h.Router().CanReplay(pullTopic, pullSub, false); !errors.Is(err, router.ErrReplayIntoQueue) {
			t.Fatalf("CanReplay of a queue subscription: %v; want ErrReplayIntoQueue", err)
		}
		var progress int
		_, err := h.Router().ReplayDeadLetters(context.Background(), pullTopic, pullSub, router.ReplayOptions{
			Progress: func(router.ReplayProgress) { progress++ }})
		if !errors.Is(err, router.ErrReplayIntoQueue) || progress != 0 {
			t.Fatalf("replay of a queue subscription: %v after %d progress reports; want ErrReplayIntoQueue before reading anything", err, progress)
		}
		if err := h.Router().CanReplay(pullTopic, pullSub, true); err != nil {
			t.Fatalf("CanReplay of a dry run: %v; want nil", err)
		}
		sum, err := h.Router().ReplayDeadLetters(context.Background(), pullTopic, pullSub, router.ReplayOptions{DryRun: true})
		if err != nil || sum.Replayed != 1 {
			t.Fatalf("dry run: %+v, %v; want the one dead letter listed", sum, err)
		}
	})
}

// The dead-letter status lists the replays running, with their events and how many have
// settled, and a replay leaves it when it ends: a client that stopped waiting for a replay's
// answer can look the replay up.
func TestDeadLetterStatusListsRunningReplays(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		_, release, done := replayHeldOneObjectAtATime(t, h)
		h.Settle()
		st, err := h.Router().DeadLetterStatus(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Replays) != 1 {
			t.Fatalf("replays %+v while one runs, want it", st.Replays)
		}
		if rp := st.Replays[0]; rp.Topic != "orders" || rp.Subscription != "billing" || rp.Events != 3 || rp.Settled != 0 || rp.Started.IsZero() {
			t.Errorf("replay %+v, want orders/billing, 3 events, none settled, and when it started", rp)
		}
		close(release)
		h.Advance(time.Minute)
		if sum := <-done; sum == nil || !sum.Completed {
			t.Fatalf("summary %+v, want the replay completed", sum)
		}
		h.Settle()
		if st, err := h.Router().DeadLetterStatus(context.Background()); err != nil || len(st.Replays) != 0 {
			t.Errorf("replays %+v (%v) once the replay ended, want none", st.Replays, err)
		}
	})
}
