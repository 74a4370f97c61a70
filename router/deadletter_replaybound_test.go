package router_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// putReplayObjects dead-letters event e0 of orders/billing and writes n objects like its
// one, each holding one event of its own id (r0, r1, …), over several hours, as egrid names
// them.
func putReplayObjects(t *testing.T, h *testkit.Harness, n int) {
	t.Helper()
	h.Publish("orders", h.EventGridEvent(testkit.ID("e0")))
	h.Advance(6 * time.Minute)
	store := h.DeadLetterObjects()
	objs := store.Objects("deadletters")
	if len(objs) != 1 {
		t.Fatalf("%d dead-letter objects, want e0's", len(objs))
	}
	body, info, err := store.Get(context.Background(), "deadletters", objs[0].Key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte(`"e0"`)) {
		t.Fatalf("e0's object does not name it: %s", body)
	}
	for i := range n {
		key := deadletter.Key("BILLING", time.Now(), fmt.Sprintf("obj-%05d", i))
		if _, err := store.Put(context.Background(), "deadletters", key, bytes.Replace(body, []byte(`"e0"`), fmt.Appendf(nil, `"r%d"`, i), 1),
			sinks.PutOptions{ContentType: info.ContentType, Metadata: info.Metadata}); err != nil {
			t.Fatal(err)
		}
		h.Advance(5 * time.Second) // some 5 hours of objects
	}
}

// A replay's memory does not grow with the events it selects: its selection and its walk of
// the objects remember at most MaxReplayIDs event ids (100 here, of 3 001), say that they
// reached that bound, and the replay still re-delivers every event, an object at a time.
// Before, the selection remembered every id taken (and a part per object), all of them
// before the first was replayed.
func TestReplayHoldsABoundedSelection(t *testing.T) {
	const objects, bound = 3000, 100
	router.SetMaxReplayIDs(t, bound)
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		var mu sync.Mutex
		replaying := false
		hook := h.Endpoint("hook", func(int, *http.Request) testkit.Response {
			mu.Lock()
			defer mu.Unlock()
			if replaying {
				return testkit.Response{Status: http.StatusOK}
			}
			return testkit.Response{Status: http.StatusBadRequest}
		})
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		putReplayObjects(t, h, objects)
		var held []int
		router.OnReplayHeld(h.Router(), func(ids int) { held = append(held, ids) })
		walkHeld := 0
		router.OnDeadLetterWalk(h.Router(), func(n, _ int) { walkHeld = max(walkHeld, n) })

		dry, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if dry.Replayed != objects+1 || !dry.DedupLimited {
			t.Errorf("dry run: %d would be replayed, dedupLimited %v; want %d, true", dry.Replayed, dry.DedupLimited, objects+1)
		}

		router.SetReplayWindow(h.Router(), 1) // no events kept: the replay walks every object again
		mu.Lock()
		replaying = true
		mu.Unlock()
		sum, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Replayed != objects+1 || sum.Delivered != objects+1 || sum.Unread != 0 || !sum.Completed || !sum.DedupLimited {
			t.Errorf("replay summary: %d replayed, %d delivered, %d unread, completed %v, dedupLimited %v; want all %d delivered",
				sum.Replayed, sum.Delivered, sum.Unread, sum.Completed, sum.DedupLimited, objects+1)
		}
		if len(held) != 3 { // the dry run's selection, the replay's, and its walk
			t.Fatalf("%d reports of the ids held, want 3: %v", len(held), held)
		}
		for _, n := range held {
			if n > bound {
				t.Errorf("a replay remembered %d event ids at once, over its bound of %d", n, bound)
			}
		}
		if perHour := int(time.Hour / (5 * time.Second)); walkHeld > perHour+1 {
			t.Errorf("a replay's walk held %d objects at once; want at most an hour's, %d", walkHeld, perHour+1)
		}
	})
}
