package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

func gridEvent(id string) map[string]any {
	return map[string]any{"id": id, "subject": "/s", "eventType": "T", "eventTime": "2026-01-01T00:00:00Z", "data": map[string]any{}, "dataVersion": "1"}
}

// TestValidationHandshake runs the handshakes of SPEC §2.5 over real HTTP on 127.0.0.1,
// through the admin API.
func TestValidationHandshake(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "admin"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	adminDo(t, srv, "admin", "PUT", "/admin/topics/orders", `{}`)
	adminDo(t, srv, "admin", "PUT", "/admin/topics/ce-orders", `{"properties":{"inputSchema":"CloudEventSchemaV1_0"}}`)
	subscribe := func(topic, name, url, schema string) (int, map[string]any) {
		body := `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"` + url + `"}},"eventDeliverySchema":"` + schema + `"}}`
		return adminDo(t, srv, "admin", "PUT", "/admin/topics/"+topic+"/eventSubscriptions/"+name, body)
	}
	state := func(topic, name string) string {
		_, got := adminDo(t, srv, "admin", "GET", "/admin/topics/"+topic+"/eventSubscriptions/"+name, "")
		s, _ := props(t, got, "properties")["provisioningState"].(string)
		return s
	}

	t.Run("an endpoint that echoes the code is created", func(t *testing.T) {
		h := newHook(nil)
		hs := httptest.NewServer(h)
		defer hs.Close()
		if status, body := subscribe("orders", "echo", hs.URL+"/hook", "EventGridSchema"); status != 201 || props(t, body, "properties")["provisioningState"] != "Succeeded" {
			t.Fatalf("PUT: %d %v; want 201 Succeeded", status, body)
		}
		if err := r.Publish(context.Background(), "orders", gridEvent("e1")); err != nil {
			t.Fatal(err)
		}
		if ids := eventIDs(t, h.await(t, "Notification").body); !slices.Equal(ids, []string{"e1"}) {
			t.Errorf("delivered %v; want e1", ids)
		}
		reqs := h.snapshot()
		if reqs[0].header.Get("aeg-event-type") != "SubscriptionValidation" || reqs[0].header.Get("aeg-subscription-name") != "ECHO" {
			t.Errorf("first request %v; want the validation event", reqs[0].header)
		}
	})

	t.Run("an endpoint that answers without the code waits for its validationUrl", func(t *testing.T) {
		h := newHook(func(w http.ResponseWriter, r *http.Request, body []byte) {})
		hs := httptest.NewServer(h)
		defer hs.Close()
		status, body := subscribe("orders", "manual", hs.URL+"/hook", "")
		if p := props(t, body, "properties"); status != 201 || p["provisioningState"] != "AwaitingManualAction" || !strings.Contains(p["provisioningMessage"].(string), "validationUrl") {
			t.Fatalf("PUT: %d %v; want 201 AwaitingManualAction with a message", status, body)
		}
		v := validationData(h.snapshot()[0].body)
		if !strings.HasPrefix(v.ValidationURL, srv.URL+"/eventsubscriptions/manual/validate?") || !strings.Contains(v.ValidationURL, "id="+v.ValidationCode) {
			t.Fatalf("validationUrl %q; want egrid's own address with the code", v.ValidationURL)
		}
		// Published while awaiting: not delivered (no delivery actor runs), kept for later.
		if err := r.Publish(context.Background(), "orders", gridEvent("early")); err != nil {
			t.Fatal(err)
		}
		if n := len(h.snapshot()); n != 1 || state("orders", "manual") != "AwaitingManualAction" {
			t.Fatalf("%d requests and state %s before the validationUrl was fetched; want only the validation event", n, state("orders", "manual"))
		}
		// A wrong token is refused and changes nothing.
		resp, err := http.Get(strings.Replace(v.ValidationURL, "token=", "token=x", 1))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 || state("orders", "manual") != "AwaitingManualAction" {
			t.Fatalf("GET with a wrong token: %d; want 404 and no change", resp.StatusCode)
		}
		resp, err = http.Get(v.ValidationURL) // no admin token needed
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET validationUrl: %d %s", resp.StatusCode, msg)
		}
		if s := state("orders", "manual"); s != "Succeeded" {
			t.Fatalf("state after the GET: %s; want Succeeded", s)
		}
		if ids := eventIDs(t, h.await(t, "Notification").body); !slices.Equal(ids, []string{"early"}) {
			t.Errorf("delivered %v; want the event published while awaiting", ids)
		}
		if resp, err := http.Get(v.ValidationURL); err != nil || resp.StatusCode != 404 {
			t.Errorf("a second GET of the validationUrl: %v %v; want 404 (used)", resp.StatusCode, err)
		}
	})

	t.Run("an endpoint that refuses fails the create", func(t *testing.T) {
		h := newHook(func(w http.ResponseWriter, r *http.Request, body []byte) { w.WriteHeader(http.StatusForbidden) })
		hs := httptest.NewServer(h)
		defer hs.Close()
		status, body := subscribe("orders", "refused", hs.URL+"/hook?code=s3cret", "")
		raw, _ := json.Marshal(body)
		if status != 400 || !strings.Contains(string(raw), "endpoint validation failed") || !strings.Contains(string(raw), "403 Forbidden") || strings.Contains(string(raw), "s3cret") {
			t.Fatalf("PUT: %d %s; want 400 saying the endpoint answered 403, without the query string", status, raw)
		}
		if n := len(h.snapshot()); n != 1 {
			t.Errorf("%d validation requests; want 1 (a 403 is not retried)", n)
		}
		if status, _ := adminDo(t, srv, "admin", "GET", "/admin/topics/orders/eventSubscriptions/refused", ""); status != 404 {
			t.Errorf("GET after the refused create: %d; want 404", status)
		}
	})

	t.Run("a CloudEvents endpoint answering OPTIONS is validated", func(t *testing.T) {
		h := newHook(nil)
		hs := httptest.NewServer(h)
		defer hs.Close()
		if status, body := subscribe("ce-orders", "ce-hook", hs.URL+"/ce", "CloudEventSchemaV1_0"); status != 201 || props(t, body, "properties")["provisioningState"] != "Succeeded" {
			t.Fatalf("PUT: %d %v; want 201 Succeeded", status, body)
		}
		first := h.snapshot()[0]
		if first.method != http.MethodOptions || first.header.Get("WebHook-Request-Origin") != "eventgrid.azure.net" {
			t.Errorf("first request %s %v; want OPTIONS with WebHook-Request-Origin", first.method, first.header)
		}
	})

	t.Run("a CloudEvents endpoint refusing OPTIONS fails the create", func(t *testing.T) {
		h := newHook(func(w http.ResponseWriter, r *http.Request, body []byte) { w.WriteHeader(http.StatusMethodNotAllowed) })
		hs := httptest.NewServer(h)
		defer hs.Close()
		if status, body := subscribe("ce-orders", "ce-refused", hs.URL+"/ce", "CloudEventSchemaV1_0"); status != 400 || !strings.Contains(body["error"].(map[string]any)["message"].(string), "WebHook-Allowed-Origin") {
			t.Fatalf("PUT: %d %v; want 400 explaining the consent", status, body)
		}
	})

	t.Run("skipValidation opts out", func(t *testing.T) {
		h := newHook(func(w http.ResponseWriter, r *http.Request, body []byte) { w.WriteHeader(http.StatusForbidden) })
		hs := httptest.NewServer(h)
		defer hs.Close()
		body := `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"` + hs.URL + `/hook","skipValidation":true}}}}`
		if status, got := adminDo(t, srv, "admin", "PUT", "/admin/topics/orders/eventSubscriptions/trusted", body); status != 201 {
			t.Fatalf("PUT: %d %v", status, got)
		}
		if n := len(h.snapshot()); n != 0 {
			t.Errorf("%d requests; want none", n)
		}
	})
}

