package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/metrics"
)

// TestInsecureDevLetsNoWebPageIn: --insecure-dev lets requests without credentials in from
// this machine's programs only. A web page that points a name of its own at the server (DNS
// rebinding: its requests carry that name as Host) could otherwise read the topic keys and
// add a subscription delivering every event to it, and a page of another site could post
// events or end a probation (cross-site request forgery). Requests with credentials, and
// admin calls to a server with a token, are not affected.
func TestInsecureDevLetsNoWebPageIn(t *testing.T) {
	ctx := context.Background()
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	spec, err := r.CreateTopic(ctx, "orders", router.TopicSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "orders", "billing", router.SubscriptionSpec{Destination: router.SinkDestination("null")}); err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(r)
	publish := "[" + egEvent("e1") + "]"
	rebound := http.Header{"Host": {"rebind.attacker.example:8080"}}
	crossSite := http.Header{"Sec-Fetch-Site": {"cross-site"}, "Content-Type": {"text/plain"}}
	otherOrigin := http.Header{"Origin": {"https://attacker.example"}, "Content-Type": {"text/plain"}}
	for _, tt := range []struct {
		name, method, path, body string
		header                   http.Header
		status                   int
	}{
		{"rebound name lists the keys", "POST", "/admin/topics/orders/listKeys", "", rebound, 403},
		{"rebound name reads a topic", "GET", "/admin/topics/orders", "", rebound, 403},
		{"rebound name creates a subscription", "PUT", "/admin/topics/orders/eventSubscriptions/steal", `{"properties":{"destination":{"endpointType":"Sink","properties":{"sinkName":"null"}}}}`, rebound, 403},
		{"rebound name publishes", "POST", "/topics/orders/api/events", publish, rebound, 403},
		{"rebound name receives", "POST", "/topics/orders/eventsubscriptions/billing:receive", "", rebound, 403},
		{"cross-site page publishes", "POST", "/topics/orders/api/events", publish, crossSite, 403},
		{"page of another origin publishes", "POST", "/topics/orders/api/events", publish, otherOrigin, 403},
		{"cross-site page ends a probation", "POST", "/admin/topics/orders/eventSubscriptions/billing/endProbation", "", crossSite, 403},
		{"cross-site page replays dead letters", "POST", "/admin/topics/orders/eventSubscriptions/billing/deadLetters/replay", "{}", crossSite, 403},
		{"rebound name with the topic key publishes", "POST", "/topics/orders/api/events", publish, http.Header{"Host": {"rebind.attacker.example"}, "Aeg-Sas-Key": {spec.Key1}}, 200},
		{"a program on localhost lists the keys", "POST", "/admin/topics/orders/listKeys", "", nil, 200},
		{"a program on 127.0.0.1 publishes", "POST", "/topics/orders/api/events", publish, http.Header{"Host": {"127.0.0.1:8080"}}, 200},
		{"the console's own page ends a probation", "POST", "/admin/topics/orders/eventSubscriptions/billing/endProbation", "", http.Header{"Sec-Fetch-Site": {"same-origin"}}, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			header := http.Header{}
			host := ""
			for k, v := range tt.header {
				if k == "Host" {
					host = v[0]
					continue
				}
				header[k] = v
			}
			req := localRequest(tt.method, tt.path, strings.NewReader(tt.body))
			if host != "" {
				req.Host = host
			}
			for k, v := range header {
				req.Header[k] = v
			}
			before := r.Metrics().Snapshot().Sum(metrics.PublishSuccessCount, "orders")
			rec := recorder(h, req)
			if rec.Code != tt.status {
				t.Fatalf("%d %s; want %d", rec.Code, rec.Body, tt.status)
			}
			if tt.status == 403 {
				code, msg := eventGridError(t, rec)
				if code != "Forbidden" || !strings.Contains(msg, "--insecure-dev") {
					t.Errorf("answer %s %q; want Forbidden saying why --insecure-dev refuses it", code, msg)
				}
				if strings.Contains(rec.Body.String(), spec.Key1) {
					t.Errorf("the refusal shows a topic key: %s", rec.Body)
				}
				if got := r.Metrics().Snapshot().Sum(metrics.PublishSuccessCount, "orders"); got != before {
					t.Errorf("a refused request published: PublishSuccessCount %d -> %d", before, got)
				}
			}
		})
	}
	if _, err := r.Subscription("orders", "steal"); err == nil {
		t.Error("a rebound name created an event subscription")
	}

	// With an admin token, the token is what counts, whatever the Host.
	tok, err := router.New(router.Config{InsecureDev: true, AdminToken: "tok"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close(ctx)
	req := localRequest("GET", "/admin/topics", nil)
	req.Host = "egrid.internal:8080"
	req.Header.Set("Authorization", "Bearer tok")
	if rec := recorder(httpapi.New(tok), req); rec.Code != 200 {
		t.Errorf("admin call with the token by another name: %d %s; want 200", rec.Code, rec.Body)
	}
	// publicUrl names the server for programs that reach it by another name.
	pub, err := router.New(router.Config{InsecureDev: true, PublicURL: "http://egrid:8080"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(ctx)
	req = localRequest("GET", "/admin/topics", nil)
	req.Host = "EGRID:8080"
	if rec := recorder(httpapi.New(pub), req); rec.Code != 200 {
		t.Errorf("admin call by publicUrl's host: %d %s; want 200", rec.Code, rec.Body)
	}
}

// recorder serves req with h in-process and returns the answer.
func recorder(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
