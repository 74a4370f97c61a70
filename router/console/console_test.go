package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/console"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

const token = "t0ken"

// get answers a GET of path with the bearer token (none when tok is empty).
func get(t *testing.T, srv *httptest.Server, tok, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func newConsole(t *testing.T, cfg router.Config, deps router.Deps, attempts *console.Attempts) (*httptest.Server, *router.Router) {
	t.Helper()
	r, err := router.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	srv := httptest.NewServer(console.New(r, attempts))
	t.Cleanup(srv.Close)
	return srv, r
}

// The page and its scripts are served without a token (they hold no data), from the embedded
// files, with a policy that keeps other scripts and frames out.
func TestAssets(t *testing.T) {
	srv, _ := newConsole(t, router.Config{AdminToken: token}, router.Deps{}, nil)
	resp, body := get(t, srv, "", "/console/")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<script src="console.js"`) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /console/: %d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", resp.Header.Get("Cache-Control"))
	}
	for _, f := range []string{"/console/console.js", "/console/console.css"} {
		resp, body := get(t, srv, "", f)
		if resp.StatusCode != http.StatusOK || len(body) < 100 {
			t.Errorf("GET %s: %d, %d bytes", f, resp.StatusCode, len(body))
		}
		// What the page shows is set as text: an API answer is never parsed as HTML.
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if strings.Contains(body, sink) {
				t.Errorf("%s uses %s", f, sink)
			}
		}
	}
	if resp, _ := get(t, srv, "", "/console"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/console/" {
		t.Errorf("GET /console: %d to %q, want a redirect to /console/", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// The console's own routes take the admin token as the admin API does, and answer its error
// body.
func TestRoutesNeedTheAdminToken(t *testing.T) {
	srv, _ := newConsole(t, router.Config{AdminToken: token}, router.Deps{}, nil)
	for _, path := range []string{"/console/api/counters", "/console/api/attempts/orders/billing"} {
		for _, tok := range []string{"", "wrong"} {
			resp, body := get(t, srv, tok, path)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"code":"Unauthorized"`) {
				t.Errorf("GET %s with token %q: %d %s, want 401 Unauthorized", path, tok, resp.StatusCode, body)
			}
		}
	}
	// The scheme matches ignoring case (RFC 9110 §11.1).
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/console/api/counters", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /console/api/counters with \"bearer <token>\": %d, want 200", resp.StatusCode)
	}
	if resp, body := get(t, srv, token, "/console/api/attempts/orders/billing"); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "NotFound") {
		t.Errorf("attempts of a subscription that does not exist: %d %s, want 404", resp.StatusCode, body)
	}

	closed, _ := newConsole(t, router.Config{}, router.Deps{}, nil) // no token, not --insecure-dev
	if resp, body := get(t, closed, "anything", "/console/api/counters"); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "adminToken") {
		t.Errorf("without an admin token configured: %d %s, want 403 saying to set adminToken", resp.StatusCode, body)
	}
	open, _ := newConsole(t, router.Config{InsecureDev: true}, router.Deps{}, nil)
	if resp, body := get(t, open, "", "/console/api/counters"); resp.StatusCode != http.StatusOK {
		t.Errorf("--insecure-dev without a token: %d %s, want 200", resp.StatusCode, body)
	}
	// ... to this machine's programs only: not to a web page that pointed a name of its own
	// at the server (DNS rebinding; router/devguard).
	req, err = http.NewRequest(http.MethodGet, open.URL+"/console/api/counters", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "rebind.attacker.example"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `"code":"Forbidden"`) || !strings.Contains(string(body), "--insecure-dev") {
		t.Errorf("--insecure-dev without a token, a rebound name: %d %s, want 403 saying why", resp.StatusCode, body)
	}
}

