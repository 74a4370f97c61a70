package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
)

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

func TestAdminAPI(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "s3cret"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()

	if status, _ := adminDo(t, srv, "", "PUT", "/admin/topics/orders", `{}`); status != 401 {
		t.Fatalf("PUT without token: %d, want 401", status)
	}
	if status, _ := adminDo(t, srv, "wrong", "GET", "/admin/topics", ""); status != 401 {
		t.Fatalf("GET with a wrong token: %d, want 401", status)
	}
	status, topic := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders", `{"properties":{"inputSchema":"eventgridschema"}}`)
	if status != 201 {
		t.Fatalf("PUT topic: %d %v", status, topic)
	}
	props := topic["properties"].(map[string]any)
	if _, leaked := props["key1"]; leaked {
		t.Errorf("topic read returned key1: keys must only come from listKeys")
	}
	if !strings.HasSuffix(props["endpoint"].(string), "/topics/orders/api/events") {
		t.Errorf("endpoint %v", props["endpoint"])
	}
	status, keys := adminDo(t, srv, "s3cret", "POST", "/admin/topics/orders/listKeys", "")
	if status != 200 || keys["key1"] == "" || keys["key2"] == "" || keys["key1"] == keys["key2"] {
		t.Fatalf("listKeys: %d %v, want two distinct generated keys", status, keys)
	}

	// Every problem of a subscription is reported at once, its name's included.
	status, bad := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders/eventSubscriptions/s1",
		`{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"ftp://x","maxEventsPerBatch":9000}},"retryPolicy":{"maxDeliveryAttempts":31},"eventDeliverySchema":"Nope"}}`)
	if status != 400 {
		t.Fatalf("bad subscription: %d %v", status, bad)
	}
	details := bad["error"].(map[string]any)["details"].([]any)
	joined := ""
	for _, d := range details {
		joined += d.(map[string]any)["message"].(string) + "\n"
	}
	for _, want := range []string{"name \"s1\"", "endpointUrl", "maxEventsPerBatch", "maxDeliveryAttempts", "eventDeliverySchema"} {
		if !strings.Contains(joined, want) {
			t.Errorf("problems %q do not mention %s", joined, want)
		}
	}
	if status, _ := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders/eventSubscriptions/billing", `{"properties":{"destinaton":{}}}`); status != 400 {
		t.Errorf("misspelt property: %d, want 400", status)
	}

	status, sub := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders/eventSubscriptions/billing",
		`{"properties":{"destination":{"endpointType":"webhook","properties":{"endpointUrl":"http://127.0.0.1:9/hook","maxEventsPerBatch":10,"preferredBatchSizeInKilobytes":64,"skipValidation":true}},"retryPolicy":{"maxDeliveryAttempts":10,"eventTimeToLiveInMinutes":60},"eventDeliverySchema":"CloudEventSchemaV1_0"}}`)
	if status != 201 {
		t.Fatalf("PUT subscription: %d %v", status, sub)
	}
	status, got := adminDo(t, srv, "s3cret", "GET", "/admin/topics/orders/eventSubscriptions/billing", "")
	if status != 200 {
		t.Fatalf("GET subscription: %d", status)
	}
	gp := got["properties"].(map[string]any)
	if gp["eventDeliverySchema"] != "CloudEventSchemaV1_0" || gp["retryPolicy"].(map[string]any)["maxDeliveryAttempts"].(float64) != 10 {
		t.Errorf("subscription read back as %v", gp)
	}
	if ds, ok := gp["deliveryState"].(map[string]any); !ok || ds["backlog"].(float64) != 0 {
		t.Errorf("deliveryState %v, want backlog 0", gp["deliveryState"])
	}
	status, list := adminDo(t, srv, "s3cret", "GET", "/admin/topics/orders/eventSubscriptions", "")
	if status != 200 || len(list["value"].([]any)) != 1 {
		t.Errorf("list: %d %v", status, list)
	}
	if status, _ := adminDo(t, srv, "s3cret", "DELETE", "/admin/topics/orders/eventSubscriptions/billing", ""); status != 200 {
		t.Errorf("DELETE subscription: %d", status)
	}
	if status, _ := adminDo(t, srv, "s3cret", "GET", "/admin/topics/orders/eventSubscriptions/billing", ""); status != 404 {
		t.Errorf("GET deleted subscription: %d, want 404", status)
	}
	if status, _ := adminDo(t, srv, "s3cret", "DELETE", "/admin/topics/orders", ""); status != 200 {
		t.Errorf("DELETE topic: %d", status)
	}
	if status, _ := adminDo(t, srv, "s3cret", "GET", "/admin/topics/orders", ""); status != 404 {
		t.Errorf("GET deleted topic: %d, want 404", status)
	}
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	r, err := router.New(router.Config{}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	if status, body := adminDo(t, srv, "", "GET", "/admin/topics", ""); status != 403 || !strings.Contains(body["error"].(map[string]any)["message"].(string), "adminToken") {
		t.Errorf("admin without a configured token: %d %v, want 403 naming adminToken", status, body)
	}
}

