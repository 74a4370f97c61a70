package router_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
)

// putRecordObjects writes n objects of topic orders' subscription billing into env's bucket,
// each holding per records (event ids o<i>-<j>), as egrid names and writes them, and returns
// them oldest first.
func putRecordObjects(t *testing.T, env *minioEnv, n, per int) []sinks.ObjectInfo {
	t.Helper()
	for i := range n {
		var recs []string
		for j := range per {
			recs = append(recs, fmt.Sprintf(`{"id":"o%d-%d","subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z",`+
				`"dataVersion":"1.0","data":{"n":%d},"deadLetterReason":"MaxDeliveryAttemptsExceeded","deliveryAttempts":3,`+
				`"lastDeliveryOutcome":"Aborted","publishTime":"2026-01-01T00:00:00Z"}`, i, j, j))
		}
		key := deadletter.Key("BILLING", time.Now(), fmt.Sprintf("%08d-0000-0000-0000-000000000000", i))
		if _, err := env.store.Put(context.Background(), env.bucket, key, []byte("["+strings.Join(recs, ",")+"]"), sinks.PutOptions{
			ContentType: "application/json", Metadata: map[string]string{deadletter.TopicMetadata: "orders"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	out := env.objects(t) // with the times the store gives them
	slices.SortFunc(out, func(a, b sinks.ObjectInfo) int {
		return cmp.Or(a.LastModified.Compare(b.LastModified), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// A replay whose store goes down while its selection reads the objects reads no further
// objects: it replays those it read, and its summary says it is incomplete, how many objects
// it did not read, why, and the --until that takes them once the store answers. Before, each
// object it could not read was only a problem among others (the first 100 listed), and the
// summary said completed with nothing unread.
func TestReplayStoppedShortByTheStoreSaysSo(t *testing.T) {
	router.SetReplayReadBackoff(t, 0) // one more try of the failed read
	env := startMinIOEnv(t, nil)
	var healthy atomic.Bool
	healthy.Store(true)
	ids := make(chan string, 100)
	env.subscribe(t, "billing", recordingHook(t, &healthy, ids), router.RetryPolicy{MaxDeliveryAttempts: 1}, 0)
	objs := putRecordObjects(t, env, 5, 2)

	sum, err := env.r.ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{Wait: true,
		Progress: func(p router.ReplayProgress) {
			if p.Stage == router.ReplayReading && p.Done == 2 {
				env.m.Stop() // two objects read (the newest); the third's read fails
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Completed || !sum.Incomplete || sum.Objects != 2 || sum.UnreadObjects != 3 || sum.Replayed != 4 || sum.Delivered != 4 {
		t.Fatalf("summary %+v, want incomplete, not completed: 2 objects read and their 4 events delivered, 3 objects not read", sum)
	}
	until := objs[2].LastModified.Add(time.Nanosecond).UTC().Format(time.RFC3339Nano)
	if r := sum.IncompleteReason; !strings.HasPrefix(r, objs[2].Key+": not read: ") || !strings.Contains(r, "3 objects selected were not read") ||
		!strings.Contains(r, "--until "+until) {
		t.Errorf("incomplete reason %q, want the object not read, the 3 objects left and --until %s", r, until)
	}
	if len(sum.Problems) != 1 || sum.Problems[0] != sum.IncompleteReason || sum.UnlistedProblems != 0 {
		t.Errorf("problems %q (%d unlisted), want the reason alone, not a problem for each object not read", sum.Problems, sum.UnlistedProblems)
	}
	var got []string
	for range 4 {
		got = append(got, <-ids)
	}
	slices.Sort(got)
	if want := []string{"o3-0", "o3-1", "o4-0", "o4-1"}; !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v: the events of the two newest objects", got, want)
	}

	// Once the store answers, the --until given takes the rest.
	env.m.Start()
	u, err := time.Parse(time.RFC3339Nano, until)
	if err != nil {
		t.Fatal(err)
	}
	sum, err = env.r.ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{Wait: true, Until: u})
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Completed || sum.Incomplete || sum.Objects != 3 || sum.Delivered != 6 {
		t.Errorf("replay with --until %s: %+v, want the 3 objects left, completed", until, sum)
	}
}

// A replay whose store fails the objects' reads again, once the selection is made, through
// every retry says it is incomplete, not completed, with the events it did not read.
func TestReplayThatCouldNotReadAgainIsIncomplete(t *testing.T) {
	router.SetReplayReadBackoff(t)
	env := startMinIOEnv(t, nil)
	var healthy atomic.Bool
	healthy.Store(true)
	env.subscribe(t, "billing", recordingHook(t, &healthy, make(chan string, 100)), router.RetryPolicy{MaxDeliveryAttempts: 1}, 0)
	putRecordObjects(t, env, 3, 2)
	router.SetReplayWindow(env.r, 1) // no events kept: each object is read again
	sum, err := env.r.ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{Wait: true,
		Progress: func(p router.ReplayProgress) {
			if p.Stage == router.ReplayReading && p.Done == p.Total {
				env.m.Stop() // the selection is made; the objects are read again from here
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Completed || !sum.Incomplete || sum.Unread != 6 || !strings.Contains(sum.IncompleteReason, "6 events selected were not replayed") ||
		!strings.Contains(sum.IncompleteReason, "replay again") {
		t.Errorf("summary %+v, want incomplete with the 6 events unread and how to take them", sum)
	}
}

// Records paged with a limit smaller than an object's records take up inside the object: each
// answer's continuation (Next, After, Offset) gives the next records, so every record is read
// once, in order, whatever the limit and however many objects were written at one instant.
// Before, the continuation was the time of the first object not wholly answered: an object of
// more records than the limit answered its first ones again and again.
func TestDeadLetterRecordsTakeUpInsideAnObject(t *testing.T) {
	env := startMinIOEnv(t, nil)
	env.subscribe(t, "billing", failingHook(t, http.StatusBadRequest), router.RetryPolicy{}, 0)
	objs := putRecordObjects(t, env, 3, 5)
	var want []string
	for _, o := range objs {
		for _, rec := range env.records(t, o.Key) {
			want = append(want, rec.Event.ID)
		}
	}
	for _, limit := range []int{1, 3, 5, 7} {
		var got []string
		q := router.DeadLetterQuery{Limit: limit}
		for page := 0; ; page++ {
			if page > len(want) {
				t.Fatalf("limit %d: %d pages and still more; records so far %v", limit, page, got)
			}
			read, err := env.r.DeadLetterRecords(context.Background(), "orders", "billing", q)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range read.Entries {
				got = append(got, e.Event.ID)
			}
			if !read.More {
				break
			}
			q = router.DeadLetterQuery{Limit: limit, Since: read.Next, After: read.After, Offset: read.Offset}
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: paged records %v, want %v", limit, got, want)
		}
	}
}

// A key that is no object key is refused, saying what is wrong with it, without asking the
// store (which refuses it, which read as the store being unavailable); so is since after until.
func TestDeadLetterQueryThatIsWrongIsRefused(t *testing.T) {
	env := startMinIOEnv(t, nil)
	env.subscribe(t, "billing", failingHook(t, http.StatusBadRequest), router.RetryPolicy{}, 0)
	putRecordObjects(t, env, 1, 1)
	now := time.Now()
	for _, tt := range []struct {
		q    router.DeadLetterQuery
		want string
	}{
		{router.DeadLetterQuery{Key: "BILLING/../MAX500/2026/1/1/1/x.json"}, `".." path segment`},
		{router.DeadLetterQuery{Key: "BILLING//2026/1/1/1/x.json"}, "empty path segment"},
		{router.DeadLetterQuery{Key: "/BILLING/2026/1/1/1/x.json"}, "begins or ends with /"},
		{router.DeadLetterQuery{Since: now, Until: now.Add(-time.Hour)}, "is after until"},
	} {
		_, err := env.r.DeadLetterRecords(context.Background(), "orders", "billing", tt.q)
		if !errors.Is(err, router.ErrBadDeadLetterQuery) || errors.Is(err, router.ErrDeadLetterStoreUnavailable) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("records of %+v: %v, want ErrBadDeadLetterQuery saying %q", tt.q, err, tt.want)
		}
		if _, err := env.r.DeadLetterObjects(context.Background(), "orders", "billing", tt.q); !errors.Is(err, router.ErrBadDeadLetterQuery) {
			t.Errorf("objects of %+v: %v, want ErrBadDeadLetterQuery", tt.q, err)
		}
	}
	if _, err := env.r.ReplayDeadLetters(context.Background(), "orders", "billing", router.ReplayOptions{DryRun: true, Since: now, Until: now.Add(-time.Hour)}); !errors.Is(err, router.ErrBadDeadLetterQuery) {
		t.Errorf("replay from since after until: %v, want ErrBadDeadLetterQuery", err)
	}
}
