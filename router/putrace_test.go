package router_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
)

// heldEndpoint is a WebHook endpoint on 127.0.0.1 that answers the SubscriptionValidation
// handshake correctly, at once on every path but /v-slow, where it answers only once the test
// lets it (release): an endpoint that takes its time, up to the handshake's minute, which the
// endpoint and not egrid decides. Notifications are sent to notified by path.
type heldEndpoint struct {
	entered  chan struct{} // a value as a /v-slow handshake arrives
	release  chan struct{} // a value lets one /v-slow handshake answer
	notified chan string   // the path of each notification
}

func newHeldEndpoint() *heldEndpoint {
	return &heldEndpoint{entered: make(chan struct{}, 4), release: make(chan struct{}, 4), notified: make(chan string, 100)}
}

func (h *heldEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("aeg-event-type") == "SubscriptionValidation" && r.URL.Path == "/v-slow" {
		h.entered <- struct{}{}
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
	}
	if r.Header.Get("aeg-event-type") == "Notification" {
		h.notified <- r.URL.Path
	}
	echoHandshake(w, r, body)
}

// putRace is a router behind the admin API with topic orders, and the held endpoint.
type putRace struct {
	t   *testing.T
	r   *router.Router
	srv *httptest.Server
	ep  *heldEndpoint
	hs  *httptest.Server
}

