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
