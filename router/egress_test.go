package router_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks/egress"
)

func newEgressRouter(t *testing.T, cfg router.Config, deps router.Deps) *router.Router {
	t.Helper()
	r, err := router.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestEgressDefaultPolicy: the embedded router's default policy refuses link-local, private
// and unique-local endpoints at create time, naming the rule, and accepts loopback ones.
func TestEgressDefaultPolicy(t *testing.T) {
	r := newEgressRouter(t, router.Config{}, router.Deps{})
	ctx := context.Background()
	for url, rule := range map[string]string{
		"http://169.254.169.254/latest/meta-data/": `endpoint 169.254.169.254:80 denied by egress rule "link-local addresses`,
		"https://10.0.0.5/hook":                    `endpoint 10.0.0.5:443 denied by egress rule "private ranges are denied; allow with egress.allow: [10.0.0.0/8]"`,
		"https://[fd00::5]/hook":                   `denied by egress rule "unique-local addresses are denied`,
	} {
		err := r.CreateSubscription(ctx, "orders", "sub1", router.SubscriptionSpec{Destination: router.WebHook(url)})
		if err == nil || !strings.Contains(err.Error(), rule) || !strings.Contains(err.Error(), "destination.properties.endpointUrl") {
			t.Errorf("CreateSubscription(%s) = %v, want %q", url, err, rule)
		}
	}
	if _, err := r.Subscription("orders", "sub1"); !errors.Is(err, router.ErrSubscriptionNotFound) {
		t.Fatalf("a denied subscription was stored: %v", err)
	}
	hook := newHook(nil)
	srv := httptest.NewServer(hook)
	defer srv.Close()
	if err := r.CreateSubscription(ctx, "orders", "sub1", router.SubscriptionSpec{Destination: router.WebHook(srv.URL + "/hook")}); err != nil {
		t.Fatalf("a loopback endpoint with the default policy: %v", err)
	}
}

// TestEgressDeniedBeforeAnyConnection: a denied endpoint is refused before the validation
// handshake, so the endpoint never sees a request and the error tells nothing about it.
func TestEgressDeniedBeforeAnyConnection(t *testing.T) {
	hook := newHook(nil)
	srv := httptest.NewServer(hook)
	defer srv.Close()
	p, err := egress.New(egress.Config{DenyLoopback: true}, egress.Options{ConfigPath: "server.egress"})
	if err != nil {
		t.Fatal(err)
	}
	r := newEgressRouter(t, router.Config{}, router.Deps{Egress: p})
	err = r.CreateSubscription(context.Background(), "orders", "sub1", router.SubscriptionSpec{Destination: router.WebHook(srv.URL + "/hook")})
	if err == nil || !strings.Contains(err.Error(), `egress rule "loopback is denied; allow with server.egress.allow: [127.0.0.0/8]"`) {
		t.Fatalf("CreateSubscription to a denied loopback endpoint = %v, want the loopback rule", err)
	}
	if errors.Is(err, router.ErrValidationFailed) {
		t.Fatalf("the denial came from a handshake: %v", err)
	}
	if got := hook.snapshot(); len(got) != 0 {
		t.Fatalf("the denied endpoint received %d requests, want none", len(got))
	}
}

// TestEgressCheckedAtDelivery: a subscription stored while its endpoint was allowed, loaded by
// a router whose policy denies it, fails its attempts as InvalidDestination without a request.
// The same holds for an http:// endpoint once https is required.
func TestEgressCheckedAtDelivery(t *testing.T) {
	hook := newHook(nil)
	srv := httptest.NewServer(hook)
	defer srv.Close()
	deny, err := egress.New(egress.Config{DenyLoopback: true}, egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  router.Config
		deps router.Deps
		want string
	}{
		{name: "loopback denied", deps: router.Deps{Egress: deny}, want: "loopback is denied"},
		{name: "https required", cfg: router.Config{RequireHTTPS: true}, want: "http:// endpoints are refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := store.NewMemory()
			defer st.Close()
			before := newEgressRouter(t, router.Config{}, router.Deps{Store: st})
			spec := router.SubscriptionSpec{Destination: router.WebHook(srv.URL + "/hook"), RetryPolicy: router.RetryPolicy{MaxDeliveryAttempts: 1}}
			spec.Destination.Properties.SkipValidation = true
			if err := before.CreateSubscription(context.Background(), "orders", "sub1", spec); err != nil {
				t.Fatal(err)
			}
			if err := before.Close(context.Background()); err != nil {
				t.Fatal(err)
			}

			attempts := make(chan *router.AttemptRecord, 10)
			c.deps.Store = st
			c.deps.OnAttempt = func(rec *router.AttemptRecord) { attempts <- rec }
			after, err := router.New(c.cfg, c.deps)
			if err != nil {
				t.Fatal(err)
			}
			defer after.Close(context.Background())
			if err := after.Publish(context.Background(), "orders", map[string]any{
				"id": "1", "subject": "/o/1", "eventType": "Order.Created", "eventTime": "2026-01-01T00:00:00Z", "dataVersion": "1", "data": map[string]any{},
			}); err != nil {
				t.Fatal(err)
			}
			select {
			case rec := <-attempts:
				if rec.Outcome != schemas.InvalidDestination {
					t.Fatalf("attempt outcome %v, want InvalidDestination", rec.Outcome)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no attempt within 30 s")
			}
			if got := hook.snapshot(); len(got) != 0 {
				t.Fatalf("the endpoint received %d requests, want none", len(got))
			}
		})
	}
}

// TestRequireHTTPS: with RequireHTTPS an http:// endpoint is refused with the other problems
// of the spec, saying how to allow it; https:// is accepted; the default accepts http://.
func TestRequireHTTPS(t *testing.T) {
	r := newEgressRouter(t, router.Config{RequireHTTPS: true}, router.Deps{})
	spec := router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:9/hook")}
	spec.Destination.Properties.MaxEventsPerBatch = -1
	err := r.CreateSubscription(context.Background(), "orders", "sub1", spec)
	if err == nil || !strings.Contains(err.Error(), "destination.properties.endpointUrl: http:// endpoints are refused") ||
		!strings.Contains(err.Error(), "server.allowHttpEndpoints: true") || !strings.Contains(err.Error(), "maxEventsPerBatch") {
		t.Fatalf("CreateSubscription(http://...) = %v, want the http refusal with the other problem", err)
	}

	hook := newHook(nil)
	tlsSrv := httptest.NewTLSServer(hook)
	defer tlsSrv.Close()
	secure := newEgressRouter(t, router.Config{RequireHTTPS: true}, router.Deps{HTTPClient: tlsSrv.Client()})
	if err := secure.CreateSubscription(context.Background(), "orders", "sub1", router.SubscriptionSpec{Destination: router.WebHook(tlsSrv.URL + "/hook")}); err != nil {
		t.Fatalf("an https endpoint: %v", err)
	}

	plain := newEgressRouter(t, router.Config{}, router.Deps{})
	spec.Destination.Properties.MaxEventsPerBatch = 0
	spec.Destination.Properties.SkipValidation = true
	if err := plain.CreateSubscription(context.Background(), "orders", "sub1", spec); err != nil {
		t.Fatalf("an http endpoint in the embedded default: %v", err)
	}
}

// TestDeletionNoticeUnderRequireHTTPS: a WebHook subscription to an http:// endpoint, stored
// before https was required, gets no request from a router that requires it, its deletion
// notice included: the notice would carry the endpoint's query string and the subscription's
// static headers, secret ones too, in cleartext. The router logs that it sent none.
func TestDeletionNoticeUnderRequireHTTPS(t *testing.T) {
	hook := newHook(nil)
	srv := httptest.NewServer(hook)
	defer srv.Close()
	st := store.NewMemory()
	defer st.Close()
	before := newEgressRouter(t, router.Config{}, router.Deps{Store: st})
	spec := router.SubscriptionSpec{Destination: router.WebHook(srv.URL + "/hook?code=query-secret")}
	spec.Destination.Properties.SkipValidation = true
	spec.Destination.Properties.DeliveryAttributeMappings = []router.DeliveryAttributeMapping{{
		Name: "X-Api-Key", Type: "Static", Properties: router.DeliveryAttributeMappingProperties{Value: "header-secret", IsSecret: true},
	}}
	if err := before.CreateSubscription(context.Background(), "orders", "sub1", spec); err != nil {
		t.Fatal(err)
	}
	if err := before.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	notSent := make(chan string, 1)
	log := slog.New(signalHandler{msg: "the SubscriptionDeletion notification was not sent", ch: notSent})
	after := newRouterOn(t, router.Config{RequireHTTPS: true}, router.Deps{Store: st, Logger: log})
	if err := after.DeleteSubscription(context.Background(), "orders", "sub1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-notSent:
	case r := <-hook.got:
		t.Fatalf("a router requiring https sent %s %s over http (aeg-event-type %s, X-Api-Key %q)", r.method, r.uri, r.header.Get("aeg-event-type"), r.header.Get("X-Api-Key"))
	case <-time.After(30 * time.Second):
		t.Fatal("neither a request nor the log line saying no notice was sent within 30 s")
	}
	if got := hook.snapshot(); len(got) != 0 {
		t.Errorf("the endpoint got %d requests; want none", len(got))
	}
}

// newRouterOn starts a router that Close stops at the test's end, without creating anything.
func newRouterOn(t *testing.T, cfg router.Config, deps router.Deps) *router.Router {
	t.Helper()
	r, err := router.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}
