package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/testkit"
)

// wantAzureError fails t unless body is an Azure-style error with code and every want in its
// message.
func wantAzureError(t *testing.T, what, body, code string, want ...string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != code {
		t.Errorf("%s: body %s, want an error with code %s", what, body, code)
		return
	}
	for _, w := range want {
		if !strings.Contains(e.Error.Message, w) {
			t.Errorf("%s: message %q, want it to contain %q", what, e.Error.Message, w)
		}
	}
}

// An aeg-sas-key query parameter given twice was read as its first value: a right key first
// passed whatever followed. It is refused as a key that does not match is.
func TestPublishRefusesAQueryKeyGivenTwice(t *testing.T) {
	s := newServer(t, router.Config{})
	key := url.QueryEscape(s.key1)
	body := []byte("[" + egEvent("1") + "]")
	for _, tt := range []struct {
		name, query string
		status      int
		code        string
		want        []string
	}{
		{name: "right key then another", query: "?aeg-sas-key=" + key + "&aeg-sas-key=d3Jvbmc%3D", status: 401, code: "Unauthorized", want: []string{`"aeg-sas-key" is given 2 times`, "send the key of topic orders once"}},
		{name: "right key twice", query: "?aeg-sas-key=" + key + "&aeg-sas-key=" + key, status: 401, code: "Unauthorized", want: []string{`"aeg-sas-key" is given 2 times`}},
		{name: "a broken escape", query: "?aeg-sas-key=" + key + "&api-version=%zz", status: 400, code: "BadRequest", want: []string{`"api-version=%zz" does not parse`, "percent-encode"}},
	} {
		status, resp := s.post("/topics/orders/api/events"+tt.query, "application/json", body, nil)
		if status != tt.status {
			t.Errorf("%s: %d %s, want %d", tt.name, status, resp, tt.status)
			continue
		}
		wantAzureError(t, tt.name, resp, tt.code, tt.want...)
	}
}

// The dead-letter listings read each parameter once and refuse a query that does not parse:
// url.Values.Get took the first limit, and dropped limit=%zz for the default.
func TestDeadLetterListingQueryIsStrict(t *testing.T) {
	ctx := context.Background()
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks(), DeadLetterStore: testkit.NewObjectStore()})
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
	const base = "/admin/topics/orders/eventSubscriptions/billing/deadLetters"
	for _, tt := range []struct {
		name, query string
		want        []string
	}{
		{name: "limit twice", query: "?limit=1&limit=2", want: []string{`"limit" is given 2 times`, "give it once"}},
		{name: "key and reason twice", query: "?key=a&reason=TimeToLiveExceeded&key=b&reason=MaxDeliveryAttemptsExceeded", want: []string{`"key" is given 2 times`, `"reason" is given 2 times`}},
		{name: "since twice", query: "?since=2026-01-02T15:04:05Z&since=2026-01-03T15:04:05Z", want: []string{`"since" is given 2 times`}},
		{name: "limit with a broken escape", query: "?limit=%zz", want: []string{`"limit=%zz" does not parse`, "percent-encode"}},
		{name: "a long broken pair is clipped", query: "?x=" + strings.Repeat("a", 300) + "%", want: []string{`does not parse`, "..."}},
	} {
		for _, path := range []string{base, base + "/records"} {
			status, body := adminDo(t, srv, "tok", "GET", path+tt.query, "")
			if status != http.StatusBadRequest {
				t.Errorf("%s %s: %d %v, want 400", tt.name, path, status, body)
				continue
			}
			msg, _ := body["error"].(map[string]any)["message"].(string)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s %s: message %q, want it to contain %q", tt.name, path, msg, w)
				}
			}
			if len(msg) > 600 {
				t.Errorf("%s %s: message is %d bytes: the bad pair is not clipped", tt.name, path, len(msg))
			}
		}
	}
}

// The validationUrl reads its token once: given twice, the URL is not the one handed out.
func TestValidationURLRefusesATokenGivenTwice(t *testing.T) {
	s := newServer(t, router.Config{})
	for _, tt := range []struct {
		name, query string
		want        []string
	}{
		{name: "token twice", query: "?id=1&token=a&token=b", want: []string{`"token" is given 2 times`, "fetch the validationUrl exactly"}},
		{name: "a broken escape", query: "?id=1&token=%zz", want: []string{`"token=%zz" does not parse`}},
	} {
		resp, err := http.Get(s.srv.URL + "/eventsubscriptions/es1/validate" + tt.query)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tt.name, resp.StatusCode, b.String())
			continue
		}
		wantAzureError(t, tt.name, b.String(), "BadRequest", tt.want...)
	}
}
