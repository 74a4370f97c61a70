package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/sas"
	"github.com/egridio/egrid/router/store"
)

type server struct {
	t    *testing.T
	r    *router.Router
	srv  *httptest.Server
	key1 string
}

func newServer(t *testing.T, cfg router.Config) *server {
	t.Helper()
	r, err := router.New(cfg, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	spec, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(context.Background(), "ns-orders", router.TopicSpec{Kind: router.KindNamespace, Key1: spec.Key1}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(r))
	t.Cleanup(srv.Close)
	return &server{t: t, r: r, srv: srv, key1: spec.Key1}
}

func (s *server) post(path, contentType string, body []byte, header http.Header) (int, string) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func egEvent(id string) string {
	return fmt.Sprintf(`{"id":%q,"subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{"n":1},"dataVersion":"1.0"}`, id)
}

func TestBadPublishesAreRefusedWithAReason(t *testing.T) {
	s := newServer(t, router.Config{})
	key := http.Header{"Aeg-Sas-Key": {s.key1}}
	expired, err := sas.Sign(s.srv.URL+"/topics/orders/api/events", time.Now().Add(-time.Minute), s.key1)
	if err != nil {
		t.Fatal(err)
	}
	var many []string
	for i := range 5001 {
		many = append(many, fmt.Sprintf(`{"id":"%d","subject":"s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","data":1}`, i))
	}
	big := `[{"id":"1","subject":"s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","data":"` + strings.Repeat("x", 1<<20) + `"}]`
	const classic = "/topics/orders/api/events?api-version=2018-01-01"
	for _, c := range []struct {
		name        string
		path, ctype string
		body        string
		header      http.Header
		status      int
		mention     string
	}{
		{"malformed JSON", classic, "application/json", `[{"id":`, key, 400, "JSON"},
		{"object where an array is required", classic, "application/json", egEvent("1"), key, 400, "array"},
		{"missing id", classic, "application/json", `[{"subject":"s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","data":{}}]`, key, 400, "id"},
		{"not JSON, whatever the content type", classic, "text/plain", "orders=1", key, 400, "not valid JSON"},
		{"plain key in aeg-sas-token", classic, "application/json", "[" + egEvent("1") + "]", http.Header{"Aeg-Sas-Token": {s.key1}}, 400, "Valid format: r=UrlEncodedResource&e=UrlEncodedUtcExpiration&s=UrlEncodedSignature"},
		{"event over 1 MB", classic, "application/json", big, key, 413, "1048576"},
		{"5001 events", classic, "application/json", "[" + strings.Join(many, ",") + "]", key, 400, "5000"},
		{"unknown topic: 401 like a wrong key, so names cannot be probed", "/topics/nope/api/events", "application/json", "[" + egEvent("1") + "]", key, 401, "does not match key1 or key2 of topic nope"},
		{"wrong key", classic, "application/json", "[" + egEvent("1") + "]", http.Header{"Aeg-Sas-Key": {"d3Jvbmc="}}, 401, "aeg-sas-key"},
		{"expired SAS token", classic, "application/json", "[" + egEvent("1") + "]", http.Header{"Aeg-Sas-Token": {expired}}, 401, "expire"},
		{"no credentials", classic, "application/json", "[" + egEvent("1") + "]", nil, 401, "aeg-sas-key"},
		{"Entra token", classic, "application/json", "[" + egEvent("1") + "]", http.Header{"Authorization": {"Bearer x"}}, 401, "Entra"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := s.post(c.path, c.ctype, []byte(c.body), c.header)
			if status != c.status {
				t.Fatalf("status %d, want %d; body %s", status, c.status, body)
			}
			var e struct {
				Error struct {
					Code, Message string
				}
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("body %q is not Event Grid's error shape", body)
			}
			if !strings.Contains(strings.ToLower(e.Error.Message), strings.ToLower(c.mention)) {
				t.Errorf("message %q does not mention %q", e.Error.Message, c.mention)
			}
		})
	}
	if got := s.r.Metrics().Snapshot().Sum("PublishSuccessCount", "orders"); got != 0 {
		t.Errorf("%d events accepted by bad publishes, want 0", got)
	}
	// Each refused request of the known topic counts once in PublishFailCount by its error
	// (Azure Monitor's PublishFailCount, Error dimension); the unknown topic counts nowhere.
	for code, want := range map[string]int64{"BadRequest": 6, "PayloadTooLarge": 1, "Unauthorized": 4} {
		if got := s.r.Metrics().Get(metrics.Key{Name: metrics.PublishFailCount, Scope: "orders", Dim: code}); got != want {
			t.Errorf("PublishFailCount{orders, %s} = %d, want %d", code, got, want)
		}
	}
	if got := s.r.Metrics().Snapshot().Sum(metrics.PublishFailCount, "nope"); got != 0 {
		t.Errorf("PublishFailCount of an unknown topic = %d, want 0", got)
	}
}

