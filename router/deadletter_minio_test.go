package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/blob"
	"github.com/egridio/egrid/testkit"
)

// These tests run against a real MinIO server started by the test kit, outside synctest
// bubbles: they wait (bounded) for outcomes and assert outcomes, never timings. The router
// runs 100 times faster than real time with a one-second dead-letter delay (10 ms scaled).

// minioEnv is a router writing dead letters to a real MinIO.
type minioEnv struct {
	r      *router.Router
	m      *testkit.MinIO
	store  *blob.Store
	notes  chan router.BlobCreatedData // BlobCreated notifications, via a Go sink on the system topic
	bucket string
}

// failingHook is a webhook that answers every request with status.
func failingHook(t *testing.T, status int) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func startMinIOEnv(t *testing.T, log *slog.Logger) *minioEnv {
	t.Helper()
	m := testkit.StartMinIO(t)
	env := &minioEnv{m: m, store: m.Store(), notes: make(chan router.BlobCreatedData, 100), bucket: "dl-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))}
	if len(env.bucket) > 63 {
		env.bucket = env.bucket[:63]
	}
	env.bucket = strings.TrimRight(env.bucket, "-")
	watch := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		var evs []struct{ Data router.BlobCreatedData }
		if err := json.Unmarshal(b.Body, &evs); err != nil {
			return err
		}
		for _, e := range evs {
			env.notes <- e.Data
		}
		return nil
	})
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := router.New(router.Config{
		InsecureDev: true, SkipEndpointValidation: true, TimeScale: 100,
		DeadLetters: router.DeadLetterConfig{Delay: 20 * time.Second}, // 200 ms real: one flush even on a loaded machine
	}, router.Deps{DeadLetterStore: env.store, Sinks: map[string]sinks.Sink{"watch": watch}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	env.r = r
	ctx := context.Background()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, router.DefaultDeadLetterTopic, "watch", router.SubscriptionSpec{Destination: router.SinkDestination("watch")}); err != nil {
		t.Fatal(err)
	}
	return env
}

func (env *minioEnv) subscribe(t *testing.T, name, url string, policy router.RetryPolicy, batch int) {
	t.Helper()
	spec := router.SubscriptionSpec{Destination: router.WebHook(url), RetryPolicy: policy}
	spec.Destination.Properties.MaxEventsPerBatch = batch
	spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
	spec.DeadLetterDestination.Properties.BlobContainerName = env.bucket
	if err := env.r.CreateSubscription(context.Background(), "orders", name, spec); err != nil {
		t.Fatal(err)
	}
}

func (env *minioEnv) publish(t *testing.T, ids ...string) {
	t.Helper()
	events := make([]any, len(ids))
	for i, id := range ids {
		events[i] = json.RawMessage(`{"id":"` + id + `","subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1.0","data":{"total":42}}`)
	}
	if err := env.r.Publish(context.Background(), "orders", events...); err != nil {
		t.Fatal(err)
	}
}

// awaitNotes waits (bounded) for n BlobCreated notifications.
func (env *minioEnv) awaitNotes(t *testing.T, n int) []router.BlobCreatedData {
	t.Helper()
	var out []router.BlobCreatedData
	timeout := time.After(60 * time.Second)
	for len(out) < n {
		select {
		case d := <-env.notes:
			out = append(out, d)
		case <-timeout:
			t.Fatalf("%d BlobCreated notifications within 60 s, want %d", len(out), n)
		}
	}
	return out
}