func TestNamesAreValidated(t *testing.T) {
	r, err := router.New(router.Config{}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	for _, name := range []string{"ab", strings.Repeat("a", 51), "has_underscore", "space d"} {
		if _, err := r.CreateTopic(context.Background(), name, router.TopicSpec{}); err == nil {
			t.Errorf("topic name %q accepted", name)
		}
	}
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{InputSchema: "Nope", Kind: "odd"}); err == nil ||
		!strings.Contains(err.Error(), "inputSchema") || !strings.Contains(err.Error(), "kind") {
		t.Errorf("bad topic spec error %v, want both problems", err)
	}
}

// TestAdminBodiesOverTheLimitSayWhy: an admin body over its limit is refused as too large,
// not cut at the limit and then reported as malformed JSON ("unexpected end of JSON input").
func TestAdminBodiesOverTheLimitSayWhy(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	big := `{"properties":{},"tags":{"note":"` + strings.Repeat("a", 1<<20) + `"}}`
	for _, path := range []string{"/admin/topics/big-one", "/admin/topics/orders/eventSubscriptions/big-one"} {
		status, body := adminDo(t, srv, "tok", "PUT", path, big)
		e, _ := body["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "1 MB") {
			t.Errorf("PUT %s with a body over 1 MB: %d %v, want 413 naming the limit", path, status, body)
		}
	}
	if err := r.CreateSubscription(context.Background(), "orders", "sub-1", router.SubscriptionSpec{Destination: router.SinkDestination("null")}); err != nil {
		t.Fatal(err)
	}
	status, body := adminDo(t, srv, "tok", "POST", "/admin/topics/orders/eventSubscriptions/sub-1/deadLetters/replay", `{"dryRun":true`+strings.Repeat(" ", 1<<16)+`}`)
	if e, _ := body["error"].(map[string]any); status != http.StatusRequestEntityTooLarge || !strings.Contains(fmt.Sprint(e["message"]), "64 KB") {
		t.Errorf("replay with a body over 64 KB: %d %v, want 413 naming the limit", status, body)
	}
	if status, body := adminDo(t, srv, "tok", "GET", "/admin/topics/big-one", ""); status != http.StatusNotFound {
		t.Errorf("the refused topic: %d %v, want 404", status, body)
	}
}

// TestAdminTypeErrorsNameTheProperty: a property of the wrong JSON type is named by its JSON
// path, with the JSON to send — not by egrid's Go types, which say nothing to a client.
func TestAdminTypeErrorsNameTheProperty(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	for _, tt := range []struct{ name, path, body, want string }{
		{"topic enum", "/admin/topics/other", `{"properties":{"inputSchema":5}}`, "properties.inputSchema: is a JSON number; send a string"},
		{"properties not an object", "/admin/topics/other", `{"properties":[]}`, "properties: is a JSON array; send an object"},
		{"nested in an array", "/admin/topics/orders/eventSubscriptions/sub-1",
			`{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://x.example/","deliveryAttributeMappings":[{"name":"X","type":"Static","properties":{"value":12}}]}}}}`,
			"properties.destination.properties.deliveryAttributeMappings.properties.value: is a JSON number; send a string"},
		{"number", "/admin/topics/orders/eventSubscriptions/sub-1", `{"properties":{"retryPolicy":{"maxDeliveryAttempts":"ten"}}}`, "properties.retryPolicy.maxDeliveryAttempts: is a JSON string; send a whole number"},
	} {
		status, body := adminDo(t, srv, "tok", "PUT", tt.path, tt.body)
		e, _ := body["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if status != http.StatusBadRequest || !strings.Contains(msg, tt.want) || strings.Contains(msg, "Go ") || strings.Contains(msg, "Spec") {
			t.Errorf("%s: %d %q; want 400 saying %q, without Go type names", tt.name, status, msg, tt.want)
		}
	}
}

