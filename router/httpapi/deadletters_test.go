package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// GET …/deadLetters answers at most ?limit= objects (1000 by default, every one before) and
// says in more where the next ones begin; ?since= and ?after= from it list them.
func TestDeadLetterObjectsRouteIsPaged(t *testing.T) {
	ctx := context.Background()
	store := testkit.NewObjectStore()
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks(), DeadLetterStore: store})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	spec := router.SubscriptionSpec{Destination: router.SinkDestination("null"), DeadLetterDestination: &router.DeadLetterDestination{EndpointType: "StorageBlob"}}
	spec.DeadLetterDestination.Properties.BlobContainerName = "dl-objects"
	if err := r.CreateSubscription(ctx, "orders", "billing", spec); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		// Named for when they are written, as egrid names them: a page taking up from a time
		// lists only the keys named from a few hours before it on.
		if _, err := store.Put(ctx, "dl-objects", deadletter.Key("BILLING", time.Now(), fmt.Sprint(i)), []byte("[]"), sinks.PutOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	const base = "/admin/topics/orders/eventSubscriptions/billing/deadLetters"

	seen := map[string]bool{}
	query := "?limit=2"
	for page := 0; ; page++ {
		if page == n {
			t.Fatalf("more than %d pages of 2 objects for %d", n-2, n)
		}
		status, body := adminDo(t, srv, "tok", "GET", base+query, "")
		values, _ := body["value"].([]any)
		if status != http.StatusOK || len(values) > 2 {
			t.Fatalf("GET %s: %d, %d objects: %v; want at most 2", query, status, len(values), body)
		}
		for _, v := range values {
			key := v.(map[string]any)["key"].(string)
			if seen[key] {
				t.Errorf("object %s answered twice", key)
			}
			seen[key] = true
		}
		more, _ := body["more"].(map[string]any)
		if more == nil {
			break
		}
		if left := int(more["objects"].(float64)); left != n-len(seen) {
			t.Errorf("more says %d objects are left, want %d", left, n-len(seen))
		}
		query = "?limit=2&since=" + url.QueryEscape(more["since"].(string)) + "&after=" + url.QueryEscape(more["after"].(string))
	}
	if len(seen) != n {
		t.Errorf("the pages answered %d objects, want %d", len(seen), n)
	}
	if status, body := adminDo(t, srv, "tok", "GET", base+"?after=x", ""); status != http.StatusBadRequest {
		t.Errorf("after= without since=: %d %v, want 400", status, body)
	}
	// One answer is held whole before it is written: a limit past the bound is refused, not
	// taken as "the whole listing".
	over := fmt.Sprintf("?limit=%d", router.MaxDeadLetterLimit+1)
	if status, body := adminDo(t, srv, "tok", "GET", base+over, ""); status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body), "since= and after=") {
		t.Errorf("GET %s: %d %v, want 400 saying to page with since= and after=", over, status, body)
	}
	if status, _ := adminDo(t, srv, "tok", "GET", base+fmt.Sprintf("?limit=%d", router.MaxDeadLetterLimit), ""); status != http.StatusOK {
		t.Errorf("GET ?limit=%d: %d, want 200", router.MaxDeadLetterLimit, status)
	}
}