// A console path that names no page, asset or route, or a method no route takes, is answered
// with Event Grid's error body as the admin API answers one, never Go's plain-text 404.
func TestUnknownConsoleRoutesAnswerTheErrorBody(t *testing.T) {
	srv, _ := newConsole(t, router.Config{AdminToken: token}, router.Deps{}, nil)
	for _, path := range []string{"/console/api/attempts/orders", "/console/api/nope", "/console/nope.js", "/console/api/", "/console/api/attempts/orders/billing/more"} {
		for _, tok := range []string{"", token} {
			resp, body := get(t, srv, tok, path)
			if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
				!strings.Contains(body, `"code":"NotFound"`) || !strings.Contains(body, "/console/api/counters") {
				t.Errorf("GET %s: %d %s %s, want 404 with Event Grid's error body naming the console's routes", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
		}
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/console/api/counters", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(string(body), `"code":"MethodNotAllowed"`) || resp.Header.Get("Allow") == "" {
		t.Errorf("POST /console/api/counters: %d %s (Allow %q), want 405 with Event Grid's error body and Allow", resp.StatusCode, body, resp.Header.Get("Allow"))
	}
	if resp, body := get(t, srv, "", "/console/index.html"); resp.StatusCode != http.StatusMovedPermanently && resp.StatusCode != http.StatusOK {
		t.Errorf("GET /console/index.html: %d %s", resp.StatusCode, body)
	}
}

// A delivery through the router shows among the subscription's attempts and in the counters.
func TestAttemptsAndCountersOfADelivery(t *testing.T) {
	attempts := console.NewAttempts(0)
	recorded := make(chan struct{}, 10)
	sink := sinks.Func(func(context.Context, *sinks.Batch) error { return nil })
	srv, r := newConsole(t, router.Config{AdminToken: token}, router.Deps{
		Sinks: map[string]sinks.Sink{"ok": sink},
		OnAttempt: func(rec *router.AttemptRecord) {
			attempts.Record(rec)
			recorded <- struct{}{}
		},
	}, attempts)
	ctx := context.Background()
	if _, err := r.CreateTopic(ctx, "Orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	var spec router.SubscriptionSpec
	spec.Destination.EndpointType = "Sink"
	spec.Destination.Properties.SinkName = "ok"
	if err := r.CreateSubscription(ctx, "Orders", "Billing", spec); err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(ctx, "Orders", map[string]any{"id": "ev-1", "subject": "/o/1", "eventType": "Order.Created", "eventTime": "2026-01-01T00:00:00Z", "data": map[string]any{}, "dataVersion": "1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-recorded:
	case <-time.After(30 * time.Second):
		t.Fatal("no attempt recorded within 30 s")
	}
	resp, body := get(t, srv, token, "/console/api/attempts/orders/billing") // any case, as the admin API
	var got struct{ Value []console.Attempt }
	if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("attempts: %d %v %s", resp.StatusCode, err, body)
	}
	if len(got.Value) != 1 || got.Value[0].Outcome != "Delivered" || len(got.Value[0].Events) != 1 || got.Value[0].Events[0] != (console.Event{ID: "ev-1", Attempt: 1, Decision: "Delivered"}) {
		t.Errorf("attempts %+v, want ev-1's one Delivered attempt", got.Value)
	}
	_, body = get(t, srv, token, "/console/api/counters")
	if !strings.Contains(body, `{"name":"PublishSuccessCount","scope":"Orders","value":1}`) && !strings.Contains(body, `{"name":"PublishSuccessCount","scope":"orders","value":1}`) {
		t.Errorf("counters %s, want PublishSuccessCount 1 for the topic", body)
	}
}

// Attempts keeps the newest n per subscription, newest first, names subscriptions in any
// case, and says what was decided about each event.
func TestAttemptsRing(t *testing.T) {
	a := console.NewAttempts(3)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		a.Record(&router.AttemptRecord{Topic: "Orders", Subscription: "Billing", EventIDs: []string{fmt.Sprint("e", i)}, Attempts: []int{1},
			Time: base.Add(time.Duration(i) * time.Second), Outcome: schemas.Busy, StatusCode: 503,
			Decisions: []retry.Decision{{Action: retry.Retry, At: base.Add(time.Minute)}}})
	}
	a.Record(&router.AttemptRecord{Topic: "orders", Subscription: "other", EventIDs: []string{"x"}, Attempts: []int{2}, Outcome: schemas.NotFound,
		Decisions: []retry.Decision{{Action: retry.DeadLetter, Reason: schemas.UndeliverableDueToClientError}}})
	got := a.Recent("ORDERS", "billing")
	if len(got) != 3 || got[0].Events[0].ID != "e4" || got[2].Events[0].ID != "e2" {
		t.Fatalf("recent %+v, want e4, e3, e2", got)
	}
	if got[0].Outcome != "Busy" || got[0].StatusCode != 503 || got[0].Events[0].Decision != "Retry at 2026-01-01T00:01:00Z" {
		t.Errorf("attempt %+v", got[0])
	}
	other := a.Recent("orders", "other")
	if len(other) != 1 || other[0].Events[0] != (console.Event{ID: "x", Attempt: 2, Decision: "DeadLetter (UndeliverableDueToClientError)"}) {
		t.Errorf("other %+v", other)
	}
	if none := a.Recent("orders", "none"); none == nil || len(none) != 0 {
		t.Errorf("a subscription without attempts: %#v, want an empty list", none)
	}
}

// An attempt keeps its first EventsPerAttempt events and counts the others; a subscription
// created again under a name starts with no attempts of its predecessor's; the attempts of a
// subscription the console finds deleted are forgotten.
func TestAttemptsOfABatchAndOfAReusedName(t *testing.T) {
	attempts := console.NewAttempts(0)
	srv, r := newConsole(t, router.Config{AdminToken: token}, router.Deps{}, attempts)
	ctx := context.Background()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 5000)
	for i := range ids {
		ids[i] = fmt.Sprint("e", i)
	}
	attempts.Record(&router.AttemptRecord{Topic: "orders", Subscription: "billing", EventIDs: ids, Epoch: 1})
	got := attempts.Recent("orders", "billing")
	if len(got) != 1 || len(got[0].Events) != console.EventsPerAttempt || got[0].Events[0].ID != "e0" || got[0].MoreEvents != 5000-console.EventsPerAttempt {
		t.Fatalf("a batch of 5000: %d attempts, %+v; want its first %d events and the others counted", len(got), got, console.EventsPerAttempt)
	}
	attempts.Record(&router.AttemptRecord{Topic: "orders", Subscription: "billing", EventIDs: []string{"new"}, Epoch: 2})
	if got := attempts.Recent("orders", "billing"); len(got) != 1 || got[0].Events[0].ID != "new" {
		t.Errorf("after the name was created again: %+v; want only the new subscription's attempt", got)
	}
	// billing does not exist in r: the console finds it deleted and forgets it.
	if resp, _ := get(t, srv, token, "/console/api/attempts/orders/billing"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("attempts of a deleted subscription: %d, want 404", resp.StatusCode)
	}
	if got := attempts.Recent("orders", "billing"); len(got) != 0 {
		t.Errorf("attempts kept of a subscription found deleted: %+v", got)
	}
}

// A subscription deleted and created again under its name shows none of its predecessor's
// attempts, also before its own first attempt: the console showed them until the new one
// recorded an attempt, although a subscription created again starts afresh.
func TestAttemptsOfADeletedSubscriptionGoWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		attempts := console.NewAttempts(0)
		r, err := router.New(router.Config{AdminToken: token}, router.Deps{
			Sinks:     map[string]sinks.Sink{"ok": sinks.Func(func(context.Context, *sinks.Batch) error { return nil })},
			OnAttempt: attempts.Record, OnSubscriptionDeleted: attempts.Forget, // as egrid serve wires them
		})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		c := console.New(r, attempts)
		recent := func() []console.Attempt {
			req := httptest.NewRequest(http.MethodGet, "/console/api/attempts/orders/billing", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			w := httptest.NewRecorder()
			c.ServeHTTP(w, req)
			var got struct{ Value []console.Attempt }
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusOK {
				t.Fatalf("attempts: %d %v %s", w.Code, err, w.Body.String())
			}
			return got.Value
		}
		ctx := t.Context()
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		var spec router.SubscriptionSpec
		spec.Destination.EndpointType = "Sink"
		spec.Destination.Properties.SinkName = "ok"
		if err := r.CreateSubscription(ctx, "orders", "billing", spec); err != nil {
			t.Fatal(err)
		}
		if err := r.Publish(ctx, "orders", map[string]any{"id": "old-ev", "subject": "/o/1", "eventType": "Order.Created", "eventTime": "2026-01-01T00:00:00Z", "data": map[string]any{}, "dataVersion": "1"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := recent(); len(got) != 1 || got[0].Events[0].ID != "old-ev" {
			t.Fatalf("attempts before the delete: %+v, want old-ev's", got)
		}
		if err := r.DeleteSubscription(ctx, "orders", "billing"); err != nil {
			t.Fatal(err)
		}
		if err := r.CreateSubscription(ctx, "orders", "billing", spec); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := recent(); len(got) != 0 {
			t.Errorf("attempts of billing created again, before its first attempt: %+v, want none", got)
		}
	})
}