func TestEveryCredentialFormIsAccepted(t *testing.T) {
	s := newServer(t, router.Config{})
	token, err := sas.Sign("https://example.invalid/topics/orders", time.Now().Add(time.Hour), s.key1)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("[" + egEvent("1") + "]")
	for name, c := range map[string]struct {
		path   string
		header http.Header
	}{
		"aeg-sas-key header":    {"/topics/orders/api/events", http.Header{"Aeg-Sas-Key": {s.key1}}},
		"aeg-sas-key query":     {"/topics/orders/api/events?aeg-sas-key=" + strings.NewReplacer("+", "%2B", "/", "%2F", "=", "%3D").Replace(s.key1), nil},
		"aeg-sas-token":         {"/topics/orders/api/events", http.Header{"Aeg-Sas-Token": {token}}},
		"SharedAccessSignature": {"/topics/orders/api/events", http.Header{"Authorization": {"SharedAccessSignature " + token}}},
		"SharedAccessKey":       {"/topics/orders/api/events", http.Header{"Authorization": {"SharedAccessKey " + s.key1}}},
		"namespace with key":    {"/topics/ns-orders:publish", http.Header{"Aeg-Sas-Key": {s.key1}}},
	} {
		t.Run(name, func(t *testing.T) {
			ct, b := "application/json", body
			if strings.Contains(c.path, ":publish") {
				ct, b = "application/cloudevents+json; charset=utf-8", []byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{}}`)
			}
			if status, resp := s.post(c.path, ct, b, c.header); status != 200 {
				t.Fatalf("status %d: %s", status, resp)
			}
		})
	}
}

func TestNamespacePublishForms(t *testing.T) {
	s := newServer(t, router.Config{InsecureDev: true})
	for name, c := range map[string]struct {
		ctype  string
		body   string
		header http.Header
	}{
		"single": {"application/cloudevents+json; charset=utf-8", `{"specversion":"1.0","id":"1","source":"/s","type":"t"}`, nil},
		"batch":  {"application/cloudevents-batch+json; charset=utf-8", `[{"specversion":"1.0","id":"1","source":"/s","type":"t"},{"specversion":"1.0","id":"2","source":"/s","type":"t"}]`, nil},
		"binary": {"application/json", `{"n":1}`, http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"b1"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}}},
	} {
		t.Run(name, func(t *testing.T) {
			status, body := s.post("/topics/ns-orders:publish?api-version=2023-11-01", c.ctype, []byte(c.body), c.header)
			if status != 200 || body != "{}" {
				t.Fatalf("status %d body %q, want 200 {}", status, body)
			}
		})
	}
	if status, body := s.post("/topics/orders:publish", "application/cloudevents+json", []byte(`{}`), nil); status != 400 || !strings.Contains(body, "api/events") {
		t.Errorf(":publish to an Event Grid schema topic: %d %s, want 400 pointing at /api/events", status, body)
	}
}

// Microsoft's quickstart publishes with `curl -X POST -H "aeg-sas-key: $key" -d "$event"`,
// which sends curl's default Content-Type, application/x-www-form-urlencoded, and builds
// eventTime with `date +%Y-%m-%dT%H:%M:%S%z` ("+0000"); Azure delivers it
// (learn.microsoft.com/azure/event-grid/custom-event-quickstart). So does egrid, and also a
// publish without any Content-Type.
func TestQuickstartCurlPublishIsAccepted(t *testing.T) {
	s := newServer(t, router.Config{})
	key := http.Header{"Aeg-Sas-Key": {s.key1}}
	event := `[{"id":"1","eventType":"recordInserted","subject":"myapp/vehicles/motorcycles","eventTime":"2026-01-01T10:00:00+0000","data":{"make":"Ducati","model":"Monster"},"dataVersion":"1.0"}]`
	for _, ct := range []string{"application/x-www-form-urlencoded", "", "text/plain"} {
		if status, body := s.post("/topics/orders/api/events", ct, []byte(event), key); status != 200 {
			t.Errorf("Content-Type %q: status %d %s, want 200", ct, status, body)
		}
	}
	if got := s.r.Metrics().Snapshot().Sum("PublishSuccessCount", "orders"); got != 3 {
		t.Errorf("%d events accepted, want 3", got)
	}
}

// Azure refuses a member the Event Grid schema does not have with 400, code BadRequest and
// detail code InputJsonInvalid, naming the member (the Azure response quoted in
// microsoft/onefuzz#3285: "This resource is configured for 'EventGridEvent' schema. Received
// unexpected property 'sas_url' ..."). Every schema problem carries that detail code.
func TestSchemaProblemsAnswerInputJsonInvalid(t *testing.T) {
	s := newServer(t, router.Config{})
	key := http.Header{"Aeg-Sas-Key": {s.key1}}
	for name, c := range map[string]struct{ body, mention string }{
		"unexpected property": {`[{"id":"1","subject":"s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","data":{},"sas_url":"x"}]`, `"sas_url": unexpected property`},
		"missing id":          {`[{"subject":"s","eventType":"t","eventTime":"2026-01-01T00:00:00Z","data":{}}]`, `"id": is required`},
		"malformed JSON":      {`[{"id":`, "not valid JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			status, body := s.post("/topics/orders/api/events", "application/json", []byte(c.body), key)
			var e struct {
				Error struct {
					Code, Message string
					Details       []struct{ Code, Message string }
				}
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if status != 400 || e.Error.Code != "BadRequest" || len(e.Error.Details) != 1 || e.Error.Details[0].Code != "InputJsonInvalid" {
				t.Fatalf("got %d %s, want 400 BadRequest with one InputJsonInvalid detail", status, body)
			}
			if !strings.Contains(e.Error.Details[0].Message, c.mention) {
				t.Errorf("detail %q does not mention %q", e.Error.Details[0].Message, c.mention)
			}
		})
	}
}

// TestPublishedEventsOutliveTheirBody: a publish's body buffer goes back to a pool for the
// next request, so the events kept from one request must not change when later requests are
// read into the same buffer.
func TestPublishedEventsOutliveTheirBody(t *testing.T) {
	st := store.NewMemory()
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(r))
	t.Cleanup(srv.Close)
	s := &server{t: t, r: r, srv: srv}

	const requests, perRequest = 20, 10
	pad := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), 500) }
	for i := range requests {
		evs := make([]string, perRequest)
		for j := range evs {
			evs[j] = fmt.Sprintf(`{"id":"r%02d-%d","subject":"/orders","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{"pad":%q},"dataVersion":"1.0"}`, i, j, pad(i))
		}
		if status, body := s.post("/topics/orders/api/events", "application/json", []byte("["+strings.Join(evs, ",")+"]"), nil); status != http.StatusOK {
			t.Fatalf("publish %d: %d %s", i, status, body)
		}
	}
	entries, err := st.Read(context.Background(), "orders", 1, requests*perRequest+1)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != requests*perRequest {
		t.Fatalf("the journal holds %d events, want %d", len(entries), requests*perRequest)
	}
	for k, e := range entries {
		i, j := k/perRequest, k%perRequest
		var got struct {
			ID   string `json:"id"`
			Data struct {
				Pad string `json:"pad"`
			} `json:"data"`
		}
		if err := json.Unmarshal(e.Event.Raw, &got); err != nil {
			t.Fatalf("event %d: %v in %s", k, err, e.Event.Raw)
		}
		if want := fmt.Sprintf("r%02d-%d", i, j); got.ID != want || e.Event.ID != want || got.Data.Pad != pad(i) {
			t.Errorf("event %d is %s (ID %s), data.pad %.10s…; want %s, %.10s…", k, got.ID, e.Event.ID, got.Data.Pad, want, pad(i))
		}
	}
}

// TestCompressedPublishesAreRefused: egrid does not decode Content-Encoding, so a compressed
// body is refused with 415 saying so, rather than read as JSON (an unhelpful syntax error) or,
// in binary mode, kept as the event's data: the receiver would get the compressed bytes
// without their encoding, which is not the data the publisher sent.
func TestCompressedPublishesAreRefused(t *testing.T) {
	s := newServer(t, router.Config{InsecureDev: true})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"n":1}`))
	_ = zw.Close()
	binary := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"b1"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}}
	for _, c := range []struct {
		name, path, ctype, encoding string
		header                      http.Header
	}{
		{"binary mode, gzip", "/topics/ns-orders:publish", "application/octet-stream", "gzip", binary},
		{"binary mode, deflate and gzip", "/topics/ns-orders:publish", "application/octet-stream", "deflate, gzip", binary},
		{"classic, gzip", "/topics/orders/api/events", "application/json", "gzip", nil},
		{"structured CloudEvent, br", "/topics/ns-orders:publish", "application/cloudevents+json", "br", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{"Content-Encoding": {c.encoding}}
			for k, v := range c.header {
				h[k] = v
			}
			status, body := s.post(c.path, c.ctype, gz.Bytes(), h)
			if status != http.StatusUnsupportedMediaType || !strings.Contains(body, "Content-Encoding") || !strings.Contains(body, "uncompressed") {
				t.Errorf("got %d %s, want 415 naming Content-Encoding and asking for an uncompressed body", status, body)
			}
		})
	}
	h := http.Header{"Content-Encoding": {"identity"}}
	for k, v := range binary {
		h[k] = v
	}
	if status, body := s.post("/topics/ns-orders:publish", "application/json", []byte(`{"n":1}`), h); status != 200 {
		t.Errorf("Content-Encoding: identity: %d %s, want 200", status, body)
	}
}

// A CloudEvents attribute sent in two ce- headers has no one value: the binding gives each
// attribute one header. egrid refuses the publish and names the attribute, rather than
// keeping whichever header came first.
func TestBinaryModeRefusesARepeatedAttribute(t *testing.T) {
	s := newServer(t, router.Config{InsecureDev: true})
	header := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"b1", "b2"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}}
	status, body := s.post("/topics/ns-orders:publish?api-version=2023-11-01", "application/json", []byte(`{"n":1}`), header)
	if status != 400 || !strings.Contains(body, `ce-id\": is sent in 2 headers`) {
		t.Fatalf("got %d %s, want 400 naming ce-id", status, body)
	}
	if got := s.r.Metrics().Snapshot().Sum("PublishSuccessCount", "ns-orders"); got != 0 {
		t.Errorf("%d events accepted, want none", got)
	}
}

// A binary-mode publish repeating thousands of ce- headers is answered as a body of thousands
// of bad events is: the first 20 problems, by header name, and a count of them all, in
// kilobytes. Before, every one was listed twice (message and detail).
func TestBinaryModeRepeatedAttributesAreCapped(t *testing.T) {
	s := newServer(t, router.Config{InsecureDev: true})
	header := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"b1"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}}
	for i := range 2000 {
		header[fmt.Sprintf("Ce-X%04d", i)] = []string{"a", "b"}
	}
	status, body := s.post("/topics/ns-orders:publish?api-version=2023-11-01", "application/json", []byte(`{"n":1}`), header)
	var e struct {
		Error struct {
			Message string
			Details []struct{ Message string }
		}
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("status %d body %.200q: %v", status, body, err)
	}
	const want = `2000 problems in the request; the first 20 are listed as details; nothing was accepted: event 0: field "ce-x0000": is sent in 2 headers`
	if status != 400 || !strings.HasPrefix(e.Error.Message, want) || len(e.Error.Details) != 20 || len(body) > 8192 {
		t.Fatalf("got %d, a %d-byte body, %d details, message %.200q; want 400, 20 details and a message starting %q", status, len(body), len(e.Error.Details), e.Error.Message, want)
	}
	if last := e.Error.Details[19].Message; !strings.Contains(last, `"ce-x0019"`) {
		t.Errorf("the last detail is %q, want ce-x0019's", last)
	}
}