// TestAdminBearerSchemeIgnoresCase: HTTP's authentication schemes match ignoring case
// (RFC 9110 §11.1), so "bearer <token>" is the token as "Bearer <token>" is; a wrong token in
// any case is still refused.
func TestAdminBearerSchemeIgnoresCase(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	h := httpapi.New(r)
	for _, tt := range []struct {
		authz string
		want  int
	}{
		{"Bearer tok", 200},
		{"bearer tok", 200},
		{"BEARER tok", 200},
		{"bearer wrong", 401},
		{"Bearertok", 401},
		{"Basic tok", 401},
		{"bear", 401},
	} {
		rec := serve(h, "GET", "/admin/topics", "", http.Header{"Authorization": {tt.authz}})
		if rec.Code != tt.want {
			t.Errorf("Authorization %q: %d %s; want %d", tt.authz, rec.Code, rec.Body, tt.want)
		}
	}
}

// A topic read back can be PUT again unchanged, as an event subscription can (and as ARM
// takes its own reads): the read-only endpoint and provisioningState it adds are accepted and
// ignored. Before, a topic read was refused with "unknown field endpoint".
func TestTopicReadCanBePutAgain(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "s3cret"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	if status, body := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders", `{"properties":{"kind":"namespace"}}`); status != 201 {
		t.Fatalf("PUT topic: %d %v", status, body)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/admin/topics/orders", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	read, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	status, again := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders", string(read))
	if status != 200 {
		t.Fatalf("PUT of the topic as read: %d %v\nread: %s", status, again, read)
	}
	if p := again["properties"].(map[string]any); p["kind"] != "namespace" || p["provisioningState"] != "Succeeded" {
		t.Errorf("PUT of the topic as read answered properties %v", p)
	}
	// A read-only property of the wrong kind is still JSON, and still ignored; a misspelt one
	// is still refused.
	if status, body := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders", `{"properties":{"kind":"namespace","endpoint":1,"provisioningState":null}}`); status != 200 {
		t.Errorf("PUT with read-only properties: %d %v", status, body)
	}
	if status, _ := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders", `{"properties":{"endpoints":"x"}}`); status != 400 {
		t.Errorf("PUT with a misspelt property: %d, want 400", status)
	}
}

