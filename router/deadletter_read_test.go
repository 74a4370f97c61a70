package router_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// Reading dead letters back takes objects of up to the object bound plus deadletter.ReadMargin:
// a larger one — egrid writes none — is reported as a problem that names it and says what to
// do, and is not read into memory.
func TestDeadLetterObjectTooLargeToRead(t *testing.T) {
	const bound = 4096
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		store, body, _ := deadLetterOne(t, h, hook, "e1")
		ctx := context.Background()
		// The same records, padded past what a reader takes: decodable, but not egrid's.
		padded := append(body, bytes.Repeat([]byte{' '}, bound+deadletter.ReadMargin+1-len(body))...)
		big := "BILLING/2025/1/2/3/00000000-0000-0000-0000-000000000000.json"
		if _, err := store.Put(ctx, "deadletters", big, padded, sinks.PutOptions{
			ContentType: "application/json", Metadata: map[string]string{deadletter.TopicMetadata: "orders"},
		}); err != nil {
			t.Fatal(err)
		}
		read, err := h.Router().DeadLetterRecords(ctx, "orders", "billing", router.DeadLetterQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if read.Objects != 1 || len(read.Entries) != 1 || len(read.Problems) != 1 {
			t.Fatalf("read %d records from %d objects, problems %q; want the written object read and the padded one refused", len(read.Entries), read.Objects, read.Problems)
		}
		if p := read.Problems[0]; !strings.HasPrefix(p, big+": ") || !strings.Contains(p, "larger than") || !strings.Contains(p, "mc cat") {
			t.Errorf("problem %q, want it to name %s, say it is too large and what to do", p, big)
		}
		sum, err := h.Router().ReplayDeadLetters(ctx, "orders", "billing", router.ReplayOptions{DryRun: true})
		if err != nil || sum.Replayed != 1 || len(sum.Problems) != 1 {
			t.Errorf("dry-run replay %+v, %v; want the one record and the refused object as a problem", sum, err)
		}
	}, testkit.WithConfig(router.Config{DeadLetters: router.DeadLetterConfig{MaxObjectBytes: bound}}))
}

// DeadLetterRecords with a Limit reads the objects oldest first and stops at the limit: it says
// how many records of the last object read and how many objects it left, and where to take up,
// and reads no object past the limit (a newer undecodable one is not reported as a problem).
// Without a limit, and with one the range fits in, it answers every record as before.
func TestDeadLetterRecordsLimit(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")), h.EventGridEvent(testkit.ID("e2")))
		h.Advance(6 * time.Minute)
		h.Publish("orders", h.EventGridEvent(testkit.ID("e3")), h.EventGridEvent(testkit.ID("e4")))
		h.Advance(6 * time.Minute)
		store := h.DeadLetterObjects()
		ctx := context.Background()
		garbage := "BILLING/2000/1/1/0/ffffffff-ffff-ffff-ffff-ffffffffffff.json"
		if _, err := store.Put(ctx, "deadletters", garbage, []byte("not JSON"), sinks.PutOptions{
			ContentType: "application/json", Metadata: map[string]string{deadletter.TopicMetadata: "orders"},
		}); err != nil {
			t.Fatal(err)
		}
		objs, err := listedObjects(h.Router().DeadLetterObjects(ctx, "orders", "billing", router.DeadLetterQuery{}))
		if err != nil || len(objs) != 3 || objs[2].Key != garbage {
			t.Fatalf("objects %+v, %v; want two written and the undecodable one newest", objs, err)
		}
		// ids lists the records' event ids, in object order (an object's own records in no
		// particular order).
		ids := func(read *router.DeadLetterRead) string {
			var out []string
			for i, e := range read.Entries {
				if i > 0 && e.Object != read.Entries[i-1].Object {
					out = append(out, "|")
				}
				out = append(out, e.Event.ID)
			}
			for i := 0; i < len(out); {
				j := slices.Index(out[i:], "|")
				if j < 0 {
					j = len(out) - i
				}
				slices.Sort(out[i : i+j])
				i += j + 1
			}
			return strings.Join(out, ",")
		}

		read, err := h.Router().DeadLetterRecords(ctx, "orders", "billing", router.DeadLetterQuery{Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(read); (got != "e1,e2,|,e3" && got != "e1,e2,|,e4") || read.Objects != 2 || len(read.Problems) != 0 {
			t.Errorf("limit 3: records %s from %d objects, problems %q; want e1,e2 and one of e3,e4 from the two oldest, the newest not read", got, read.Objects, read.Problems)
		}
		if !read.More || read.Left != 1 || read.Unread != 1 || !read.Next.Equal(objs[1].LastModified) {
			t.Errorf("limit 3: more %v, left %d, unread %d, next %v; want 1 record and 1 object left, taking up at %v", read.More, read.Left, read.Unread, read.Next, objs[1].LastModified)
		}

		read, err = h.Router().DeadLetterRecords(ctx, "orders", "billing", router.DeadLetterQuery{Limit: 2})
		if err != nil || ids(read) != "e1,e2" || read.Objects != 1 || !read.More || read.Left != 0 || read.Unread != 2 || !read.Next.Equal(objs[1].LastModified) {
			t.Errorf("limit 2: records %s from %d objects, more %v, left %d, unread %d, %v; want e1,e2 of the first object, the other two not read",
				ids(read), read.Objects, read.More, read.Left, read.Unread, err)
		}

		for _, limit := range []int{0, 5, 1000} {
			read, err = h.Router().DeadLetterRecords(ctx, "orders", "billing", router.DeadLetterQuery{Limit: limit})
			if err != nil || ids(read) != "e1,e2,|,e3,e4" || read.Objects != 3 || len(read.Problems) != 1 || read.More {
				t.Errorf("limit %d: records %s from %d objects, problems %q, more %v, %v; want every record, the undecodable object a problem, nothing more",
					limit, ids(read), read.Objects, read.Problems, read.More, err)
			}
		}
	})
}

