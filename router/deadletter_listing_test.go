package router_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// Dead-letter listings hold a page of the store's listing and an hour of keys, not the
// listing: a bucket of millions of objects is not described in memory at once, nor listed
// whole by explain.

const (
	listingHours   = 6
	listingPerHour = 500
)

// putListingObjects writes listingHours hours of listingPerHour objects of topic orders'
// subscription billing, named as egrid names them (each in its hour), plus one object named in
// the first hour and written in the last (a write retried for hours), and returns them all in
// the order they were written (then by key).
func putListingObjects(t *testing.T, h *testkit.Harness) []sinks.ObjectInfo {
	t.Helper()
	store := h.DeadLetterObjects()
	put := func(key string) sinks.ObjectInfo {
		info, err := store.Put(context.Background(), "deadletters", key, []byte("[]"), sinks.PutOptions{
			ContentType: "application/json", Metadata: map[string]string{deadletter.TopicMetadata: "orders"},
		})
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	var all []sinks.ObjectInfo
	first := time.Now()
	for hour := range listingHours {
		for i := range listingPerHour {
			all = append(all, put(deadletter.Key("BILLING", time.Now(), fmt.Sprintf("%08d-%04d", i*7919%listingPerHour, hour))))
			if i%5 == 0 {
				h.Advance(time.Second) // several objects at one instant, too
			}
		}
		if hour == listingHours-1 {
			all = append(all, put(deadletter.Key("BILLING", first, "late")))
		}
		h.Advance(time.Hour)
	}
	slices.SortStableFunc(all, func(a, b sinks.ObjectInfo) int {
		return cmp.Or(a.LastModified.Compare(b.LastModified), cmp.Compare(a.Key, b.Key))
	})
	return all
}

func keysOf(objs []sinks.ObjectInfo) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Key
	}
	return out
}

// A list of the objects answers at most its limit, says how many it left and where to take up,
// and the pages taken up so give every object once, in the order they were written.
func TestDeadLetterObjectsArePaged(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "billing", h.Endpoint("hook"), router.RetryPolicy{})
		all := putListingObjects(t, h)
		held := 0
		router.OnDeadLetterWalk(h.Router(), func(n, _ int) { held = max(held, n) })

		var got []sinks.ObjectInfo
		q := router.DeadLetterQuery{Limit: 1000}
		for page := 0; ; page++ {
			if page > len(all)/1000 {
				t.Fatalf("more pages than %d objects take", len(all))
			}
			list, err := h.Router().DeadLetterObjects(context.Background(), "orders", "billing", q)
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Objects) > q.Limit {
				t.Fatalf("an answer of %d objects, over the limit of %d", len(list.Objects), q.Limit)
			}
			got = append(got, list.Objects...)
			if !list.More {
				break
			}
			if list.Unlisted != len(all)-len(got) {
				t.Errorf("the answer says %d objects are left, want %d", list.Unlisted, len(all)-len(got))
			}
			q.Since, q.After = list.Next, list.After
		}
		if !slices.Equal(keysOf(got), keysOf(all)) {
			t.Fatalf("the pages gave %d objects, want the %d in the order they were written", len(got), len(all))
		}
		// An hour of objects, and the late one, not the listing.
		if held > listingPerHour+1 {
			t.Errorf("a walk held %d objects at once; want at most an hour's, %d", held, listingPerHour+1)
		}
	})
}