// A definition with thousands of problems is answered in a few kilobytes: the count of its
// problems and the first twenty, each a detail. Before, each problem was listed twice, so a
// 1 MB body of 10 000 advanced filters on bad keys made a 25 MB answer (3 000 delivery
// attribute mappings: 6 MB), built in the server's memory.
func TestAdminProblemsAreListedUpToTwenty(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "s3cret"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	if status, body := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders", `{}`); status != 201 {
		t.Fatalf("PUT topic: %d %v", status, body)
	}
	const dest = `"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://127.0.0.1/"`
	var filters, labels, mappings []string
	for i := range 10000 {
		filters = append(filters, fmt.Sprintf(`{"operatorType":"Nope%d","key":"bad key %d <<<<<<<<<<<<<<<<<<<<<<","values":[1]}`, i, i))
	}
	for range 3500 {
		labels = append(labels, `"`+strings.Repeat("<", 257)+`"`)
	}
	for range 3000 {
		mappings = append(mappings, `{"name":"`+strings.Repeat("<", 257)+`","type":"Bogus"}`)
	}
	for _, c := range []struct{ name, body string }{
		{"10 000 advanced filters", `{"properties":{` + dest + `}},"filter":{"advancedFilters":[` + strings.Join(filters, ",") + `]}}}`},
		{"3 500 labels too long", `{"properties":{` + dest + `}},"labels":[` + strings.Join(labels, ",") + `]}}`},
		{"3 000 bad delivery attribute mappings", `{"properties":{` + dest + `,"deliveryAttributeMappings":[` + strings.Join(mappings, ",") + `]}}}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("PUT", srv.URL+"/admin/topics/orders/eventSubscriptions/billing", strings.NewReader(c.body))
			req.Header.Set("Authorization", "Bearer s3cret")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 {
				t.Fatalf("status %d, want 400: %.300s", resp.StatusCode, raw)
			}
			if len(raw) > 64<<10 {
				t.Fatalf("a %d-byte answer to a %d-byte definition: %.300s", len(raw), len(c.body), raw)
			}
			var e struct {
				Error struct {
					Message string
					Details []struct{ Code, Message string }
				}
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			if len(e.Error.Details) != 20 || !strings.Contains(e.Error.Message, " problems: ") || !strings.Contains(e.Error.Message, "more not listed here") {
				t.Errorf("%d details, message %.400q: want 20 details and a message counting all problems and saying more are not listed", len(e.Error.Details), e.Error.Message)
			}
		})
	}
}

// A definition is stored as it was sent or refused saying why: encoding/json reads bytes that
// are not UTF-8 and a \u escape of half a surrogate pair as U+FFFD, and keeps the last of a
// member sent twice, so a filter value or a label was stored as other text than was sent, and
// a second "properties" dropped the first whole — each answered 200 or 201. A surrogate pair
// is a character and is taken.
func TestAdminDefinitionsAreTakenAsSent(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "s3cret", SkipEndpointValidation: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	if status, body := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders", `{}`); status != 201 {
		t.Fatalf("PUT topic: %d %v", status, body)
	}
	const dest = `"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://127.0.0.1/"}}`
	for _, c := range []struct{ name, body, want string }{
		{"a label that is not UTF-8", `{"properties":{` + dest + `,"labels":["a` + "\xff" + `"]}}`, "not valid UTF-8"},
		{"a filter value holding half a surrogate pair", `{"properties":{` + dest + `,"filter":{"advancedFilters":[{"operatorType":"StringIn","key":"data.a","values":["x\ud800"]}]}}}`, `"properties.filter.advancedFilters[0].values[0]" holds the escape \ud800`},
		{"a member name holding half a surrogate pair", `{"properties":{` + dest + `,"filter":{"advancedFilters":[{"operatorType":"StringIn","key":"data.a","values":["x"],"\udc00":1}]}}}`, `holds the escape \udc00`},
		{"properties sent twice", `{"properties":{` + dest + `},"properties":{"labels":["a"]}}`, `"properties": the member is sent twice`},
		{"a member sent twice", `{"properties":{` + dest + `,"retryPolicy":{"maxDeliveryAttempts":3},"retryPolicy":{}}}`, `"properties.retryPolicy": the member is sent twice`},
		{"a member sent twice in two cases", `{"properties":{` + dest + `,"Destination":{}}}`, `as "destination" and "Destination"`},
		{"a tag sent twice", `{"tags":{"env":"a","env":"b"},"properties":{` + dest + `}}`, `"tags.env": the member is sent twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders/eventSubscriptions/billing", c.body)
			e, _ := body["error"].(map[string]any)
			msg, _ := e["message"].(string)
			if status != 400 || !strings.Contains(msg, c.want) {
				t.Errorf("%d %v, want 400 saying %s", status, body, c.want)
			}
		})
	}
	status, body := adminDo(t, srv, "s3cret", "PUT", "/admin/topics/orders/eventSubscriptions/billing", `{"properties":{`+dest+`,"labels":["\ud83d\ude00"]}}`)
	if status != 201 || body["properties"].(map[string]any)["labels"].([]any)[0] != "😀" {
		t.Errorf("a label of a surrogate pair: %d %v, want 201 with the label 😀", status, body)
	}
}