// bubble runs a router in a synctest bubble with a store that outlives it and endpoints served
// in memory.
type bubble struct {
	t     *testing.T
	cfg   router.Config
	store store.Store
	tr    *testkit.Transport
	r     *router.Router
}

func newBubble(t *testing.T, cfg router.Config) *bubble {
	b := &bubble{t: t, cfg: cfg, store: store.NewMemory(), tr: testkit.NewTransport()}
	b.start()
	t.Cleanup(func() { b.r.Close(context.Background()) })
	if _, err := b.r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bubble) start() {
	r, err := router.New(b.cfg, router.Deps{Store: b.store, HTTPClient: &http.Client{Transport: b.tr}})
	if err != nil {
		b.t.Fatal(err)
	}
	b.r = r
}

func (b *bubble) restart() {
	if err := b.r.Close(context.Background()); err != nil {
		b.t.Fatal(err)
	}
	b.start()
}

func (b *bubble) state(name string) router.Provisioning {
	p, err := b.r.Provisioning("orders", name)
	if err != nil {
		b.t.Fatalf("Provisioning(%s): %v", name, err)
	}
	return p
}

// timedHook serves a scripted answer per request and records when each came.
type timedHook struct {
	start  time.Time
	mu     sync.Mutex
	at     []time.Duration
	kinds  []string
	answer func(n int, w http.ResponseWriter, r *http.Request, body []byte)
}