func (env *minioEnv) objects(t *testing.T) []sinks.ObjectInfo {
	t.Helper()
	objs, err := env.store.List(context.Background(), env.bucket, sinks.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func (env *minioEnv) records(t *testing.T, key string) []schemas.DeadLetterRecord {
	t.Helper()
	body, _, err := env.store.Get(context.Background(), env.bucket, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := schemas.DecodeDeadLetters(body, schemas.EventGrid, env.r.TopicID("orders"))
	if err != nil {
		t.Fatalf("object %s does not decode: %v\n%s", key, err, body)
	}
	return recs
}

var keyTimeRE = regexp.MustCompile(`^[A-Z0-9-]+/([0-9]{4})/([1-9][0-9]?)/([1-9][0-9]?)/([0-9]{1,2})/[0-9a-f-]{36}\.json$`)

// keyHour returns the UTC hour a key names.
func keyHour(t *testing.T, key string) time.Time {
	t.Helper()
	m := keyTimeRE.FindStringSubmatch(key)
	if m == nil {
		t.Fatalf("key %s does not follow <SUB>/<YYYY>/<M>/<D>/<H>/<uuid>.json", key)
	}
	n := make([]int, 4)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return time.Date(n[0], time.Month(n[1]), n[2], n[3], 0, 0, 0, time.UTC)
}

// Acceptance: always-500 with three attempts → after the (scaled) delay exactly one object at
// the right key with a one-record array matching the golden file; its BlobCreated
// notification reaches a subscribed endpoint with the key in its subject.
func TestMinIODeadLetterAfterRetries(t *testing.T) {
	env := startMinIOEnv(t, nil)
	got := make(chan []byte, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- body
	}))
	t.Cleanup(hook.Close)
	ctx := context.Background()
	if err := env.r.CreateSubscription(ctx, router.DefaultDeadLetterTopic, "on-dead-letters", router.SubscriptionSpec{
		Destination: router.WebHook(hook.URL),
		Filter:      filter.Spec{SubjectBeginsWith: "/blobServices/default/containers/" + env.bucket + "/blobs/SUB-500/"},
	}); err != nil {
		t.Fatal(err)
	}
	env.subscribe(t, "sub-500", failingHook(t, http.StatusInternalServerError), router.RetryPolicy{MaxDeliveryAttempts: 3}, 0)
	start := time.Now().UTC()
	env.publish(t, "e1")

	var body []byte
	select {
	case body = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("no BlobCreated notification reached the subscribed endpoint within 60 s")
	}
	objs := env.objects(t)
	if len(objs) != 1 {
		t.Fatalf("%d objects, want exactly one", len(objs))
	}
	o := objs[0]
	if !strings.HasPrefix(o.Key, "SUB-500/") {
		t.Errorf("key %s, want it under SUB-500/", o.Key)
	}
	if h := keyHour(t, o.Key); h.Before(start.Truncate(time.Hour)) || h.After(time.Now().UTC()) {
		t.Errorf("key %s names hour %v, want the UTC hour it was written in", o.Key, h)
	}
	var evs []struct {
		Subject, EventType string
		Data               router.BlobCreatedData
	}
	if err := json.Unmarshal(body, &evs); err != nil || len(evs) != 1 {
		t.Fatalf("notification %s: %v", body, err)
	}
	if evs[0].Subject != "/blobServices/default/containers/"+env.bucket+"/blobs/"+o.Key || evs[0].EventType != "Microsoft.Storage.BlobCreated" {
		t.Errorf("notification %+v, want BlobCreated with subject naming %s", evs[0], o.Key)
	}
	if d := evs[0].Data; d.ContentLength != o.Size || d.ETag != o.ETag || d.URL != "http://"+env.m.Endpoint+"/"+env.bucket+"/"+o.Key {
		t.Errorf("notification data %+v, want the object's size, eTag and URL (%+v)", d, o)
	}

	raw, _, err := env.store.Get(ctx, env.bucket, o.Key, 0)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	if err := json.Unmarshal(raw, &recs); err != nil || len(recs) != 1 {
		t.Fatalf("object %s: want a one-record array (%v)", raw, err)
	}
	// The two times are the run's own; check them, then pin everything else to the golden.
	publish, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(recs[0]["publishTime"]))
	last, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(recs[0]["lastDeliveryAttemptTime"]))
	if err1 != nil || err2 != nil || publish.Before(start.Add(-time.Second)) || last.Before(publish) {
		t.Errorf("publishTime %v and lastDeliveryAttemptTime %v: want times of this run, in order", recs[0]["publishTime"], recs[0]["lastDeliveryAttemptTime"])
	}
	recs[0]["publishTime"], recs[0]["lastDeliveryAttemptTime"] = "<time>", "<time>"
	var pretty strings.Builder
	enc := json.NewEncoder(&pretty)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(recs); err != nil {
		t.Fatal(err)
	}
	testkit.Golden(t, "deadletter_minio_500", pretty.String())
}