// Reading and replaying a range in which many objects cannot be decoded (not egrid's, or not
// JSON) lists the first MaxListedProblems problems (two here) and counts the others, so the
// answer stays small however many such objects the prefix holds. Before, it listed one
// message per object: a prefix with a million foreign objects answered with a million.
func TestDeadLetterProblemsAreBounded(t *testing.T) {
	router.SetMaxListedProblems(t, 2)
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(6 * time.Minute)
		store := h.DeadLetterObjects()
		ctx := context.Background()
		for i, body := range []string{"not JSON", `{"id":"e2"}`, `[{"id":"e3"}]`, "\x00\x01"} {
			key := "BILLING/2000/1/1/0/" + strings.Repeat(string(rune('a'+i)), 8) + ".json"
			if _, err := store.Put(ctx, "deadletters", key, []byte(body), sinks.PutOptions{ContentType: "application/json"}); err != nil {
				t.Fatal(err)
			}
		}
		read, err := h.Router().DeadLetterRecords(ctx, "orders", "billing", router.DeadLetterQuery{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(read.Entries) != 1 || len(read.Problems) != 2 || read.UnlistedProblems != 2 {
			t.Errorf("read %d records, problems %q and %d unlisted; want the one record, two problems listed and two counted", len(read.Entries), read.Problems, read.UnlistedProblems)
		}
		if p := strings.Join(read.Problems, ""); !strings.HasPrefix(p, "BILLING/2000/1/1/0/aaaaaaaa.json: ") || !strings.Contains(p, "left out") || !strings.Contains(p, "move it out") {
			t.Errorf("problem %q, want it to name the object, say its records are left out and what to do", p)
		}
		sum, err := h.Router().ReplayDeadLetters(ctx, "orders", "billing", router.ReplayOptions{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Replayed != 1 || len(sum.Problems) != 2 || sum.UnlistedProblems != 2 {
			t.Errorf("dry run: %d replayed, problems %q and %d unlisted; want 1, two problems listed and two counted", sum.Replayed, sum.Problems, sum.UnlistedProblems)
		}
	})
}

// listedObjects returns the objects of a DeadLetterObjects answer.
func listedObjects(l *router.DeadLetterList, err error) ([]sinks.ObjectInfo, error) {
	if err != nil {
		return nil, err
	}
	return l.Objects, nil
}

// A record that cannot be decoded is reported with its object's key, its index and why, and
// left out; the object's other records are still shown and replayed. Before, one such record
// left out its whole object: every other event in it was skipped.
func TestDeadLetterRecordThatCannotBeDecodedHidesOnlyItself(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		var healthy atomic.Bool
		hook := h.Endpoint("hook", switchable(&healthy, http.StatusBadRequest))
		store, body, info := deadLetterOne(t, h, hook, "e1", "e2")
		ctx := context.Background()
		// A record between e1's and e2's that is no dead letter: record 1.
		body = bytes.TrimSpace(body)
		first := bytes.Index(body, []byte("},{"))
		if first < 0 {
			t.Fatalf("no second record in %s", body)
		}
		changed := slices.Concat(body[:first+2], []byte(`{"deadLetterReason":"x"},`), body[first+2:])
		if _, err := store.Put(ctx, "deadletters", info.Key, changed, sinks.PutOptions{ContentType: info.ContentType, Metadata: info.Metadata}); err != nil {
			t.Fatal(err)
		}

		read, err := h.Router().DeadLetterRecords(ctx, "orders", "billing", router.DeadLetterQuery{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range read.Entries {
			ids = append(ids, e.Event.ID)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, []string{"e1", "e2"}) || len(read.Problems) != 1 {
			t.Fatalf("read %v with problems %q; want e1 and e2 and one problem", ids, read.Problems)
		}
		if p := read.Problems[0]; !strings.HasPrefix(p, info.Key+": record 1: ") || !strings.Contains(p, "left out") {
			t.Errorf("problem %q, want it to name the object, the record's index and why, and say it is left out", p)
		}

		healthy.Store(true)
		sum, err := h.Router().ReplayDeadLetters(ctx, "orders", "billing", router.ReplayOptions{Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Replayed != 2 || sum.Delivered != 2 || sum.Found != 2 || len(sum.Problems) != 1 || !strings.HasPrefix(sum.Problems[0], info.Key+": record 1: ") {
			t.Errorf("replay summary %+v, want e1 and e2 replayed and the bad record reported", sum)
		}
	})
}

// deadLetterOne publishes events of the ids to orders/billing, a subscription to hook, which
// must refuse them (400), and returns the one object they are dead-lettered in: the store,
// the object's body and its info.
func deadLetterOne(t *testing.T, h *testkit.Harness, hook *testkit.Endpoint, ids ...string) (*testkit.ObjectStore, []byte, sinks.ObjectInfo) {
	t.Helper()
	h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
	events := make([]any, len(ids))
	for i, id := range ids {
		events[i] = h.EventGridEvent(testkit.ID(id))
	}
	h.Publish("orders", events...)
	h.Advance(6 * time.Minute)
	store := h.DeadLetterObjects()
	objs := store.Objects("deadletters")
	if len(objs) != 1 {
		t.Fatalf("%d objects, want one holding %v", len(objs), ids)
	}
	body, info, err := store.Get(context.Background(), "deadletters", objs[0].Key, 0)
	if err != nil {
		t.Fatal(err)
	}
	return store, body, info
}