func (h *timedHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	n := len(h.at)
	h.at = append(h.at, time.Since(h.start))
	h.kinds = append(h.kinds, r.Method+" "+r.Header.Get("aeg-event-type"))
	h.mu.Unlock()
	h.answer(n, w, r, body)
}

func (h *timedHook) log() ([]time.Duration, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.at), slices.Clone(h.kinds)
}

func TestValidationTiming(t *testing.T) {
	t.Run("a timed-out handshake is tried again after 5 s", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBubble(t, router.Config{})
			h := &timedHook{start: time.Now(), answer: func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
				if n == 0 {
					<-r.Context().Done() // never answers: the 30 s timeout ends it
					return
				}
				echoHandshake(w, r, body)
			}}
			b.tr.Handle("hook.test", h)
			if err := b.r.CreateSubscription(context.Background(), "orders", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}); err != nil {
				t.Fatal(err)
			}
			at, _ := h.log()
			if !slices.Equal(at, []time.Duration{0, 35 * time.Second}) || time.Since(h.start) != 35*time.Second {
				t.Errorf("validation requests at %v, created after %v; want [0s 35s]: 30 s timeout, then 5 s", at, time.Since(h.start))
			}
		})
	})

	t.Run("a 503 twice fails the create after one retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBubble(t, router.Config{})
			h := &timedHook{start: time.Now(), answer: func(int, http.ResponseWriter, *http.Request, []byte) {}}
			h.answer = func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(503) }
			b.tr.Handle("hook.test", h)
			err := b.r.CreateSubscription(context.Background(), "orders", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")})
			if !errors.Is(err, router.ErrValidationFailed) {
				t.Fatalf("CreateSubscription = %v; want ErrValidationFailed", err)
			}
			if at, _ := h.log(); !slices.Equal(at, []time.Duration{0, 5 * time.Second}) {
				t.Errorf("validation requests at %v; want [0s 5s]", at)
			}
		})
	})

	t.Run("without a public URL a manual answer fails the create", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBubble(t, router.Config{})
			b.tr.Handle("hook.test", &timedHook{start: time.Now(), answer: func(int, http.ResponseWriter, *http.Request, []byte) {}})
			err := b.r.CreateSubscription(context.Background(), "orders", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")})
			if !errors.Is(err, router.ErrValidationFailed) || !strings.Contains(err.Error(), "PublicURL") {
				t.Fatalf("CreateSubscription = %v; want ErrValidationFailed naming PublicURL", err)
			}
		})
	})

	t.Run("the manual window closes after 10 minutes, also across a restart", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBubble(t, router.Config{PublicURL: "http://egrid.test"})
			var urls []string
			h := &timedHook{start: time.Now(), answer: func(_ int, _ http.ResponseWriter, _ *http.Request, body []byte) {
				urls = append(urls, validationData(body).ValidationURL)
			}}
			b.tr.Handle("hook.test", h)
			if err := b.r.CreateSubscription(context.Background(), "orders", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}); err != nil {
				t.Fatal(err)
			}
			if p := b.state("sub"); p.State != router.StateAwaitingManualAction || !strings.HasPrefix(urls[0], "http://egrid.test/eventsubscriptions/sub/validate?") {
				t.Fatalf("state %+v, validationUrl %q; want AwaitingManualAction with a URL at the PublicURL", p, urls[0])
			}
			if err := b.r.Publish(context.Background(), "orders", gridEvent("e1")); err != nil {
				t.Fatal(err)
			}
			testkit.Advance(6 * time.Minute)
			b.restart()
			if p := b.state("sub"); p.State != router.StateAwaitingManualAction {
				t.Fatalf("state after a restart: %+v; want AwaitingManualAction", p)
			}
			testkit.Advance(4*time.Minute - time.Nanosecond)
			synctest.Wait()
			if p := b.state("sub"); p.State != router.StateAwaitingManualAction {
				t.Fatalf("state just before 10 minutes: %+v", p)
			}
			testkit.Advance(time.Nanosecond)
			synctest.Wait()
			if p := b.state("sub"); p.State != router.StateFailed || !strings.Contains(p.Message, "validationUrl") {
				t.Fatalf("state after 10 minutes: %+v; want Failed saying why", p)
			}
			rec := httptest.NewRecorder()
			httpapi.New(b.r).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, urls[0], nil))
			if rec.Code != 404 {
				t.Errorf("GET of the expired validationUrl: %d; want 404", rec.Code)
			}
			b.restart()
			testkit.Advance(time.Hour)
			synctest.Wait()
			if _, kinds := h.log(); !slices.Equal(kinds, []string{"POST SubscriptionValidation"}) {
				t.Errorf("the endpoint got %v; want only the validation event: nothing is delivered to a failed subscription", kinds)
			}
		})
	})

	t.Run("a validationUrl fetched after a restart starts delivery", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBubble(t, router.Config{PublicURL: "http://egrid.test"})
			var url string
			h := &timedHook{start: time.Now(), answer: func(_ int, _ http.ResponseWriter, r *http.Request, body []byte) {
				if r.Header.Get("aeg-event-type") == "SubscriptionValidation" {
					url = validationData(body).ValidationURL
				}
			}}
			b.tr.Handle("hook.test", h)
			if err := b.r.CreateSubscription(context.Background(), "orders", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}); err != nil {
				t.Fatal(err)
			}
			if err := b.r.Publish(context.Background(), "orders", gridEvent("e1")); err != nil {
				t.Fatal(err)
			}
			b.restart()
			rec := httptest.NewRecorder()
			httpapi.New(b.r).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, url, nil))
			if rec.Code != 200 {
				t.Fatalf("GET validationUrl after a restart: %d %s", rec.Code, rec.Body)
			}
			synctest.Wait()
			if _, kinds := h.log(); !slices.Equal(kinds, []string{"POST SubscriptionValidation", "POST Notification"}) {
				t.Errorf("the endpoint got %v; want the validation event, then e1", kinds)
			}
			testkit.Advance(time.Hour)
			if p := b.state("sub"); p.State != router.StateSucceeded {
				t.Errorf("state an hour later: %+v; want Succeeded (the window timer is gone)", p)
			}
		})
	})

	t.Run("WebHook-Allowed-Rate caps the delivery rate", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBubble(t, router.Config{})
			if _, err := b.r.CreateTopic(context.Background(), "ce-topic", router.TopicSpec{InputSchema: "CloudEventSchemaV1_0"}); err != nil {
				t.Fatal(err)
			}
			h := &timedHook{answer: func(_ int, w http.ResponseWriter, r *http.Request, _ []byte) {
				if r.Method == http.MethodOptions {
					w.Header().Set("WebHook-Allowed-Origin", "*")
					w.Header().Set("WebHook-Allowed-Rate", "20") // one every 3 s
				}
			}}
			b.tr.Handle("hook.test", h)
			if err := b.r.CreateSubscription(context.Background(), "ce-topic", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/"), EventDeliverySchema: "CloudEventSchemaV1_0"}); err != nil {
				t.Fatal(err)
			}
			b.restart() // the allowed rate is kept with the subscription
			h.mu.Lock()
			h.start = time.Now()
			h.at, h.kinds = nil, nil
			h.mu.Unlock()
			var evs []any
			for _, id := range []string{"a", "b", "c"} {
				evs = append(evs, map[string]any{"specversion": "1.0", "id": id, "source": "/s", "type": "T"})
			}
			if err := b.r.Publish(context.Background(), "ce-topic", evs...); err != nil {
				t.Fatal(err)
			}
			testkit.Advance(time.Minute)
			if at, _ := h.log(); !slices.Equal(at, []time.Duration{0, 3 * time.Second, 6 * time.Second}) {
				t.Errorf("deliveries at %v; want [0s 3s 6s] under WebHook-Allowed-Rate 20", at)
			}
		})
	})
}