// Acceptance: a 400 is dead-lettered with reason UndeliverableDueToHttpBadRequest after one
// attempt.
func TestMinIODeadLetterBadRequest(t *testing.T) {
	env := startMinIOEnv(t, nil)
	env.subscribe(t, "sub-400", failingHook(t, http.StatusBadRequest), router.RetryPolicy{}, 0)
	env.publish(t, "e1")
	env.awaitNotes(t, 1)
	objs := env.objects(t)
	if len(objs) != 1 {
		t.Fatalf("%d objects, want 1", len(objs))
	}
	recs := env.records(t, objs[0].Key)
	if len(recs) != 1 || recs[0].Reason != schemas.UndeliverableDueToHTTPBadRequest || recs[0].DeliveryAttempts != 1 || recs[0].LastHTTPStatus != 400 {
		t.Errorf("records %+v, want one UndeliverableDueToHttpBadRequest after 1 attempt with status 400", recs)
	}
}

// Acceptance: 50 events failing together → one object per subscription per flush, not 50.
func TestMinIOFiftyFailuresOneObjectPerSubscription(t *testing.T) {
	env := startMinIOEnv(t, nil)
	url := failingHook(t, http.StatusBadRequest)
	env.subscribe(t, "sub-a", url, router.RetryPolicy{}, 100)
	env.subscribe(t, "sub-b", url, router.RetryPolicy{}, 100)
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%02d", i)
	}
	env.publish(t, ids...)
	env.awaitNotes(t, 2)
	objs := env.objects(t)
	if len(objs) != 2 {
		t.Fatalf("%d objects, want one per subscription (2)", len(objs))
	}
	for _, o := range objs {
		var got []string
		for _, r := range env.records(t, o.Key) {
			got = append(got, r.Event.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, ids) {
			t.Errorf("%s holds %d records, want the 50 events", o.Key, len(got))
		}
	}
}

// signal is a slog handler that reports each record whose message starts with prefix.
type signal struct {
	prefix string
	ch     chan string
}

func (s *signal) Enabled(context.Context, slog.Level) bool { return true }
func (s *signal) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, s.prefix) {
		select {
		case s.ch <- r.Message:
		default:
		}
	}
	return nil
}
func (s *signal) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *signal) WithGroup(string) slog.Handler      { return s }

// Acceptance: MinIO stopped for a while, then restarted → every record is written, none lost,
// none twice.
func TestMinIOStoppedThenRestarted(t *testing.T) {
	failed := &signal{prefix: "writing dead letters failed", ch: make(chan string, 100)}
	env := startMinIOEnv(t, slog.New(failed))
	env.subscribe(t, "sub-1", failingHook(t, http.StatusBadRequest), router.RetryPolicy{}, 100)
	env.m.Stop()
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%02d", i)
	}
	env.publish(t, ids...)
	for range 2 { // the first try and at least one retry fail while MinIO is away
		select {
		case <-failed.ch:
		case <-time.After(60 * time.Second):
			t.Fatal("no failed dead-letter write logged within 60 s of stopping MinIO")
		}
	}
	st, err := env.r.DeadLetterStatus(context.Background())
	if err != nil || st.Pending() != 20 || st.RecordsWritten != 0 {
		t.Fatalf("status while MinIO is down: %+v, %v; want 20 pending", st, err)
	}
	env.m.Start()
	notes := env.awaitNotes(t, 1)
	seen := map[string]int{}
	for _, o := range env.objects(t) {
		for _, r := range env.records(t, o.Key) {
			seen[r.Event.ID]++
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("%s written %d times, want once", id, seen[id])
		}
	}
	if len(seen) != len(ids) || len(notes) != 1 {
		t.Errorf("%d distinct events written, %d notifications; want %d and 1", len(seen), len(notes), len(ids))
	}
	st, err = env.r.DeadLetterStatus(context.Background())
	if err != nil || st.Pending() != 0 || st.RecordsWritten != 20 || st.RecordsDropped != 0 {
		t.Errorf("status after the restart: %+v, %v; want 20 written, none pending or dropped", st, err)
	}
}