// Reading records and selecting a replay walk the objects holding an hour of them, not the
// listing, in the order each takes them.
func TestDeadLetterReadsHoldAnHourOfObjects(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "billing", h.Endpoint("hook"), router.RetryPolicy{})
		all := putListingObjects(t, h)
		held, total := 0, 0
		router.OnDeadLetterWalk(h.Router(), func(n, tot int) { held, total = max(held, n), tot })

		read, err := h.Router().DeadLetterRecords(context.Background(), "orders", "billing", router.DeadLetterQuery{})
		if err != nil || read.Objects != len(all) {
			t.Fatalf("read %d objects, %v; want all %d", read.Objects, err, len(all))
		}
		if held > listingPerHour+1 || total != len(all) {
			t.Errorf("show's walk held %d of %d objects at once; want at most an hour's, %d", held, total, listingPerHour+1)
		}

		held = 0
		var progress []int
		sum, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{
			DryRun: true, Progress: func(p router.ReplayProgress) { progress = append(progress, p.Total) },
		})
		if err != nil || sum.Objects != len(all) {
			t.Fatalf("the replay read %d objects, %v; want all %d", sum.Objects, err, len(all))
		}
		if held > listingPerHour+1 {
			t.Errorf("the replay's selection held %d objects at once; want at most an hour's, %d", held, listingPerHour+1)
		}
		if len(progress) == 0 || progress[0] != len(all) {
			t.Errorf("the replay's progress counted %v objects in all, want %d", progress[:min(len(progress), 1)], len(all))
		}
	})
}

// Explain looks for a dead-lettered event's object among the keys of the hours from its end
// on, not in the subscription's whole prefix.
func TestExplainListsOnlyTheHoursAfterTheEvent(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		all := putListingObjects(t, h)
		store := h.DeadLetterObjects()

		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(6 * time.Minute)
		if n := len(store.Objects("deadletters")); n != len(all)+1 {
			t.Fatalf("%d objects, want %d and e1's", n, len(all))
		}
		before := store.Listed()
		e, err := h.Router().Explain(context.Background(), "orders", "billing", "e1")
		if err != nil {
			t.Fatal(err)
		}
		if e.DeadLetterObject == "" {
			t.Fatalf("explain found no dead-letter object for e1: %+v", e)
		}
		// e1's hour holds its object and, at most, the last hour's.
		if n := store.Listed() - before; n > listingPerHour+2 {
			t.Errorf("explain listed %d objects to find e1's; want only those of its hour and the one before, at most %d (the prefix holds %d)", n, listingPerHour+2, len(all)+1)
		}
	})
}

// A listing from a time (list, show and replay --since) lists only the keys named from a
// write's longest lag (4 hours of retries and a minute's write, plus 15 minutes of clock skew)
// before it on, not the whole prefix: the hours of the since's day, then a prefix per day,
// month and later year. Before, it listed every key under the prefix once to find where to
// start.
func TestDeadLetterListingFromATimeListsOnlyTheKeysFromIt(t *testing.T) {
	const days, perHour = 3, 20
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.CreateSubscription("orders", "billing", h.Endpoint("hook"), router.RetryPolicy{})
		store := h.DeadLetterObjects()
		var all []sinks.ObjectInfo
		for i := range days * 24 * perHour {
			info, err := store.Put(context.Background(), "deadletters", deadletter.Key("BILLING", time.Now(), fmt.Sprintf("obj-%05d", i)), []byte("[]"),
				sinks.PutOptions{ContentType: "application/json", Metadata: map[string]string{deadletter.TopicMetadata: "orders"}})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, info)
			h.Advance(time.Hour / perHour)
		}
		since := all[len(all)-2*perHour].LastModified // the last two hours
		var want []sinks.ObjectInfo
		for _, o := range all {
			if !o.LastModified.Before(since) {
				want = append(want, o)
			}
		}
		before := store.Listed()
		list, err := h.Router().DeadLetterObjects(context.Background(), "orders", "billing", router.DeadLetterQuery{Since: since})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(keysOf(list.Objects), keysOf(want)) {
			t.Fatalf("listed %d objects from %v, want the %d written since", len(list.Objects), since, len(want))
		}
		// The first listing takes the keys of the two hours and the 4 h 16 min before them
		// (7 hours of keys, part of one more); the walk lists the two hours again.
		if n, bound := store.Listed()-before, (8+2)*perHour; n > bound {
			t.Errorf("listing from %v listed %d objects; want at most %d, not the prefix's %d", since, n, bound, len(all))
		}
	})
}