func TestExpiration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, router.Config{SkipEndpointValidation: true})
		b.tr.Handle("hook.test", &timedHook{answer: func(int, http.ResponseWriter, *http.Request, []byte) {}})
		create := func(name string, in time.Duration) {
			spec := router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/"), ExpirationTimeUTC: time.Now().Add(in)}
			if err := b.r.CreateSubscription(context.Background(), "orders", name, spec); err != nil {
				t.Fatal(err)
			}
		}
		exists := func(name string) bool {
			_, err := b.r.Subscription("orders", name)
			return err == nil
		}
		create("short", time.Hour)
		create("long", 3*time.Hour)
		create("moved", time.Hour)
		spec, _ := b.r.Subscription("orders", "moved")
		spec.ExpirationTimeUTC = time.Now().Add(5 * time.Hour) // an update moves the expiration
		if err := b.r.CreateSubscription(context.Background(), "orders", "moved", spec); err != nil {
			t.Fatal(err)
		}
		testkit.Advance(time.Hour - time.Nanosecond)
		synctest.Wait()
		if !exists("short") {
			t.Fatal("short expired early")
		}
		testkit.Advance(time.Nanosecond)
		synctest.Wait()
		if exists("short") || !exists("long") || !exists("moved") {
			t.Fatalf("after 1 h: short %v, long %v, moved %v; want only short gone", exists("short"), exists("long"), exists("moved"))
		}
		// The timers are rebuilt after a restart, and an expiration that passed while the
		// router was down deletes the subscription at start.
		if err := b.r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		testkit.Advance(3 * time.Hour)
		b.start()
		synctest.Wait()
		if exists("long") || !exists("moved") {
			t.Fatalf("after a restart at 4 h: long %v, moved %v; want long gone", exists("long"), exists("moved"))
		}
		testkit.Advance(time.Hour)
		synctest.Wait()
		if exists("moved") {
			t.Fatal("moved still exists after 5 h")
		}
	})
}