// Binary content mode (ce-* headers, the data as the body) is documented by Azure for
// namespace topics only (eventgrid-behaviour.md §1.3, §11.18): a custom topic's classic route
// takes structured CloudEvents. So a binary publish there is refused with what to send
// instead, rather than its body taken as an event's data; :publish keeps taking it, on a
// namespace topic and on a CloudEvents custom topic, and so does a namespace topic's classic
// route under --any-api-version, which takes what :publish takes.
func TestBinaryModeOnTheClassicRoute(t *testing.T) {
	binary := http.Header{"Ce-Specversion": {"1.0"}, "Ce-Id": {"b1"}, "Ce-Source": {"/s"}, "Ce-Type": {"t"}}
	for _, anyVersion := range []bool{false, true} {
		t.Run(fmt.Sprintf("anyApiVersion %v", anyVersion), func(t *testing.T) {
			s := newServer(t, router.Config{InsecureDev: true, AnyAPIVersion: anyVersion})
			if _, err := s.r.CreateTopic(context.Background(), "ce-orders", router.TopicSpec{InputSchema: "CloudEventSchemaV1_0"}); err != nil {
				t.Fatal(err)
			}
			status, body := s.post("/topics/ce-orders/api/events?api-version=2018-01-01", "text/plain", []byte("hello"), binary)
			for _, want := range []string{`"code":"BadRequest"`, "binary content mode", "application/cloudevents+json", "application/cloudevents-batch+json", "/topics/ce-orders:publish?api-version=2024-06-01", "nothing was accepted"} {
				if status != 400 || !strings.Contains(body, want) {
					t.Fatalf("binary mode on the classic route: %d %s; want 400 saying %q", status, body, want)
				}
			}
			if got := s.r.Metrics().Snapshot().Sum("PublishSuccessCount", "ce-orders"); got != 0 {
				t.Fatalf("%d events accepted, want none", got)
			}
			structured := `{"specversion":"1.0","id":"s1","source":"/s","type":"t","data":"hello"}`
			for _, c := range []struct {
				path, ctype, body string
				header            http.Header
			}{
				{"/topics/ce-orders/api/events?api-version=2018-01-01", "application/cloudevents+json", structured, nil},
				{"/topics/ce-orders/api/events?api-version=2018-01-01", "application/cloudevents-batch+json", "[" + structured + "]", nil},
				{"/topics/ce-orders:publish?api-version=2024-06-01", "text/plain", "hello", binary},
				{"/topics/ns-orders:publish?api-version=2024-06-01", "text/plain", "hello", binary},
			} {
				if status, body := s.post(c.path, c.ctype, []byte(c.body), c.header); status != 200 {
					t.Errorf("POST %s (%s): %d %s, want 200", c.path, c.ctype, status, body)
				}
			}
			status, body = s.post("/topics/ns-orders/api/events?api-version=2018-01-01", "text/plain", []byte("hello"), binary)
			if want := map[bool]int{false: 400, true: 200}[anyVersion]; status != want {
				t.Errorf("binary mode on a namespace topic's classic route: %d %s, want %d", status, body, want)
			}
		})
	}
}