func newPutRace(t *testing.T) *putRace {
	r, err := router.New(router.Config{AdminToken: "admin"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	srv := httptest.NewServer(httpapi.New(r))
	t.Cleanup(srv.Close)
	ep := newHeldEndpoint()
	hs := httptest.NewServer(ep)
	t.Cleanup(hs.Close)
	p := &putRace{t: t, r: r, srv: srv, ep: ep, hs: hs}
	if status, body := adminDo(t, srv, "admin", "PUT", "/admin/topics/orders", `{}`); status/100 != 2 {
		t.Fatalf("PUT topic: %d %v", status, body)
	}
	return p
}

func (p *putRace) subPath(topic, name string) string {
	return "/admin/topics/" + topic + "/eventSubscriptions/" + name
}

func (p *putRace) subBody(path string) string {
	return `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"` + p.hs.URL + path + `"}}}}`
}

// put PUTs subscription topic/name to the endpoint's path and waits for the answer.
func (p *putRace) put(topic, name, path string) (int, map[string]any) {
	p.t.Helper()
	return adminDo(p.t, p.srv, "admin", "PUT", p.subPath(topic, name), p.subBody(path))
}

// answer is an admin call's status and body.
type answer struct {
	status int
	body   string
	err    error
}

// slowPut PUTs subscription topic/name to /v-slow, returns once the endpoint holds its
// handshake, and returns the channel its answer comes on once the handshake is released.
func (p *putRace) slowPut(topic, name string) <-chan answer {
	p.t.Helper()
	done := make(chan answer, 1)
	go func() {
		req, err := http.NewRequest("PUT", p.srv.URL+p.subPath(topic, name), strings.NewReader(p.subBody("/v-slow")))
		if err != nil {
			done <- answer{err: err}
			return
		}
		req.Header.Set("Authorization", "Bearer admin")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- answer{status: resp.StatusCode, body: string(b)}
	}()
	select {
	case <-p.ep.entered:
	case a := <-done:
		p.t.Fatalf("the slow PUT answered before its handshake reached the endpoint: %d %s %v", a.status, a.body, a.err)
	}
	return done
}

// finish lets the held handshake answer and returns the slow PUT's answer.
func (p *putRace) finish(done <-chan answer) answer {
	p.t.Helper()
	p.ep.release <- struct{}{}
	a := <-done
	if a.err != nil {
		p.t.Fatal(a.err)
	}
	return a
}

// endpointOf is the endpoint path subscription topic/name reads back with (404: "").
func (p *putRace) endpointOf(topic, name string) string {
	p.t.Helper()
	status, body := adminDo(p.t, p.srv, "admin", "GET", p.subPath(topic, name), "")
	if status == http.StatusNotFound {
		return ""
	}
	if status != http.StatusOK {
		p.t.Fatalf("GET %s/%s: %d %v", topic, name, status, body)
	}
	u, _ := props(p.t, body, "properties", "destination", "properties")["endpointBaseUrl"].(string)
	return strings.TrimPrefix(u, p.hs.URL)
}

// An event subscription's writes take effect in the order they were answered, although a
// PUT's endpoint handshake, which the endpoint can hold for up to a minute, runs before its
// definition is stored: a PUT whose subscription another request updated, deleted or created
// while its handshake ran fails 409 and changes nothing (was: it stored its definition over
// the later one, or brought a deleted subscription back, delivering again).
func TestPutDuringASlowHandshakeDoesNotUndoALaterWrite(t *testing.T) {
	t.Run("a later update stays in force", func(t *testing.T) {
		p := newPutRace(t)
		if status, body := p.put("orders", "race3", "/ok"); status != http.StatusCreated {
			t.Fatalf("create: %d %v", status, body)
		}
		slow := p.slowPut("orders", "race3")
		if status, body := p.put("orders", "race3", "/st200"); status != http.StatusOK {
			t.Fatalf("the later update: %d %v", status, body)
		}
		a := p.finish(slow)
		if a.status != http.StatusConflict || !strings.Contains(a.body, "updated by another request") {
			t.Errorf("the earlier update, answered after the later one: %d %s; want 409 saying another request updated it", a.status, a.body)
		}
		if got := p.endpointOf("orders", "race3"); got != "/st200" {
			t.Errorf("endpoint after both answered: %q; want /st200, the later update's", got)
		}
		if err := p.r.Publish(context.Background(), "orders", gridEvent("e1")); err != nil {
			t.Fatal(err)
		}
		if got := <-p.ep.notified; got != "/st200" {
			t.Errorf("delivered to %s; want /st200", got)
		}
	})

	t.Run("a delete stays deleted", func(t *testing.T) {
		p := newPutRace(t)
		if status, body := p.put("orders", "race4", "/ok"); status != http.StatusCreated {
			t.Fatalf("create: %d %v", status, body)
		}
		slow := p.slowPut("orders", "race4")
		if status, body := adminDo(t, p.srv, "admin", "DELETE", p.subPath("orders", "race4"), ""); status != http.StatusOK {
			t.Fatalf("DELETE: %d %v", status, body)
		}
		a := p.finish(slow)
		if a.status != http.StatusConflict || !strings.Contains(a.body, "deleted by another request") {
			t.Errorf("the update, answered after the delete: %d %s; want 409 saying another request deleted it", a.status, a.body)
		}
		if got := p.endpointOf("orders", "race4"); got != "" {
			t.Errorf("after the delete answered: the subscription reads back with endpoint %q; want it deleted (404)", got)
		}
		if names, err := p.r.Subscriptions("orders"); err != nil || len(names) != 0 {
			t.Errorf("subscriptions of orders: %v %v; want none", names, err)
		}
	})

	t.Run("a create does not replace one created meanwhile", func(t *testing.T) {
		p := newPutRace(t)
		slow := p.slowPut("orders", "race5")
		if status, body := p.put("orders", "RACE5", "/ok"); status != http.StatusCreated {
			t.Fatalf("the later create: %d %v", status, body)
		}
		a := p.finish(slow)
		if a.status != http.StatusConflict || !strings.Contains(a.body, "created by another request") {
			t.Errorf("the earlier create, answered after the later one: %d %s; want 409 saying another request created it", a.status, a.body)
		}
		if got := p.endpointOf("orders", "race5"); got != "/ok" {
			t.Errorf("endpoint: %q; want /ok, the later create's", got)
		}
	})

	t.Run("a topic deleted meanwhile gets no subscription", func(t *testing.T) {
		p := newPutRace(t)
		slow := p.slowPut("orders", "race6")
		if status, body := adminDo(t, p.srv, "admin", "DELETE", "/admin/topics/orders", ""); status != http.StatusOK {
			t.Fatalf("DELETE topic: %d %v", status, body)
		}
		if a := p.finish(slow); a.status != http.StatusNotFound {
			t.Errorf("the create, answered after its topic's delete: %d %s; want 404", a.status, a.body)
		}
		if status, _ := adminDo(t, p.srv, "admin", "GET", "/admin/topics/orders", ""); status != http.StatusNotFound {
			t.Errorf("GET topic after its delete answered: %d; want 404", status)
		}
	})

	t.Run("a topic deleted and created again meanwhile gets no subscription", func(t *testing.T) {
		p := newPutRace(t)
		if status, body := p.put("orders", "race7", "/ok"); status != http.StatusCreated {
			t.Fatalf("create: %d %v", status, body)
		}
		slow := p.slowPut("orders", "race7")
		if status, body := adminDo(t, p.srv, "admin", "DELETE", "/admin/topics/orders", ""); status != http.StatusOK {
			t.Fatalf("DELETE topic: %d %v", status, body)
		}
		if status, body := adminDo(t, p.srv, "admin", "PUT", "/admin/topics/orders", `{}`); status/100 != 2 {
			t.Fatalf("PUT topic again: %d %v", status, body)
		}
		if a := p.finish(slow); a.status != http.StatusNotFound {
			t.Errorf("the update, answered after its topic was deleted and created again: %d %s; want 404", a.status, a.body)
		}
		if got := p.endpointOf("orders", "race7"); got != "" {
			t.Errorf("the topic created again has subscription race7 to %q; want none", got)
		}
	})
}

// A client's retry of a PUT whose first attempt is still validating its endpoint (the
// client timed out): both attempts succeed, the definition in force being the one both
// PUT — was: the one answered last failed 409, saying another request's definition was in
// force.
func TestAnIdenticalRetryOfASlowPutSucceeds(t *testing.T) {
	p := newPutRace(t)
	if status, body := p.put("orders", "race9", "/ok"); status != http.StatusCreated {
		t.Fatalf("create: %d %v", status, body)
	}
	first := p.slowPut("orders", "race9")
	retry := p.slowPut("orders", "race9")
	for i, a := range []answer{p.finish(first), p.finish(retry)} {
		if a.status != http.StatusOK {
			t.Errorf("attempt %d: %d %s; want 200", i+1, a.status, a.body)
		}
	}
	if got := p.endpointOf("orders", "race9"); got != "/v-slow" {
		t.Errorf("endpoint %q, want /v-slow", got)
	}
}
