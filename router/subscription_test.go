package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
)

// request is one request a test webhook received.
type request struct {
	method string
	uri    string
	header http.Header
	body   []byte
}

// hook is a webhook endpoint for tests: it records every request and answers with answer
// (nil: the Event Grid handler's usual answers — the validation code echoed, OPTIONS
// consented, 200 to deliveries).
type hook struct {
	mu       sync.Mutex
	requests []request
	got      chan request
	answer   func(w http.ResponseWriter, r *http.Request, body []byte)
}

func newHook(answer func(w http.ResponseWriter, r *http.Request, body []byte)) *hook {
	return &hook{got: make(chan request, 100), answer: answer}
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := request{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: body}
	h.mu.Lock()
	h.requests = append(h.requests, req)
	h.mu.Unlock()
	h.got <- req
	if h.answer != nil {
		h.answer(w, r, body)
		return
	}
	echoHandshake(w, r, body)
}

// echoHandshake answers as a well-behaved Event Grid handler.
func echoHandshake(w http.ResponseWriter, r *http.Request, body []byte) {
	switch {
	case r.Method == http.MethodOptions:
		w.Header().Set("WebHook-Allowed-Origin", r.Header.Get("WebHook-Request-Origin"))
	case r.Header.Get("aeg-event-type") == "SubscriptionValidation":
		_ = json.NewEncoder(w).Encode(map[string]string{"validationResponse": validationData(body).ValidationCode})
	}
}

type validation struct {
	ValidationCode string `json:"validationCode"`
	ValidationURL  string `json:"validationUrl"`
}

func validationData(body []byte) validation {
	var evs []struct {
		EventType string     `json:"eventType"`
		Data      validation `json:"data"`
	}
	if json.Unmarshal(body, &evs) != nil || len(evs) != 1 || evs[0].EventType != "Microsoft.EventGrid.SubscriptionValidationEvent" {
		return validation{}
	}
	return evs[0].Data
}

// snapshot returns the requests so far.
func (h *hook) snapshot() []request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests)
}

// await waits (bounded) for the next request with aeg-event-type kind.
func (h *hook) await(t *testing.T, kind string) request {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-h.got:
			if r.header.Get("aeg-event-type") == kind {
				return r
			}
		case <-timeout:
			t.Fatalf("no %s request within 30 s; requests so far: %d", kind, len(h.snapshot()))
		}
	}
}

// eventIDs lists the ids in an Event Grid schema body.
func eventIDs(t *testing.T, body []byte) []string {
	t.Helper()
	var evs []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &evs); err != nil {
		t.Fatalf("delivery body %s is not an Event Grid array: %v", body, err)
	}
	var ids []string
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	return ids
}

// withoutFalse drops false booleans from a decoded JSON value: reads leave out properties at
// their default, as ARM reads may.
func withoutFalse(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if b, ok := e.(bool); ok && !b {
				continue
			}
			out[k] = withoutFalse(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = withoutFalse(e)
		}
		return out
	}
	return v
}

func props(t *testing.T, v map[string]any, path ...string) map[string]any {
	t.Helper()
	for _, p := range path {
		next, ok := v[p].(map[string]any)
		if !ok {
			t.Fatalf("no object %q in %v", p, v)
		}
		v = next
	}
	return v
}