// Event Grid sends the validation handshake on every create and update of a WebHook
// subscription ("at the time of event subscription creation or update":
// learn.microsoft.com/azure/event-grid/end-point-validation-event-grid-events-schema), not only
// when the endpoint changes. An update whose validation fails leaves the previous definition
// in place and delivering; skipValidation still opts out.
func TestValidationOnUpdate(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "admin"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	adminDo(t, srv, "admin", "PUT", "/admin/topics/orders", `{}`)

	var refuse sync.Mutex // guards refusing: whether the endpoint refuses validation
	refusing := false
	h := newHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		refuse.Lock()
		no := refusing
		refuse.Unlock()
		if no && r.Header.Get("aeg-event-type") == "SubscriptionValidation" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		echoHandshake(w, r, body)
	})
	hs := httptest.NewServer(h)
	defer hs.Close()
	put := func(label string, skip bool) (int, map[string]any) {
		body := `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"` + hs.URL + `/hook","skipValidation":` + strconv.FormatBool(skip) + `}},"labels":["` + label + `"]}}`
		return adminDo(t, srv, "admin", "PUT", "/admin/topics/orders/eventSubscriptions/billing", body)
	}
	validations := func() int {
		n := 0
		for _, req := range h.snapshot() {
			if req.header.Get("aeg-event-type") == "SubscriptionValidation" {
				n++
			}
		}
		return n
	}

	if status, body := put("v1", false); status != 201 {
		t.Fatalf("create: %d %v", status, body)
	}
	if status, body := put("v2", false); status != 200 {
		t.Fatalf("update with the same endpoint: %d %v", status, body)
	}
	if n := validations(); n != 2 {
		t.Fatalf("%d validation events after a create and an update of the label; want 2", n)
	}

	refuse.Lock()
	refusing = true
	refuse.Unlock()
	if status, body := put("v3", false); status != 400 {
		t.Fatalf("update refused by the endpoint: %d %v; want 400", status, body)
	}
	spec, err := r.Subscription("orders", "billing")
	if err != nil || !slices.Equal(spec.Labels, []string{"v2"}) {
		t.Fatalf("after the refused update: labels %v (%v); want the previous definition, [v2]", spec.Labels, err)
	}
	if err := r.Publish(context.Background(), "orders", gridEvent("after-refusal")); err != nil {
		t.Fatal(err)
	}
	if ids := eventIDs(t, h.await(t, "Notification").body); !slices.Equal(ids, []string{"after-refusal"}) {
		t.Errorf("delivered %v after the refused update; want the previous definition still delivering", ids)
	}

	before := validations()
	if status, body := put("v4", true); status != 200 {
		t.Fatalf("update with skipValidation: %d %v", status, body)
	}
	if n := validations(); n != before {
		t.Errorf("%d validation events for an update with skipValidation; want none", n-before)
	}
}

