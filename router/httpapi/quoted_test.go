package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/testkit"
)

// maxQuotingAnswer bounds an error answer that quotes a value the client sent: the value's
// first bytes (clip.Default) and the message around them, escaped as JSON.
const maxQuotingAnswer = 4 << 10

// A subscription PUT whose value is refused is answered with a message that names the field
// and quotes the value's first bytes: a 1 MB endpointType was quoted whole, a 400 that
// repeated the megabyte (and more: JSON escapes '<' in six bytes).
func TestSubscriptionErrorsQuoteValuesShortened(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ctx := context.Background()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "ns-orders", router.TopicSpec{Kind: router.KindNamespace}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()

	const mb = 1<<20 - 1024 // the body stays under the admin API's 1 MB limit
	huge := func(s string) string {
		return `"` + s + strings.Repeat("a", mb) + `"`
	}
	queue := func(mode, ttl string) string {
		return `{"properties":{"deliveryConfiguration":{"deliveryMode":` + mode + `,"queue":{"eventTimeToLive":` + ttl + `}}}}`
	}
	for _, tt := range []struct {
		name, path, body string
		want             []string
	}{
		{"endpointType", "/admin/topics/orders/eventSubscriptions/sub-1",
			`{"properties":{"destination":{"endpointType":` + huge("WebHook") + `}}}`,
			[]string{"destination.endpointType \"WebHookaaa", "...\" is not supported"}},
		{"deliveryMode", "/admin/topics/ns-orders/eventSubscriptions/sub-1", queue(huge("Queue"), `"PT1H"`),
			[]string{"deliveryConfiguration.deliveryMode \"Queueaaa", "...\" is not supported"}},
		{"eventTimeToLive that is not a duration", "/admin/topics/ns-orders/eventSubscriptions/sub-1", queue(`"Queue"`, huge("PT")),
			[]string{"eventTimeToLive", "\"PTaaa", "...\" is not an ISO 8601 duration"}},
		{"eventTimeToLive out of range", "/admin/topics/ns-orders/eventSubscriptions/sub-1", queue(`"Queue"`, `"P`+strings.Repeat("0", mb)+`8D"`),
			[]string{"eventTimeToLive \"P000", "...\" is out of range: use PT1M to P7D"}},
		{"an unknown member", "/admin/topics/orders/eventSubscriptions/sub-1", `{"properties":{` + huge("x") + `:1}}`,
			[]string{"\"properties.xaaa", "...\" is not a member of properties"}},
		{"a number too large for its field", "/admin/topics/orders/eventSubscriptions/sub-1", `{"properties":{"retryPolicy":{"maxDeliveryAttempts":1` + strings.Repeat("0", mb) + `}}}`,
			[]string{"properties.retryPolicy.maxDeliveryAttempts: is a JSON number 1000", "...; send a whole number"}},
		{"a header name", "/admin/topics/orders/eventSubscriptions/sub-1",
			`{"properties":{"destination":{"endpointType":"Sink","properties":{"sinkName":"null","deliveryAttributeMappings":[{"name":` + huge("X") + `,"type":"Static","properties":{"sourceField":"data.a"}}]}}}}`,
			[]string{"deliveryAttributeMappings[0] \"Xaaa", "...\": sourceField applies to Dynamic mappings only"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPut, srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer tok")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("a %d-byte PUT: %d, want 400: %.300s", len(tt.body), resp.StatusCode, e.Error.Message)
			}
			if n := len(e.Error.Message); n > maxQuotingAnswer {
				t.Errorf("a %d-byte PUT was answered with a %d-byte message, want at most %d: %.300s", len(tt.body), n, maxQuotingAnswer, e.Error.Message)
			}
			for _, w := range tt.want {
				if !strings.Contains(e.Error.Message, w) {
					t.Errorf("message %.400q does not say %q", e.Error.Message, w)
				}
			}
		})
	}
}

// A :receive whose maxEvents or maxWaitTime is refused is answered with a message that names
// the parameter and quotes its first bytes: a 30 KB value (the server takes 64 KB of
// headers) was quoted whole.
func TestPullQueryErrorsQuoteValuesShortened(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		p := newPullRig(t, h)
		long := url.QueryEscape(strings.Repeat("9", 30<<10) + "<")
		const q = "/topics/nsq/eventsubscriptions/que"
		for _, tt := range []struct {
			name, path string
			want       []string
		}{
			{"maxEvents", q + ":receive?maxEvents=" + long, []string{`maxEvents "999`, `..." is out of range`}},
			{"maxWaitTime", q + ":receive?maxWaitTime=" + long, []string{`maxWaitTime "999`, `..." is out of range`}},
			{"both", q + ":receive?maxEvents=" + long + "&maxWaitTime=" + long, []string{`maxEvents "999`, `maxWaitTime "999`}},
			{"releaseDelayInSeconds", q + ":release?releaseDelayInSeconds=" + long, []string{`releaseDelayInSeconds "999`, `..." is not allowed`}},
		} {
			status, body := p.doKey(tt.path, `{"lockTokens":["t1"]}`, p.key)
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || status != http.StatusBadRequest {
				t.Errorf("%s: %d %.300s; want 400 with Event Grid's error body", tt.name, status, body)
				continue
			}
			if len(body) > maxQuotingAnswer {
				t.Errorf("%s: a %d-byte query was answered with %d bytes, want at most %d: %.300s", tt.name, len(tt.path), len(body), maxQuotingAnswer, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(e.Error.Message, w) {
					t.Errorf("%s: message %.400q does not say %s", tt.name, e.Error.Message, w)
				}
			}
		}
	})
}