// TestARMDocumentationBlock PUTs an ARM properties block assembled from Event Grid's
// documentation unchanged (the WebHook destination and dead-letter destination of the REST
// example EventSubscriptions_CreateOrUpdateForCustomTopic_WebhookDestination, the advanced
// filters of "Understand event filtering", the delivery attribute mappings of "Delivery
// properties", the batching settings of "Event Grid output batching", the retry policy of
// "Dead letter and retry policies") and checks that the subscription behaves accordingly end
// to end: the filter picks the events, the headers are delivered, the batches respect
// maxEventsPerBatch, and reads round-trip every property but hide the secrets.
func TestARMDocumentationBlock(t *testing.T) {
	block, err := os.ReadFile("testdata/arm_webhook_subscription.json")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := newHook(nil)
	tlsSrv := httptest.NewTLSServer(endpoint)
	defer tlsSrv.Close()
	// The block's endpoint is contosofunction.azurewebsites.net: every dial goes to the test
	// server instead, whose certificate is for example.com.
	tr := tlsSrv.Client().Transport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, tlsSrv.Listener.Addr().String())
	}
	tr.TLSClientConfig.ServerName = "example.com"
	var deadMu sync.Mutex
	var dead []*router.DeadLetter
	r, err := router.New(router.Config{AdminToken: "admin"}, router.Deps{
		HTTPClient:   &http.Client{Transport: tr},
		OnDeadLetter: func(d *router.DeadLetter) { deadMu.Lock(); dead = append(dead, d); deadMu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()

	if status, body := adminDo(t, srv, "admin", "PUT", "/admin/topics/contoso", `{}`); status != 201 {
		t.Fatalf("PUT topic: %d %v", status, body)
	}
	status, created := adminDo(t, srv, "admin", "PUT", "/admin/topics/contoso/eventSubscriptions/es1", string(block))
	if status != 201 {
		t.Fatalf("PUT the documented block: %d %v", status, created)
	}
	if v := validationData(endpoint.await(t, "SubscriptionValidation").body); v.ValidationCode == "" || !strings.HasPrefix(v.ValidationURL, srv.URL+"/eventsubscriptions/es1/validate?") {
		t.Errorf("validation event data %+v: want a code and a validationUrl at the admin request's host", v)
	}

	// Reads return every property as put, except the secrets.
	_, got := adminDo(t, srv, "admin", "GET", "/admin/topics/contoso/eventSubscriptions/es1", "")
	var want map[string]any
	if err := json.Unmarshal(block, &want); err != nil {
		t.Fatal(err)
	}
	wp, gp := props(t, want, "properties"), props(t, got, "properties")
	if gp["provisioningState"] != "Succeeded" {
		t.Errorf("provisioningState %v, want Succeeded", gp["provisioningState"])
	}
	wantDest, gotDest := props(t, wp, "destination", "properties"), props(t, gp, "destination", "properties")
	delete(wantDest, "endpointUrl") // it has a query string: hidden
	wantDest["endpointBaseUrl"] = "https://contosofunction.azurewebsites.net/api/HttpTriggerCSharp1"
	delete(wantDest["deliveryAttributeMappings"].([]any)[0].(map[string]any)["properties"].(map[string]any), "value") // isSecret
	for _, key := range []string{"destination", "filter", "retryPolicy", "deadLetterDestination", "eventDeliverySchema", "labels"} {
		w, _ := json.Marshal(withoutFalse(wp[key]))
		g, _ := json.Marshal(withoutFalse(gp[key]))
		if !bytes.Equal(w, g) {
			t.Errorf("%s read back as\n%s\nwant\n%s", key, g, w)
		}
	}
	if _, ok := gotDest["endpointUrl"]; ok {
		t.Errorf("read returned endpointUrl, which has a secret query string")
	}

	// Events: three match; four fail one condition each.
	publish := `[` +
		`{"id":"match-1","eventType":"Contoso.Items.ItemReceived","subject":"ExamplePrefix/container1/ExampleSuffix","eventTime":"2026-01-01T00:00:00Z","data":{"key1":7},"dataVersion":"1"},` +
		`{"id":"match-2","eventType":"contoso.items.itemreceived","subject":"exampleprefix/CONTAINER2/examplesuffix","eventTime":"2026-01-01T00:00:00Z","data":{"key1":5},"dataVersion":"1"},` +
		`{"id":"match-3","eventType":"Contoso.Items.ItemReceived","subject":"ExamplePrefix/container2/ExampleSuffix","eventTime":"2026-01-01T00:00:00Z","data":{"key1":9.5},"dataVersion":"1"},` +
		`{"id":"other-type","eventType":"Contoso.Items.ItemSold","subject":"ExamplePrefix/container1/ExampleSuffix","eventTime":"2026-01-01T00:00:00Z","data":{"key1":7},"dataVersion":"1"},` +
		`{"id":"other-prefix","eventType":"Contoso.Items.ItemReceived","subject":"Other/container1/ExampleSuffix","eventTime":"2026-01-01T00:00:00Z","data":{"key1":7},"dataVersion":"1"},` +
		`{"id":"too-small","eventType":"Contoso.Items.ItemReceived","subject":"ExamplePrefix/container1/ExampleSuffix","eventTime":"2026-01-01T00:00:00Z","data":{"key1":4},"dataVersion":"1"},` +
		`{"id":"other-container","eventType":"Contoso.Items.ItemReceived","subject":"ExamplePrefix/container3/ExampleSuffix","eventTime":"2026-01-01T00:00:00Z","data":{"key1":7},"dataVersion":"1"}]`
	var events []json.RawMessage
	_ = json.Unmarshal([]byte(publish), &events)
	anyEvents := make([]any, len(events))
	for i, e := range events {
		anyEvents[i] = e
	}
	if err := r.Publish(context.Background(), "contoso", anyEvents...); err != nil {
		t.Fatal(err)
	}
	key1 := map[string]string{"match-1": "7", "match-2": "5", "match-3": "9.5"}
	var delivered []string
	requests := 0
	for len(delivered) < 3 {
		d := endpoint.await(t, "Notification")
		requests++
		ids := eventIDs(t, d.body)
		if len(ids) > 2 {
			t.Errorf("a request carried %d events; maxEventsPerBatch is 2", len(ids))
		}
		if d.uri != "/api/HttpTriggerCSharp1?code=FUNCTION-KEY-SECRET" {
			t.Errorf("delivered to %s; want the endpoint URL with its query string", d.uri)
		}
		for k, v := range map[string]string{"Authorization": "BEARER SlAV32hkKG-STATIC-SECRET", "header1": "staticValue1", "header2": key1[ids[0]]} {
			if d.header.Get(k) != v {
				t.Errorf("header %s = %q; want %q (header2 from the batch's first event %s)", k, d.header.Get(k), v, ids[0])
			}
		}
		delivered = append(delivered, ids...)
	}
	slices.Sort(delivered)
	if !slices.Equal(delivered, []string{"match-1", "match-2", "match-3"}) {
		t.Errorf("delivered %v; want match-1..3", delivered)
	}
	if requests != 2 {
		t.Errorf("%d requests for 3 events published together; want 2 (batches of at most 2)", requests)
	}
	snap := r.Metrics().Snapshot()
	if m, u := snap.Sum(metrics.MatchedEventCount, metrics.SubscriptionScope("contoso", "es1")), snap.Sum(metrics.UnmatchedEventCount, "contoso"); m != 3 || u != 4 {
		t.Errorf("MatchedEventCount %d, UnmatchedEventCount %d; want 3 and 4", m, u)
	}
	deadMu.Lock()
	defer deadMu.Unlock()
	if len(dead) != 0 {
		t.Errorf("%d dead letters; want none", len(dead))
	}
}

// TestSecretsStayHidden checks that admin reads hide the endpoint's query string and secret
// header values, that a definition read back and PUT again keeps them, and that errors do not
// repeat them.
func TestSecretsStayHidden(t *testing.T) {
	const (
		querySecret  = "q-SECRET-4711"
		headerSecret = "h-SECRET-0815"
	)
	endpoint := newHook(nil)
	hookSrv := httptest.NewServer(endpoint)
	defer hookSrv.Close()
	r, err := router.New(router.Config{AdminToken: "admin"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	adminDo(t, srv, "admin", "PUT", "/admin/topics/orders", `{}`)
	put := `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"` + hookSrv.URL + `/hook?code=` + querySecret + `",` +
		`"deliveryAttributeMappings":[{"name":"X-Api-Key","type":"Static","properties":{"value":"` + headerSecret + `","isSecret":true}},` +
		`{"name":"X-Plain","type":"Static","properties":{"value":"visible"}}]}},"labels":["a"]}}`
	_, created := adminDo(t, srv, "admin", "PUT", "/admin/topics/orders/eventSubscriptions/billing", put)
	_, got := adminDo(t, srv, "admin", "GET", "/admin/topics/orders/eventSubscriptions/billing", "")
	_, list := adminDo(t, srv, "admin", "GET", "/admin/topics/orders/eventSubscriptions", "")
	for what, v := range map[string]map[string]any{"PUT answer": created, "GET": got, "list": list} {
		raw, _ := json.Marshal(v)
		if strings.Contains(string(raw), querySecret) || strings.Contains(string(raw), headerSecret) {
			t.Errorf("%s shows a secret: %s", what, raw)
		}
		if !strings.Contains(string(raw), "visible") || !strings.Contains(string(raw), hookSrv.URL+"/hook") {
			t.Errorf("%s hides more than the secrets: %s", what, raw)
		}
	}

	// PUT the read back unchanged, with a new label: the secrets are kept.
	gp := props(t, got, "properties")
	gp["labels"] = []any{"a", "b"}
	back, _ := json.Marshal(map[string]any{"properties": gp})
	if status, body := adminDo(t, srv, "admin", "PUT", "/admin/topics/orders/eventSubscriptions/billing", string(back)); status != 200 {
		t.Fatalf("PUT of the read-back definition: %d %v", status, body)
	}
	spec, err := r.Subscription("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(spec.Destination.Properties.EndpointURL, "?code="+querySecret) || spec.Destination.Properties.DeliveryAttributeMappings[0].Properties.Value != headerSecret || !slices.Equal(spec.Labels, []string{"a", "b"}) {
		t.Errorf("after the PUT-back the spec is %+v; want the secrets kept and labels [a b]", spec)
	}
	// Event Grid validates on every update, so the endpoint is validated again — at the kept
	// URL, secret query string included.
	if reqs := endpoint.snapshot(); len(reqs) != 2 || reqs[1].header.Get("aeg-event-type") != "SubscriptionValidation" || !strings.HasSuffix(reqs[1].uri, "?code="+querySecret) {
		t.Errorf("the endpoint got %d requests; want 2, the second the update's validation at the kept URL", len(reqs))
	}
	if err := r.Publish(context.Background(), "orders", map[string]any{"id": "e1", "subject": "s", "eventType": "t", "eventTime": "2026-01-01T00:00:00Z", "data": map[string]any{}, "dataVersion": "1"}); err != nil {
		t.Fatal(err)
	}
	if d := endpoint.await(t, "Notification"); d.header.Get("X-Api-Key") != headerSecret || !strings.HasSuffix(d.uri, "?code="+querySecret) {
		t.Errorf("delivery with X-Api-Key %q to %s; want the kept secrets", d.header.Get("X-Api-Key"), d.uri)
	}

	// A read-back with endpointBaseUrl changed but no endpointUrl is refused; errors never
	// repeat secrets.
	props(t, gp, "destination", "properties")["endpointBaseUrl"] = "http://elsewhere.test/hook"
	moved, _ := json.Marshal(map[string]any{"properties": gp})
	status, bad := adminDo(t, srv, "admin", "PUT", "/admin/topics/orders/eventSubscriptions/billing", string(moved))
	if raw, _ := json.Marshal(bad); status != 400 || !strings.Contains(string(raw), "endpointUrl: required") {
		t.Errorf("PUT with another endpointBaseUrl and no endpointUrl: %d %s; want 400 asking for endpointUrl", status, raw)
	}
	badPut := `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"ftp://x/?code=` + querySecret + `",` +
		`"deliveryAttributeMappings":[{"name":"aeg-key","type":"Static","properties":{"value":"` + headerSecret + `","isSecret":true}},` +
		`{"name":"X-Long","type":"Static","properties":{"value":"` + headerSecret + strings.Repeat("x", 4096) + `"}}]}}}}`
	status, bad = adminDo(t, srv, "admin", "PUT", "/admin/topics/orders/eventSubscriptions/other", badPut)
	raw, _ := json.Marshal(bad)
	if status != 400 || strings.Contains(string(raw), querySecret) || strings.Contains(string(raw), headerSecret) {
		t.Errorf("a refused PUT: %d %s; want 400 without the secrets", status, raw)
	}
	for _, want := range []string{"endpointUrl", `deliveryAttributeMappings[0] \"aeg-key\"`, `deliveryAttributeMappings[1] \"X-Long\"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("a refused PUT: %s; want a problem naming %s", raw, want)
		}
	}
}

func TestDeliveryAttributeMappingsAreChecked(t *testing.T) {
	r, err := router.New(router.Config{SkipEndpointValidation: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	static := func(name, value string) router.DeliveryAttributeMapping {
		return router.DeliveryAttributeMapping{Name: name, Type: "static", Properties: router.DeliveryAttributeMappingProperties{Value: value}}
	}
	var eleven []router.DeliveryAttributeMapping
	for i := range 11 {
		eleven = append(eleven, static("X-H"+string(rune('a'+i)), "v"))
	}
	tests := []struct {
		name     string
		mappings []router.DeliveryAttributeMapping
		want     []string // each must appear in the error; none means accepted
	}{
		{name: "types ignore case", mappings: []router.DeliveryAttributeMapping{static("X-A", "1"), {Name: "X-B", Type: "DYNAMIC", Properties: router.DeliveryAttributeMappingProperties{SourceField: "data.b"}}}},
		{name: "eleven", mappings: eleven, want: []string{"11 headers; at most 10"}},
		{name: "every problem at once", mappings: []router.DeliveryAttributeMapping{
			static("aeg-x", "1"),
			{Name: "X-T", Type: "Computed"},
			{Name: "X-D", Type: "Dynamic"},
			{Name: "X-S", Type: "Static", Properties: router.DeliveryAttributeMappingProperties{Value: "v", SourceField: "data.x"}},
			static("X-Long", strings.Repeat("v", 4097)),
		}, want: []string{
			`deliveryAttributeMappings[0] "aeg-x": names starting with "aeg-"`,
			`deliveryAttributeMappings[1] "X-T": type "Computed" is not supported`,
			`deliveryAttributeMappings[2] "X-D": a Dynamic mapping needs properties.sourceField`,
			`deliveryAttributeMappings[3] "X-S": sourceField applies to Dynamic mappings only`,
			`deliveryAttributeMappings[4] "X-Long": the static value is 4097 bytes`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:9/hook")}
			spec.Destination.Properties.DeliveryAttributeMappings = tt.mappings
			err := r.CreateSubscription(context.Background(), "orders", "sub", spec)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("CreateSubscription: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CreateSubscription accepted %+v", tt.mappings)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestGoSinkGetsDeliveryHeaders(t *testing.T) {
	got := make(chan map[string]string, 1)
	sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		got <- maps.Clone(b.Headers)
		return nil
	})
	r, err := router.New(router.Config{}, router.Deps{Sinks: map[string]sinks.Sink{"audit": sink}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	spec := router.SubscriptionSpec{Destination: router.SinkDestination("audit")}
	spec.Destination.Properties.DeliveryAttributeMappings = []router.DeliveryAttributeMapping{
		{Name: "X-Source", Type: "Static", Properties: router.DeliveryAttributeMappingProperties{Value: "egrid"}},
		{Name: "X-Region", Type: "Dynamic", Properties: router.DeliveryAttributeMappingProperties{SourceField: "data.region"}},
	}
	if err := r.CreateSubscription(context.Background(), "orders", "audit", spec); err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(context.Background(), "orders", map[string]any{"id": "e1", "subject": "s", "eventType": "t", "eventTime": "2026-01-01T00:00:00Z", "data": map[string]any{"region": "eu"}, "dataVersion": "1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if !maps.Equal(h, map[string]string{"X-Source": "egrid", "X-Region": "eu"}) {
			t.Errorf("Batch.Headers = %v; want the static and the resolved dynamic header", h)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery within 30 s")
	}
}

func TestExpirationMustBeInTheFuture(t *testing.T) {
	r, err := router.New(router.Config{SkipEndpointValidation: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	spec := router.SubscriptionSpec{Destination: router.WebHook("ftp://x"), ExpirationTimeUTC: time.Now().Add(-time.Minute)}
	err = r.CreateSubscription(context.Background(), "orders", "sub", spec)
	if err == nil || !strings.Contains(err.Error(), "expirationTimeUtc") || !strings.Contains(err.Error(), "endpointUrl") {
		t.Fatalf("CreateSubscription with a past expiration and a bad URL = %v; want both problems", err)
	}
	if _, err := r.Subscription("orders", "sub"); !errors.Is(err, router.ErrSubscriptionNotFound) {
		t.Errorf("the refused subscription exists: %v", err)
	}
}

// TestRetryTimeToLiveOutOfRange: eventTimeToLiveInMinutes is checked in minutes, before it
// becomes a duration. Converted first, 2^53+30 minutes wrapped to 30 minutes and was accepted
// (and stored, and shown back as 9007199254741022).
func TestRetryTimeToLiveOutOfRange(t *testing.T) {
	r, err := router.New(router.Config{SkipEndpointValidation: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1<<53 + 30, math.MaxInt, 1441, -1, math.MinInt} {
		spec := router.SubscriptionSpec{Destination: router.WebHook("https://example.com/"), RetryPolicy: router.RetryPolicy{EventTimeToLiveInMinutes: n}}
		err := r.CreateSubscription(context.Background(), "orders", "sub", spec)
		if err == nil || !strings.Contains(err.Error(), "retryPolicy.eventTimeToLiveInMinutes "+strconv.Itoa(n)) || !strings.Contains(err.Error(), "1-1440") {
			t.Errorf("eventTimeToLiveInMinutes %d: %v; want it refused, naming the field and 1-1440", n, err)
		}
	}
	for _, n := range []int{0, 1, 1440} {
		spec := router.SubscriptionSpec{Destination: router.WebHook("https://example.com/"), RetryPolicy: router.RetryPolicy{EventTimeToLiveInMinutes: n}}
		if err := r.CreateSubscription(context.Background(), "orders", "sub", spec); err != nil {
			t.Errorf("eventTimeToLiveInMinutes %d: %v; want it accepted", n, err)
		}
	}
}

// TestStoredInvalidSubscriptionDoesNotStopTheRouter: a stored definition that no longer
// passes validation (stored by an egrid that accepted it: eventTimeToLiveInMinutes 2^53+30
// before TestRetryTimeToLiveOutOfRange's check, or written by another version) is served as
// Failed, naming the problem, and the router starts with everything else. It made router.New
// fail ("loading subscription ..."), so the server did not start, nor its admin API that
// could fix the definition.
func TestStoredInvalidSubscriptionDoesNotStopTheRouter(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	cfg := router.Config{SkipEndpointValidation: true}
	r, err := router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "orders", "good", router.SubscriptionSpec{Destination: router.WebHook("https://example.com/good")}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{
		"ttl-wrap": `{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://example.com/a"}},"retryPolicy":{"eventTimeToLiveInMinutes":9007199254741022}}`,
		"attempts": `{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://example.com/b"}},"retryPolicy":{"maxDeliveryAttempts":31}}`,
	}
	for name, def := range stored {
		if err := st.PutSubscription(ctx, "orders", name, []byte(def)); err != nil {
			t.Fatal(err)
		}
	}

	r, err = router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatalf("router.New on a store holding invalid definitions: %v; want it to start", err)
	}
	defer r.Close(ctx)
	for name, field := range map[string]string{"ttl-wrap": "eventTimeToLiveInMinutes", "attempts": "maxDeliveryAttempts", "good": ""} {
		p, err := r.Provisioning("orders", name)
		switch {
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case field == "" && p.State != router.StateSucceeded:
			t.Errorf("%s: %+v, want Succeeded", name, p)
		case field != "" && (p.State != router.StateFailed || !strings.Contains(p.Message, field)):
			t.Errorf("%s: %+v, want Failed naming %s", name, p, field)
		}
	}
	// A valid definition put over it makes it deliver again.
	if err := r.CreateSubscription(ctx, "orders", "attempts", router.SubscriptionSpec{Destination: router.WebHook("https://example.com/b")}); err != nil {
		t.Fatal(err)
	}
	if p, err := r.Provisioning("orders", "attempts"); err != nil || p.State != router.StateSucceeded {
		t.Errorf("after a valid PUT: %+v %v, want Succeeded", p, err)
	}
}

func TestPrintingASpecHidesSecretValues(t *testing.T) {
	spec := router.SubscriptionSpec{Destination: router.WebHook("https://example.com/")}
	spec.Destination.Properties.DeliveryAttributeMappings = []router.DeliveryAttributeMapping{
		{Name: "Authorization", Type: "Static", Properties: router.DeliveryAttributeMappingProperties{Value: "Bearer TOP-SECRET", IsSecret: true}},
	}
	for _, format := range []string{"%v", "%+v", "%s"} {
		if s := fmt.Sprintf(format, spec); strings.Contains(s, "TOP-SECRET") {
			t.Errorf("Sprintf(%q, spec) shows the secret: %s", format, s)
		}
	}
}

// adminDo sends an admin request and decodes its JSON answer.
func adminDo(t *testing.T, srv *httptest.Server, token, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: body %q is not JSON", method, path, raw)
		}
	}
	return resp.StatusCode, out
}