// After a CloudEvents endpoint consented to the OPTIONS handshake, deliveries carry Origin with
// the WebHook-Request-Origin of that handshake, as the CloudEvents webhook specification
// (section 4.1) and learn.microsoft.com/azure/event-grid/end-point-validation-cloud-events-schema
// describe. An Event Grid schema delivery, validated by the validation event, carries none.
func TestOriginFollowsTheAbuseProtectionHandshake(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "admin"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	adminDo(t, srv, "admin", "PUT", "/admin/topics/orders", `{}`)
	for _, c := range []struct {
		schema, wantOrigin string
	}{
		{"CloudEventSchemaV1_0", "eventgrid.azure.net"},
		{"EventGridSchema", ""},
	} {
		t.Run(c.schema, func(t *testing.T) {
			h := newHook(nil)
			hs := httptest.NewServer(h)
			defer hs.Close()
			body := `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"` + hs.URL + `/hook"}},"eventDeliverySchema":"` + c.schema + `"}}`
			if status, got := adminDo(t, srv, "admin", "PUT", "/admin/topics/orders/eventSubscriptions/"+strings.ToLower(c.schema[:5]), body); status != 201 {
				t.Fatalf("PUT: %d %v", status, got)
			}
			if err := r.Publish(context.Background(), "orders", gridEvent("e1")); err != nil {
				t.Fatal(err)
			}
			d := h.await(t, "Notification")
			if got := d.header.Get("Origin"); got != c.wantOrigin {
				t.Errorf("Origin %q, want %q", got, c.wantOrigin)
			}
			if c.wantOrigin != "" {
				if first := h.snapshot()[0]; first.header.Get("WebHook-Request-Origin") != c.wantOrigin {
					t.Errorf("handshake origin %q, delivery Origin %q: want the same", first.header.Get("WebHook-Request-Origin"), c.wantOrigin)
				}
			}
		})
	}
}

// Deleting a WebHook subscription sends its endpoint the notification Event Grid sends
// (eventgrid-behaviour.md §5.4; the data is SubscriptionDeletedEventData in the Azure SDKs'
// system events, learn.microsoft.com/javascript/api/@azure/eventgrid/subscriptiondeletedeventdata):
// aeg-event-type SubscriptionDeletion, eventType Microsoft.EventGrid.SubscriptionDeletedEvent,
// data.eventSubscriptionId the subscription's ARM id. The delete does not wait for it: the
// endpoint here answers only after the delete has returned.
func TestSubscriptionDeletionNotification(t *testing.T) {
	r, err := router.New(router.Config{}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	h := newHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.Header.Get("aeg-event-type") == "SubscriptionDeletion" {
			<-release
		}
		echoHandshake(w, r, body)
	})
	hs := httptest.NewServer(h)
	defer hs.Close()
	defer close(release)
	if err := r.CreateSubscription(context.Background(), "orders", "billing", router.SubscriptionSpec{Destination: router.WebHook(hs.URL + "/hook")}); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteSubscription(context.Background(), "orders", "billing"); err != nil {
		t.Fatal(err)
	}
	got := h.await(t, "SubscriptionDeletion") // arrives while its answer is still held back
	var evs []struct {
		ID, Topic, Subject, EventType, EventTime, MetadataVersion, DataVersion string
		Data                                                                   map[string]string
	}
	if err := json.Unmarshal(got.body, &evs); err != nil || len(evs) != 1 {
		t.Fatalf("body %s: %v; want a one-event Event Grid array", got.body, err)
	}
	e := evs[0]
	wantID := r.TopicID("orders") + "/providers/Microsoft.EventGrid/eventSubscriptions/billing"
	if e.EventType != "Microsoft.EventGrid.SubscriptionDeletedEvent" || e.Subject != "" || e.DataVersion != "1" || e.MetadataVersion != "1" ||
		e.Topic != r.TopicID("orders") || e.ID == "" || e.EventTime == "" || len(e.Data) != 1 || e.Data["eventSubscriptionId"] != wantID {
		t.Errorf("event %+v; want the SubscriptionDeletedEvent of %s", e, wantID)
	}
	if got.header.Get("aeg-subscription-name") != "BILLING" || !strings.HasPrefix(got.header.Get("Content-Type"), "application/json") {
		t.Errorf("headers %v", got.header)
	}
}

// The SubscriptionDeletion notification never holds up the router: a delete returns while the
// endpoint has not answered, and Close cancels the notification instead of waiting for the
// endpoint's response timeout.
func TestSubscriptionDeletionDoesNotBlockClose(t *testing.T) {
	r, err := router.New(router.Config{SkipEndpointValidation: true}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	arrived, release := make(chan struct{}), make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("aeg-event-type") == "SubscriptionDeletion" {
			close(arrived)
			select {
			case <-release:
			case <-req.Context().Done(): // egrid gave up: Close cancelled the notification
			}
		}
	}))
	defer hs.Close()
	defer close(release)
	if err := r.CreateSubscription(context.Background(), "orders", "billing", router.SubscriptionSpec{Destination: router.WebHook(hs.URL)}); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteSubscription(context.Background(), "orders", "billing"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("no SubscriptionDeletion notification within 30 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // below the 30 s response timeout
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatalf("Close with a notification in flight: %v; want it cancelled, not waited for", err)
	}
}

