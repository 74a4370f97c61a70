package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store"
)

// A subscription stored before endpointUrl had its 4 096-byte bound, with a URL over it, can
// be changed by sending back its GET answer with the change: the answer hides the URL's query
// string (endpointBaseUrl only), the update keeps the stored URL, and the size bound does not
// refuse the URL the client did not send. It was refused ("endpointUrl: 4125 bytes, at most
// 4096"), so such a subscription could be changed only by a client that knew the secret in
// its URL, and then only to another URL. A new URL over the bound is still refused.
func TestStoredOversizeEndpointURLIsKeptByAnUpdateOfItsGETAnswer(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	cfg := router.Config{AdminToken: "tok", SkipEndpointValidation: true}
	r, err := router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	hook := "http://127.0.0.1:9/hook"
	long := hook + "?code=" + strings.Repeat("s", router.MaxEndpointURLBytes)
	def, err := json.Marshal(router.SubscriptionSpec{Destination: router.WebHook(long)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutSubscription(ctx, "orders", "old", def); err != nil {
		t.Fatal(err)
	}
	r, err = router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	const path = "/admin/topics/orders/eventSubscriptions/old"

	status, got := adminDo(t, srv, "tok", http.MethodGet, path, "")
	if status != http.StatusOK {
		t.Fatalf("GET: %d %v", status, got)
	}
	props := got["properties"].(map[string]any)
	dest := props["destination"].(map[string]any)["properties"].(map[string]any)
	if _, shown := dest["endpointUrl"]; shown || dest["endpointBaseUrl"] != hook {
		t.Fatalf("GET shows destination.properties %v; want endpointBaseUrl %s and no endpointUrl (its query string is a secret)", dest, hook)
	}

	dest["maxEventsPerBatch"] = 5
	props["labels"] = []string{"changed"}
	body, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	status, put := adminDo(t, srv, "tok", http.MethodPut, path, string(body))
	if status != http.StatusCreated && status != http.StatusOK {
		t.Fatalf("PUT of the GET answer with maxEventsPerBatch and labels changed: %d %v; want it accepted", status, put)
	}
	spec, err := r.Subscription("orders", "old")
	if err != nil {
		t.Fatal(err)
	}
	if p := spec.Destination.Properties; p.EndpointURL != long || p.MaxEventsPerBatch != 5 || len(spec.Labels) != 1 {
		t.Errorf("after the PUT: endpointUrl of %d bytes (want the stored %d), maxEventsPerBatch %d, labels %v; want the change applied and the URL kept",
			len(p.EndpointURL), len(long), p.MaxEventsPerBatch, spec.Labels)
	}

	// The URL sent in full and unchanged is the stored one too.
	dest["endpointUrl"] = long
	dest["maxEventsPerBatch"] = 6
	body, _ = json.Marshal(got)
	if status, put := adminDo(t, srv, "tok", http.MethodPut, path, string(body)); status != http.StatusOK && status != http.StatusCreated {
		t.Errorf("PUT with the stored oversize endpointUrl in full and a change: %d %v; want it accepted", status, put)
	}

	// Another URL over the bound is refused, for an update and for a new subscription.
	dest["endpointUrl"] = long + "x"
	body, _ = json.Marshal(got)
	for _, p := range []string{path, "/admin/topics/orders/eventSubscriptions/new"} {
		status, put := adminDo(t, srv, "tok", http.MethodPut, p, string(body))
		e, _ := put["error"].(map[string]any)
		if msg, _ := e["message"].(string); status != http.StatusBadRequest || !strings.Contains(msg, fmt.Sprintf("endpointUrl: %d bytes, at most 4096", len(long)+1)) {
			t.Errorf("PUT %s with a new endpointUrl over the bound: %d %v; want 400 naming its size", p, status, put)
		}
	}
}
