package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
)

// apiVersionCase is one data-plane request of TestAPIVersionsAsAzure and what it gets.
type apiVersionCase struct {
	name   string
	path   string
	ctype  string
	body   string
	header http.Header
	status int
	// mention are what the error's message says (each, ignoring case); none for a 2xx or 404.
	mention []string
}

// apiVersionCases are requests to the classic topic "orders" and the namespace topic
// "ns-orders" of newServer, on every data-plane route, with the api-versions Azure takes
// there, none, and others.
func apiVersionCases(key string) []apiVersionCase {
	k := http.Header{"Aeg-Sas-Key": {key}}
	eg := "[" + egEvent("1") + "]"
	ce := `{"specversion":"1.0","id":"1","source":"/s","type":"t"}`
	const (
		classic  = "/topics/orders/api/events"
		nsClass  = "/topics/ns-orders/api/events"
		publish  = "/topics/ns-orders:publish"
		receive  = "/topics/ns-orders/eventsubscriptions/nobody:receive"
		ack      = "/topics/ns-orders/eventsubscriptions/nobody:acknowledge"
		renew    = "/topics/ns-orders/eventsubscriptions/nobody:renewLock"
		unknown  = "unknown api version"
		ceJSON   = "application/cloudevents+json"
		egJSON   = "application/json"
		settle   = `{"lockTokens":["x"]}`
		takes18  = "takes api-version 2018-01-01"
		takesNew = "takes api-version 2023-11-01 or 2024-06-01"
	)
	return []apiVersionCase{
		{"classic, 2018-01-01", classic + "?api-version=2018-01-01", egJSON, eg, k, 200, nil},
		{"classic, none (curl)", classic, egJSON, eg, k, 200, nil},
		{"classic, given twice", classic + "?api-version=2018-01-01&api-version=2018-01-01", egJSON, eg, k, 200, nil},
		{"classic, unknown", classic + "?api-version=1999-01-01", egJSON, eg, k, 400, []string{unknown, `"1999-01-01"`, takes18}},
		{"classic, empty", classic + "?api-version=", egJSON, eg, k, 400, []string{unknown, `""`, takes18}},
		{"classic, a namespace version", classic + "?api-version=2024-06-01", egJSON, eg, k, 400, []string{unknown, takes18, ":publish?api-version=2024-06-01"}},
		{"classic, a good and an unknown one", classic + "?api-version=2018-01-01&api-version=2019-01-01", egJSON, eg, k, 400, []string{unknown, `"2019-01-01"`}},
		{"classic, unknown, without credentials", classic + "?api-version=1999-01-01", egJSON, eg, nil, 400, []string{unknown}},
		{":publish, 2023-11-01", publish + "?api-version=2023-11-01", ceJSON, ce, k, 200, nil},
		{":publish, 2024-06-01", publish + "?api-version=2024-06-01", ceJSON, ce, k, 200, nil},
		{":publish, none (curl)", publish, ceJSON, ce, k, 200, nil},
		{":publish, unknown", publish + "?api-version=1999-01-01", ceJSON, ce, k, 400, []string{unknown, `"1999-01-01"`, takesNew}},
		{":publish, the classic version", publish + "?api-version=2018-01-01", ceJSON, ce, k, 400, []string{unknown, takesNew, "/api/events?api-version=2018-01-01"}},
		// The classic EventGridPublisherClient and the Functions output binding pointed at a
		// namespace topic (Azure/azure-sdk-for-net#43371, azure-functions-python-worker#1642).
		{"namespace topic on the classic route, 2018-01-01", nsClass + "?api-version=2018-01-01", "application/cloudevents-batch+json", "[" + ce + "]", k, 400, []string{`"ns-orders" is a namespace topic`, "unknown api version", "POST /topics/ns-orders:publish?api-version=2024-06-01"}},
		{"namespace topic on the classic route, none", nsClass, "application/cloudevents-batch+json", "[" + ce + "]", k, 400, []string{"namespace topic", ":publish"}},
		{"namespace topic on the classic route, a namespace version", nsClass + "?api-version=2024-06-01", "application/cloudevents-batch+json", "[" + ce + "]", k, 400, []string{unknown, ":publish?api-version=2024-06-01"}},
		// A version the pull routes take passes to the next check: no such subscription.
		{":receive, 2024-06-01", receive + "?api-version=2024-06-01&maxWaitTime=10", "", "", k, 404, nil},
		{":renewLock, none", renew, egJSON, settle, k, 404, nil},
		{":receive, unknown", receive + "?api-version=1999-01-01&maxWaitTime=10", "", "", k, 400, []string{unknown, "POST /topics/{topic}/eventsubscriptions/{sub}:receive", takesNew}},
		{":acknowledge, the classic version", ack + "?api-version=2018-01-01", egJSON, settle, k, 400, []string{unknown, ":acknowledge", takesNew}},
	}
}