// keptJournalStore is a memory store whose Trim deletes nothing: the journal keeps every
// event, as it does while another subscription of the topic holds it back.
type keptJournalStore struct{ store.Store }

func (keptJournalStore) Trim(context.Context, string, uint64) error { return nil }

// manualHook is an endpoint that validates by hand (200 without validationResponse, never
// fetching its validationUrl) while manual is set and echoes the code otherwise, answers
// notifications with status (200 when 0), and records the IDs of the events it accepted.
type manualHook struct {
	mu          sync.Mutex
	manual      bool
	status      int
	validation  int    // when not 0, the status validations are answered with
	validations int    // the validation events received
	lastURL     string // the validationUrl of the last one, when manual
	delivered   []string
}

func (h *manualHook) set(manual bool, status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.manual, h.status = manual, status
}

func (h *manualHook) accepted() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.delivered)
}

func (h *manualHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.Header.Get("aeg-event-type") {
	case "SubscriptionValidation":
		h.validations++
		switch {
		case h.validation != 0:
			w.WriteHeader(h.validation)
		case h.manual:
			h.lastURL = validationData(body).ValidationURL
		default:
			echoHandshake(w, r, body)
		}
	case "Notification":
		if h.status != 0 && h.status != http.StatusOK {
			w.WriteHeader(h.status)
			return
		}
		var evs []struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(body, &evs)
		for _, e := range evs {
			h.delivered = append(h.delivered, e.ID)
		}
	}
}

// A subscription whose manual validation window closed is Failed; an update that validates
// it again starts it afresh, as Event Grid does: it gets only the events published from then
// on — neither those published while it was Failed, which the journal still held for
// another subscription, nor those it had parked for a retry before. It used to deliver from
// where its cursor was left.
func TestRevalidatedSubscriptionStartsAfresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := &manualHook{}
		tr := testkit.NewTransport()
		tr.Handle("hook.test", h)
		r, err := router.New(router.Config{PublicURL: "http://egrid.test"}, router.Deps{Store: keptJournalStore{store.NewMemory()}, HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		put := func() {
			t.Helper()
			if err := r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}); err != nil {
				t.Fatal(err)
			}
		}
		state := func() string {
			t.Helper()
			p, err := r.Provisioning("orders", "sub")
			if err != nil {
				t.Fatal(err)
			}
			return p.State
		}

		h.set(false, http.StatusServiceUnavailable)
		put()
		if err := r.Publish(ctx, "orders", gridEvent("parked-before")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // attempted once, parked for a retry
		h.set(true, http.StatusServiceUnavailable)
		put()
		if s := state(); s != router.StateAwaitingManualAction {
			t.Fatalf("after an update validated by hand: %s, want AwaitingManualAction", s)
		}
		testkit.Advance(router.ManualValidationWindow)
		synctest.Wait()
		if s := state(); s != router.StateFailed {
			t.Fatalf("after the window: %s, want Failed", s)
		}
		for _, id := range []string{"while-failed-1", "while-failed-2"} {
			if err := r.Publish(ctx, "orders", gridEvent(id)); err != nil {
				t.Fatal(err)
			}
		}
		testkit.Advance(time.Minute)

		h.set(false, http.StatusOK)
		put()
		if s := state(); s != router.StateSucceeded {
			t.Fatalf("after an update validated again: %s, want Succeeded", s)
		}
		if err := r.Publish(ctx, "orders", gridEvent("after")); err != nil {
			t.Fatal(err)
		}
		testkit.Advance(time.Hour) // any retry of the event parked before comes due
		if got := h.accepted(); !slices.Equal(got, []string{"after"}) {
			t.Errorf("delivered %v after the subscription was validated again; want [after]: only the events published from then on", got)
		}
	})
}

// putFailingStore is a memory store whose PutSubscription fails while failPuts is set.
type putFailingStore struct {
	store.Store
	mu       sync.Mutex
	failPuts bool
}

func (s *putFailingStore) fail(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failPuts = on
}