// GET …/deadLetters/records pages inside an object of more records than ?limit=: its more
// gives since=, after= and offset= that answer the next records. A bad offset=, an offset= on
// the objects route, a key that is no object key and a since= after until= are 400s saying
// what is wrong (the key was a 503 telling to check MinIO).
func TestDeadLetterRecordsRouteTakesUpInsideAnObject(t *testing.T) {
	ctx := context.Background()
	store := testkit.NewObjectStore()
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks(), DeadLetterStore: store})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	spec := router.SubscriptionSpec{Destination: router.SinkDestination("null"), DeadLetterDestination: &router.DeadLetterDestination{EndpointType: "StorageBlob"}}
	spec.DeadLetterDestination.Properties.BlobContainerName = "dl-records"
	if err := r.CreateSubscription(ctx, "orders", "billing", spec); err != nil {
		t.Fatal(err)
	}
	var recs []string
	for i := range 5 {
		recs = append(recs, fmt.Sprintf(`{"id":"e%d","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1","data":{},`+
			`"deadLetterReason":"MaxDeliveryAttemptsExceeded","deliveryAttempts":1,"publishTime":"2026-01-01T00:00:00Z"}`, i))
	}
	if _, err := store.Put(ctx, "dl-records", deadletter.Key("BILLING", time.Now(), "one"), []byte("["+strings.Join(recs, ",")+"]"), sinks.PutOptions{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	const base = "/admin/topics/orders/eventSubscriptions/billing/deadLetters"

	var got []string
	query := "?limit=2"
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatalf("more than 5 pages of 2 records for 5; got %v", got)
		}
		status, body := adminDo(t, srv, "tok", "GET", base+"/records"+query, "")
		if status != http.StatusOK {
			t.Fatalf("GET records%s: %d %v", query, status, body)
		}
		for _, v := range body["value"].([]any) {
			got = append(got, v.(map[string]any)["id"].(string))
		}
		more, _ := body["more"].(map[string]any)
		if more == nil {
			break
		}
		after, _ := more["after"].(string)
		offset, _ := more["offset"].(float64)
		query = fmt.Sprintf("?limit=2&since=%s&after=%s&offset=%d", url.QueryEscape(more["since"].(string)), url.QueryEscape(after), int(offset))
	}
	if strings.Join(got, ",") != "e0,e1,e2,e3,e4" {
		t.Errorf("pages of records: %v, want e0 to e4 once each", got)
	}
	for _, tt := range []struct{ path, want string }{
		{"/records?offset=-1", "offset="},
		{"/records?offset=%2B1", `offset="+1"`},
		{"?limit=%2B2", `limit="+2"`},
		{"?offset=2", "offset= takes up inside an object"},
		{"/records?key=" + url.QueryEscape("BILLING/../MAX500/2026/1/1/1/x.json"), `".." path segment`},
		{"/records?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "is after until"},
		{"?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "is after until"},
	} {
		if status, body := adminDo(t, srv, "tok", "GET", base+tt.path, ""); status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body), tt.want) {
			t.Errorf("GET %s: %d %v, want 400 saying %q", tt.path, status, body, tt.want)
		}
	}
	if status, body := adminDo(t, srv, "tok", "POST", base+"/replay", `{"since":"2026-01-02T00:00:00Z","until":"2026-01-01T00:00:00Z","dryRun":true}`); status != http.StatusBadRequest {
		t.Errorf("replay from since after until: %d %v, want 400", status, body)
	}
}

// refusingCredentials is a dead-letter store whose server refuses the router's credentials.
type refusingCredentials struct{ sinks.ObjectStore }

func (refusingCredentials) List(context.Context, string, sinks.ListQuery) ([]sinks.ObjectInfo, error) {
	return nil, fmt.Errorf("listing on minio at 127.0.0.1:9000: %w",
		&sinks.Refusal{Code: "SignatureDoesNotMatch", Credentials: true, Err: fmt.Errorf("The request signature we calculated does not match the signature you provided.")})
}

// A dead-letter store that refuses the credentials is answered 503 saying so, and which flags
// to check: not "check that MinIO is running".
func TestDeadLetterRoutesSayTheCredentialsWereRefused(t *testing.T) {
	ctx := context.Background()
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks(), DeadLetterStore: refusingCredentials{testkit.NewObjectStore()}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	spec := router.SubscriptionSpec{Destination: router.SinkDestination("null"), DeadLetterDestination: &router.DeadLetterDestination{EndpointType: "StorageBlob"}}
	spec.DeadLetterDestination.Properties.BlobContainerName = "dl-objects"
	if err := r.CreateSubscription(ctx, "orders", "billing", spec); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	status, body := adminDo(t, srv, "tok", "GET", "/admin/topics/orders/eventSubscriptions/billing/deadLetters", "")
	msg := fmt.Sprint(body["error"])
	if status != http.StatusServiceUnavailable || !strings.Contains(msg, "refused egrid's credentials") ||
		!strings.Contains(msg, "--minio-secret-key-file") || strings.Contains(msg, "check that MinIO is running") {
		t.Errorf("GET deadLetters with refused credentials: %d %s; want 503 saying the credentials were refused and the flags to check", status, msg)
	}
}