// TestAPIVersionsAsAzure: each data-plane route takes the api-versions Azure serves it
// (classic publish 2018-01-01; :publish and the pull routes 2023-11-01 and 2024-06-01) or
// none, and refuses another with 400 "Unknown api version" naming the ones it takes; a
// namespace topic takes no classic publish, as Azure's namespace host has none (the classic
// clients pointed at it get "Unknown api version": Azure/azure-sdk-for-net#43371).
func TestAPIVersionsAsAzure(t *testing.T) {
	s := newServer(t, router.Config{})
	for _, c := range apiVersionCases(s.key1) {
		t.Run(c.name, func(t *testing.T) {
			status, body := s.post(c.path, c.ctype, []byte(c.body), c.header)
			if status != c.status {
				t.Fatalf("status %d, want %d; body %s", status, c.status, body)
			}
			if status != http.StatusBadRequest {
				return
			}
			var e struct {
				Error struct {
					Code, Message string
				}
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != "BadRequest" || e.Error.Message == "" {
				t.Fatalf("body %q is not Event Grid's error shape with code BadRequest", body)
			}
			for _, m := range c.mention {
				if !strings.Contains(strings.ToLower(e.Error.Message), strings.ToLower(m)) {
					t.Errorf("message %q does not mention %q", e.Error.Message, m)
				}
			}
		})
	}
	// Nothing refused was accepted: of "ns-orders", the three :publish requests that were
	// answered 200, one event each.
	snap := s.r.Metrics().Snapshot()
	if got := snap.Sum("PublishSuccessCount", "ns-orders"); got != 3 {
		t.Errorf("ns-orders accepted %d events, want 3 (the :publish requests answered 200)", got)
	}
	if got := snap.Sum("PublishSuccessCount", "orders"); got != 3 {
		t.Errorf("orders accepted %d events, want 3 (the classic requests answered 200)", got)
	}
}

// TestAnyAPIVersionKeepsTheOldLeniency: with router.Config.AnyAPIVersion (egrid serve
// --any-api-version) every route takes any api-version, and a namespace topic takes the
// classic route too.
func TestAnyAPIVersionKeepsTheOldLeniency(t *testing.T) {
	s := newServer(t, router.Config{AnyAPIVersion: true})
	for _, c := range apiVersionCases(s.key1) {
		t.Run(c.name, func(t *testing.T) {
			want := c.status
			if want == http.StatusBadRequest {
				want = http.StatusOK
				if strings.Contains(c.path, "/eventsubscriptions/") {
					want = http.StatusNotFound
				}
				if c.header == nil {
					want = http.StatusUnauthorized
				}
			}
			if status, body := s.post(c.path, c.ctype, []byte(c.body), c.header); status != want {
				t.Fatalf("status %d, want %d; body %s", status, want, body)
			}
		})
	}
}

// TestNamespaceTopicShowsItsPublishRoute: a namespace topic's read shows the route that takes
// its events, :publish, not the classic one it is refused on; a publish to the endpoint shown
// is accepted. With --any-api-version, which lets it take the classic route, it shows that.
func TestNamespaceTopicShowsItsPublishRoute(t *testing.T) {
	for _, tc := range []struct {
		any  bool
		want string
	}{{false, "/topics/ns-orders:publish"}, {true, "/topics/ns-orders/api/events"}} {
		s := newServer(t, router.Config{InsecureDev: true, AnyAPIVersion: tc.any})
		_, out := adminDo(t, s.srv, "", "GET", "/admin/topics/ns-orders", "")
		ep, _ := out["properties"].(map[string]any)["endpoint"].(string)
		if !strings.HasSuffix(ep, tc.want) {
			t.Fatalf("any api-version %v: endpoint %q, want it to end in %s", tc.any, ep, tc.want)
		}
		path := ep[strings.Index(ep, "/topics/"):] + "?api-version=2024-06-01"
		if tc.any {
			path = ep[strings.Index(ep, "/topics/"):] + "?api-version=2018-01-01"
		}
		status, body := s.post(path, "application/cloudevents+json",
			[]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t"}`), http.Header{"Aeg-Sas-Key": {s.key1}})
		if status != http.StatusOK {
			t.Errorf("any api-version %v: publish to the endpoint shown (%s): %d %s, want 200", tc.any, path, status, body)
		}
	}
}