func (s *putFailingStore) PutSubscription(ctx context.Context, topic, name string, spec []byte) error {
	s.mu.Lock()
	fail := s.failPuts
	s.mu.Unlock()
	if fail {
		return errors.New("injected: disk gone")
	}
	return s.Store.PutSubscription(ctx, topic, name, spec)
}

func (s *putFailingStore) CreateSubscription(ctx context.Context, topic, name string, spec []byte) error {
	s.mu.Lock()
	fail := s.failPuts
	s.mu.Unlock()
	if fail {
		return errors.New("injected: disk gone")
	}
	return s.Store.CreateSubscription(ctx, topic, name, spec)
}

// Closing a validation window whose write fails loses nothing: the stored definition stays
// (still awaiting validation, so the next start closes its window again). The window's close
// deleted the record and wrote it back, and a failed write left the subscription gone from
// the store: it vanished at the next start.
func TestValidationWindowCloseKeepsTheDefinitionWhenTheWriteFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := &putFailingStore{Store: store.NewMemory()}
		h := &manualHook{manual: true}
		tr := testkit.NewTransport()
		tr.Handle("hook.test", h)
		start := func() *router.Router {
			r, err := router.New(router.Config{PublicURL: "http://egrid.test"}, router.Deps{Store: st, HTTPClient: &http.Client{Transport: tr}})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		r := start()
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/"), Labels: []string{"keep"}}); err != nil {
			t.Fatal(err)
		}
		st.fail(true)
		testkit.Advance(router.ManualValidationWindow)
		synctest.Wait()
		if p, err := r.Provisioning("orders", "sub"); err != nil || p.State != router.StateFailed {
			t.Fatalf("after the window: %+v, %v; want Failed", p, err)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
		st.fail(false)

		r = start()
		defer r.Close(ctx)
		synctest.Wait()
		spec, err := r.Subscription("orders", "sub")
		if err != nil {
			t.Fatalf("after a restart: %v; want the subscription, whose definition a failed write must not lose", err)
		}
		if !slices.Equal(spec.Labels, []string{"keep"}) {
			t.Errorf("labels %v after a restart, want [keep]", spec.Labels)
		}
		if p, err := r.Provisioning("orders", "sub"); err != nil || p.State != router.StateFailed {
			t.Errorf("after a restart: %+v, %v; want Failed (its window had passed)", p, err)
		}
	})
}

// An expired subscription whose deletion fails — its actor did not stop in time — is deleted
// by a retry a few seconds later. The failure was only logged: the subscription stayed, and
// could go on delivering past its expiration, until the next start.
func TestExpiredSubscriptionDeletionIsRetried(t *testing.T) {
	router.SetRunSubscriptionTimeout(t, time.Second) // the actor's stop below takes its 5 s grace
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		release := make(chan struct{})
		hung := sinks.Func(func(context.Context, *sinks.Batch) error {
			<-release // ignores its context: the stop waits for it its whole grace
			return nil
		})
		var logMu sync.Mutex
		var logs strings.Builder
		r, err := router.New(router.Config{SkipEndpointValidation: true}, router.Deps{
			Store: store.NewMemory(), Sinks: map[string]sinks.Sink{"s": hung},
			Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelError})),
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			close(release)
			_ = r.Close(ctx)
			testkit.Advance(time.Minute) // the abandoned attempt's late result to its stopped actor ends
		}()
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		spec := router.SubscriptionSpec{Destination: router.SinkDestination("s"), ExpirationTimeUTC: time.Now().Add(time.Hour)}
		if err := r.CreateSubscription(ctx, "orders", "sub", spec); err != nil {
			t.Fatal(err)
		}
		if err := r.Publish(ctx, "orders", gridEvent("e1")); err != nil {
			t.Fatal(err)
		}
		testkit.Advance(time.Hour + time.Second)
		synctest.Wait()
		if _, err := r.Subscription("orders", "sub"); err != nil {
			t.Fatalf("after the first deletion, which should have failed: %v", err)
		}
		logMu.Lock()
		logged := logs.String()
		logMu.Unlock()
		if !strings.Contains(logged, "deleting an expired event subscription failed") || !strings.Contains(logged, "retryIn=5s") {
			t.Errorf("log %q; want the failed deletion with its retry in 5s", logged)
		}
		testkit.Advance(5 * time.Second)
		synctest.Wait()
		if _, err := r.Subscription("orders", "sub"); !errors.Is(err, router.ErrSubscriptionNotFound) {
			t.Errorf("5 s after the deletion failed: %v; want the retry to have deleted it", err)
		}
	})
}