// recordingHook answers 400 until healthy is set, then 200, and sends the ids of the events
// of each request it answers 200 to ids (a structured CloudEvent or a JSON array of events).
func recordingHook(t *testing.T, healthy *atomic.Bool, ids chan<- string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !healthy.Load() {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var evs []struct{ ID string }
		if err := json.Unmarshal(body, &evs); err != nil {
			var one struct{ ID string }
			if err := json.Unmarshal(body, &one); err != nil {
				t.Errorf("delivery %s: %v", body, err)
			}
			evs = append(evs, one)
		}
		for _, e := range evs {
			ids <- e.ID
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Acceptance: subscriptions of one name on two CloudEvents topics dead-letter to one bucket,
// under one key prefix (BILLING/). Listing, reading and replaying one topic's dead letters take
// its objects only, and the replay delivers its events to its subscription only.
func TestMinIOTwoTopicsOneBucketReplayTheirOwn(t *testing.T) {
	env := startMinIOEnv(t, nil)
	ctx := context.Background()
	var healthy atomic.Bool
	delivered := map[string]chan string{}
	for _, topic := range []string{"orders-ce", "returns-ce"} {
		if _, err := env.r.CreateTopic(ctx, topic, router.TopicSpec{InputSchema: "CloudEventSchemaV1_0"}); err != nil {
			t.Fatal(err)
		}
		delivered[topic] = make(chan string, 10)
		spec := router.SubscriptionSpec{Destination: router.WebHook(recordingHook(t, &healthy, delivered[topic]))}
		spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
		spec.DeadLetterDestination.Properties.BlobContainerName = env.bucket
		if err := env.r.CreateSubscription(ctx, topic, "billing", spec); err != nil {
			t.Fatal(err)
		}
	}
	ce := func(id string) json.RawMessage {
		return json.RawMessage(`{"specversion":"1.0","id":"` + id + `","source":"/shop","type":"Order.Created","data":{"n":1}}`)
	}
	if err := env.r.Publish(ctx, "orders-ce", ce("o1"), ce("o2")); err != nil {
		t.Fatal(err)
	}
	if err := env.r.Publish(ctx, "returns-ce", ce("r1")); err != nil {
		t.Fatal(err)
	}
	env.awaitNotes(t, 2)
	objs := env.objects(t)
	if len(objs) != 2 || !strings.HasPrefix(objs[0].Key, "BILLING/") || !strings.HasPrefix(objs[1].Key, "BILLING/") {
		t.Fatalf("objects %v, want two under the shared prefix BILLING/", objs)
	}
	for topic, want := range map[string][]string{"orders-ce": {"o1", "o2"}, "returns-ce": {"r1"}} {
		listed, err := listedObjects(env.r.DeadLetterObjects(ctx, topic, "billing", router.DeadLetterQuery{}))
		if err != nil {
			t.Fatal(err)
		}
		read, err := env.r.DeadLetterRecords(ctx, topic, "billing", router.DeadLetterQuery{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range read.Entries {
			got = append(got, e.Event.ID)
		}
		slices.Sort(got)
		if len(listed) != 1 || read.Objects != 1 || !slices.Equal(got, want) || len(read.Problems) != 0 {
			t.Errorf("%s: listed %d objects, read %v from %d (problems %q); want %v from its one object", topic, len(listed), got, read.Objects, read.Problems, want)
		}
	}

	healthy.Store(true)
	router.SetReplayWindow(env.r, 1) // the replay reads its object again, as it does past its window
	sum, err := env.r.ReplayDeadLetters(ctx, "orders-ce", "billing", router.ReplayOptions{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	var replayed []string
	for _, e := range sum.Events {
		replayed = append(replayed, e.ID)
	}
	slices.Sort(replayed)
	if !slices.Equal(replayed, []string{"o1", "o2"}) || sum.Delivered != 2 || !sum.Completed {
		t.Fatalf("replay of orders-ce: %+v, want o1 and o2 replayed and delivered", sum)
	}
	var got []string
	for range 2 {
		got = append(got, <-delivered["orders-ce"])
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"o1", "o2"}) {
		t.Errorf("orders-ce's subscription received %v, want o1 and o2", got)
	}
	select {
	case id := <-delivered["returns-ce"]:
		t.Errorf("returns-ce's subscription received %s from a replay of orders-ce", id)
	case id := <-delivered["orders-ce"]:
		t.Errorf("orders-ce's subscription received %s besides its own events", id)
	default:
	}
}
