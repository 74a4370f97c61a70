package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/testkit"
)

// pullRig is a router with a namespace topic "nsq" holding a queue subscription "que" and a push
// subscription "psh", served by httpapi, inside a testkit bubble (virtual time).
type pullRig struct {
	t   *testing.T
	h   *testkit.Harness
	api *httpapi.API
	key string
}

func newPullRig(t *testing.T, h *testkit.Harness) *pullRig {
	t.Helper()
	h.CreateTopic("nsq", router.TopicSpec{Kind: router.KindNamespace})
	h.Subscribe("nsq", "que", router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{
		DeliveryMode: router.DeliveryModeQueue,
		Queue:        &router.QueueInfo{ReceiveLockDurationInSeconds: 60, MaxDeliveryCount: 10},
	}})
	h.Subscribe("nsq", "psh", router.SubscriptionSpec{Destination: router.WebHook(h.Endpoint("hook").URL())})
	spec, err := h.Router().Topic("nsq")
	if err != nil {
		t.Fatal(err)
	}
	return &pullRig{t: t, h: h, api: httpapi.New(h.Router()), key: spec.Key1}
}

// do serves one request with the topic key; it returns the status and the body.
func (p *pullRig) do(path, body string) (int, string) {
	p.t.Helper()
	return p.doKey(path, body, p.key)
}

func (p *pullRig) doKey(path, body, key string) (int, string) {
	p.t.Helper()
	req := localRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("aeg-sas-key", key)
	}
	rec := httptest.NewRecorder()
	p.api.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// publish posts CloudEvents with the given ids to the topic's :publish route.
func (p *pullRig) publish(ids ...string) {
	p.t.Helper()
	var evs []string
	for _, id := range ids {
		evs = append(evs, fmt.Sprintf(`{"specversion":"1.0","id":%q,"source":"/orders","type":"Order.Created","subject":"/orders/%s","datacontenttype":"application/json","data":{"n":%q}}`, id, id, id))
	}
	req := httptest.NewRequest(http.MethodPost, "/topics/nsq:publish?api-version=2023-11-01", strings.NewReader("["+strings.Join(evs, ",")+"]"))
	req.Header.Set("Content-Type", "application/cloudevents-batch+json; charset=utf-8")
	req.Header.Set("aeg-sas-key", p.key)
	rec := httptest.NewRecorder()
	p.api.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		p.t.Fatalf("publish: %d %s", rec.Code, rec.Body)
	}
	p.h.Settle()
}

// received is one element of a receive answer, parsed strictly against the TypeSpec shape.
type received struct {
	token string
	count int
	event cloudevents.Event
}

// receive posts :receive and checks the answer's shape member by member: {"value": [...]}
// with exactly brokerProperties {lockToken, deliveryCount} and event, and the event a valid
// CloudEvent by the CloudEvents SDK.
func (p *pullRig) receive(query string) []received {
	p.t.Helper()
	status, body := p.do("/topics/nsq/eventsubscriptions/que:receive?api-version=2024-06-01&"+query, "")
	if status != http.StatusOK {
		p.t.Fatalf("receive: %d %s", status, body)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		p.t.Fatalf("receive answer %s: %v", body, err)
	}
	requireKeys(p.t, "receive answer", top, "value")
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(top["value"], &items); err != nil || items == nil {
		p.t.Fatalf("receive answer's value %s: want an array (never null): %v", top["value"], err)
	}
	var out []received
	for i, it := range items {
		requireKeys(p.t, fmt.Sprintf("value[%d]", i), it, "brokerProperties", "event")
		var bp map[string]json.RawMessage
		if err := json.Unmarshal(it["brokerProperties"], &bp); err != nil {
			p.t.Fatal(err)
		}
		requireKeys(p.t, fmt.Sprintf("value[%d].brokerProperties", i), bp, "lockToken", "deliveryCount")
		var r received
		if err := json.Unmarshal(bp["lockToken"], &r.token); err != nil || r.token == "" {
			p.t.Fatalf("value[%d].brokerProperties.lockToken %s: want a non-empty string", i, bp["lockToken"])
		}
		if err := json.Unmarshal(bp["deliveryCount"], &r.count); err != nil {
			p.t.Fatalf("value[%d].brokerProperties.deliveryCount %s: want an integer", i, bp["deliveryCount"])
		}
		r.event = cloudevents.NewEvent()
		if err := json.Unmarshal(it["event"], &r.event); err != nil {
			p.t.Fatalf("value[%d].event %s: not a CloudEvent: %v", i, it["event"], err)
		}
		if err := r.event.Validate(); err != nil {
			p.t.Fatalf("value[%d].event %s: %v", i, it["event"], err)
		}
		out = append(out, r)
	}
	return out
}

// settleAnswer is a settle operation's answer, parsed strictly against the TypeSpec shape.
type settleAnswer struct {
	succeeded []string
	failed    map[string]string // lock token → error code
}

func (p *pullRig) settle(op string, tokens ...string) settleAnswer {
	p.t.Helper()
	raw, _ := json.Marshal(map[string][]string{"lockTokens": tokens})
	status, body := p.do("/topics/nsq/eventsubscriptions/que:"+op+"?api-version=2024-06-01", string(raw))
	if status != http.StatusOK {
		p.t.Fatalf("%s: %d %s", op, status, body)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		p.t.Fatalf("%s answer %s: %v", op, body, err)
	}
	requireKeys(p.t, op+" answer", top, "failedLockTokens", "succeededLockTokens")
	a := settleAnswer{failed: map[string]string{}}
	if err := json.Unmarshal(top["succeededLockTokens"], &a.succeeded); err != nil || a.succeeded == nil {
		p.t.Fatalf("%s: succeededLockTokens %s: want an array (never null)", op, top["succeededLockTokens"])
	}
	var failed []map[string]json.RawMessage
	if err := json.Unmarshal(top["failedLockTokens"], &failed); err != nil || failed == nil {
		p.t.Fatalf("%s: failedLockTokens %s: want an array (never null)", op, top["failedLockTokens"])
	}
	for i, f := range failed {
		requireKeys(p.t, fmt.Sprintf("%s failedLockTokens[%d]", op, i), f, "lockToken", "error")
		var tok string
		var e struct{ Code, Message string }
		_ = json.Unmarshal(f["lockToken"], &tok)
		if err := json.Unmarshal(f["error"], &e); err != nil || e.Code == "" || e.Message == "" {
			p.t.Fatalf("%s failedLockTokens[%d].error %s: want {code, message}", op, i, f["error"])
		}
		a.failed[tok] = e.Code
	}
	return a
}

func requireKeys(t *testing.T, what string, m map[string]json.RawMessage, want ...string) {
	t.Helper()
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s has members %q; the TypeSpec has %q", what, got, want)
	}
}

func ids(rs []received) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.event.ID())
	}
	slices.Sort(out)
	return out
}

// TestPullDeliveryOverHTTP receives, acknowledges, releases, rejects and renews over the REST
// routes, checking every answer against the shapes of Azure's EventGridNamespace TypeSpec and
// reading the events with the CloudEvents SDK.
func TestPullDeliveryOverHTTP(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		p := newPullRig(t, h)
		p.publish("e1", "e2", "e3")

		got := p.receive("maxEvents=10&maxWaitTime=10")
		if want := []string{"e1", "e2", "e3"}; !slices.Equal(ids(got), want) {
			t.Fatalf("received %q, want %q", ids(got), want)
		}
		for _, r := range got {
			if r.count != 1 {
				t.Errorf("%s: deliveryCount %d on its first receive, want 1", r.event.ID(), r.count)
			}
			if r.event.Type() != "Order.Created" || r.event.Source() != "/orders" || r.event.Subject() != "/orders/"+r.event.ID() {
				t.Errorf("%s: event %v lost attributes", r.event.ID(), r.event)
			}
			var data struct{ N string }
			if err := r.event.DataAs(&data); err != nil || data.N != r.event.ID() {
				t.Errorf("%s: data %s (%v)", r.event.ID(), r.event.Data(), err)
			}
		}
		byID := map[string]string{}
		for _, r := range got {
			byID[r.event.ID()] = r.token
		}

		// Acknowledge e1 with a token that is not one: the good one succeeds, the bad one
		// fails alone.
		a := p.settle("acknowledge", byID["e1"], "not-a-token")
		if !slices.Equal(a.succeeded, []string{byID["e1"]}) || a.failed["not-a-token"] == "" || len(a.failed) != 1 {
			t.Fatalf("acknowledge: %+v", a)
		}
		// An acknowledged event is gone: settling it again fails.
		if a := p.settle("release", byID["e1"]); len(a.succeeded) != 0 || a.failed[byID["e1"]] == "" {
			t.Fatalf("release of an acknowledged event: %+v", a)
		}

		// Renew e2's lock, then release it at once (2024-06-01 delay 0): it comes back with
		// deliveryCount 2.
		if a := p.settle("renewLock", byID["e2"]); !slices.Equal(a.succeeded, []string{byID["e2"]}) {
			t.Fatalf("renewLock: %+v", a)
		}
		status, body := p.do("/topics/nsq/eventsubscriptions/que:release?api-version=2024-06-01&releaseDelayInSeconds=0", `{"lockTokens":["`+byID["e2"]+`"]}`)
		if status != http.StatusOK || !strings.Contains(body, `"succeededLockTokens":["`+byID["e2"]+`"]`) {
			t.Fatalf("release: %d %s", status, body)
		}
		again := p.receive("maxEvents=10&maxWaitTime=10")
		if len(again) != 1 || again[0].event.ID() != "e2" || again[0].count != 2 {
			t.Fatalf("after release: %+v, want e2 with deliveryCount 2", again)
		}

		// Reject e2 and e3: both leave the queue.
		if a := p.settle("reject", again[0].token, byID["e3"]); len(a.succeeded) != 2 || len(a.failed) != 0 {
			t.Fatalf("reject: %+v", a)
		}

		// Nothing is left: a receive waits out its maxWaitTime and answers an empty value.
		done := make(chan []received, 1)
		go func() { done <- p.receive("maxWaitTime=10") }()
		h.Advance(10*time.Second - time.Millisecond)
		select {
		case r := <-done:
			t.Fatalf("an empty receive answered %+v before its maxWaitTime", r)
		default:
		}
		h.Advance(time.Millisecond)
		if r := <-done; len(r) != 0 {
			t.Fatalf("receive on an empty queue: %+v", r)
		}
	})
}

// TestPullRefusesBadInput checks that each bad request gets a clear error naming what is
// wrong, with the status Event Grid gives it.
//
// None of them takes a slot of the long-poll bound (API.AdmitPolls): a bound that is full
// refuses every poll it is asked for, and is never asked.
func TestPullRefusesBadInput(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		p := newPullRig(t, h)
		var admitted []string
		p.api.AdmitPolls(func(w http.ResponseWriter, queue string) (func(), bool) {
			admitted = append(admitted, queue)
			w.WriteHeader(http.StatusTooManyRequests)
			return nil, false
		})
		defer func() {
			if len(admitted) > 0 {
				t.Errorf("requests answered at once asked the poll bound for slots on %v", admitted)
			}
		}()
		const q = "/topics/nsq/eventsubscriptions/que"
		tokens := `{"lockTokens":["t1"]}`
		tests := []struct {
			name, path, body, key string
			status                int
			want                  []string
		}{
			{name: "maxEvents 0", path: q + ":receive?maxEvents=0", status: 400, want: []string{"maxEvents", "1 to 100"}},
			{name: "maxEvents 101", path: q + ":receive?maxEvents=101", status: 400, want: []string{"maxEvents", "1 to 100"}},
			{name: "maxEvents not a number", path: q + ":receive?maxEvents=ten", status: 400, want: []string{"maxEvents \"ten\""}},
			// Query integers are plain decimal digits: strconv.Atoi took a sign.
			{name: "maxEvents with a plus sign", path: q + ":receive?maxEvents=%2B5", status: 400, want: []string{`maxEvents "+5"`, "whole number"}},
			{name: "maxWaitTime with a plus sign", path: q + ":receive?maxWaitTime=%2B10", status: 400, want: []string{`maxWaitTime "+10"`, "whole seconds"}},
			{name: "maxWaitTime 9", path: q + ":receive?maxWaitTime=9", status: 400, want: []string{"maxWaitTime", "10 to 120"}},
			{name: "maxWaitTime 121", path: q + ":receive?maxWaitTime=121", status: 400, want: []string{"maxWaitTime", "10 to 120"}},
			{name: "both out of range", path: q + ":receive?maxEvents=0&maxWaitTime=0", status: 400, want: []string{"maxEvents", "maxWaitTime"}},
			{name: "release delay", path: q + ":release?releaseDelayInSeconds=5", body: tokens, status: 400, want: []string{"releaseDelayInSeconds", "0, 10, 60, 600 or 3600"}},
			{name: "no body", path: q + ":acknowledge", status: 400, want: []string{"no body", `"lockTokens"`}},
			{name: "not JSON", path: q + ":acknowledge", body: `lockTokens=t1`, status: 400, want: []string{"not a lock token list"}},
			{name: "misspelt member", path: q + ":reject", body: `{"lockToken":["t1"]}`, status: 400, want: []string{`"lockToken"`, `"lockTokens"`}},
			{name: "tokens not strings", path: q + ":renewLock", body: `{"lockTokens":[1]}`, status: 400, want: []string{"not a lock token list"}},
			{name: "no tokens", path: q + ":acknowledge", body: `{"lockTokens":[]}`, status: 400, want: []string{"lockTokens is missing or empty"}},
			{name: "too many tokens", path: q + ":acknowledge", body: `{"lockTokens":["t"` + strings.Repeat(`,"t"`, 100) + `]}`, status: 400, want: []string{"101 tokens", "limit is 100"}},
			{name: "an empty token", path: q + ":acknowledge", body: `{"lockTokens":["t1",""]}`, status: 400, want: []string{"lockTokens[1] is empty"}},
			// Over the limit is 413, as a definition or a publish over its limit is (it was 400).
			{name: "a body over 1 MB", path: q + ":acknowledge", body: `{"lockTokens":["t1"]` + strings.Repeat(" ", 1<<20) + `}`, status: 413, want: []string{"over the limit of 1048576 bytes", "at most 100 lock tokens"}},
			{name: "a null token", path: q + ":acknowledge", body: `{"lockTokens":["t1",null]}`, status: 400, want: []string{"lockTokens[1] is empty or null"}},
			// Failed tokens are repeated in the answer: a string longer than any lock token is
			// refused whole, so 100 of 10 KB do not make a 6 MB answer.
			{name: "a string longer than any lock token", path: q + ":acknowledge", body: `{"lockTokens":["t1","` + strings.Repeat("<", 257) + `"]}`, status: 400, want: []string{"lockTokens[1] is 257 bytes long", "at most 256"}},
			// A parameter the route reads is given once: url.Values.Get took the first.
			{name: "maxEvents repeated", path: q + ":receive?maxEvents=1&maxEvents=100", status: 400, want: []string{`query parameter "maxEvents" is given 2 times`, "give it once"}},
			{name: "maxEvents repeated with one value", path: q + ":receive?maxEvents=5&maxEvents=5", status: 400, want: []string{`"maxEvents" is given 2 times`}},
			{name: "maxWaitTime repeated", path: q + ":receive?maxWaitTime=10&maxEvents=2&maxWaitTime=120&maxWaitTime=60", status: 400, want: []string{`"maxWaitTime" is given 3 times`}},
			{name: "both repeated", path: q + ":receive?maxWaitTime=10&maxEvents=2&maxWaitTime=120&maxEvents=0", status: 400, want: []string{`"maxEvents" is given 2 times`, `"maxWaitTime" is given 2 times`}},
			{name: "releaseDelayInSeconds repeated", path: q + ":release?releaseDelayInSeconds=0&releaseDelayInSeconds=3600", body: tokens, status: 400, want: []string{`"releaseDelayInSeconds" is given 2 times`}},
			// url.Values dropped a pair whose escape is broken: the receive ran with its default.
			{name: "maxEvents with a broken escape", path: q + ":receive?maxEvents=%zz", status: 400, want: []string{`query parameter "maxEvents=%zz" does not parse`, "percent-encode"}},
			{name: "a broken escape in a parameter not read", path: q + ":release?releaseDelayInSeconds=10&x=%2", body: tokens, status: 400, want: []string{`"x=%2" does not parse`}},
			// A receive reads no body, but one over the settle limit is refused, not cut.
			{name: "a receive body over 1 MB", path: q + ":receive", body: strings.Repeat(" ", 1<<20+1), status: 413, want: []string{"over the limit of 1048576 bytes", "without a body"}},
			// encoding/json kept the last of a member sent twice, and put U+FFFD in a token
			// that is not UTF-8, which the answer repeated as failed: the client's token altered.
			{name: "lockTokens twice", path: q + ":acknowledge", body: `{"lockTokens":["t1"],"lockTokens":["t2"]}`, status: 400, want: []string{`"lockTokens": the member is sent twice`, "send it once"}},
			{name: "lockTokens twice in two cases", path: q + ":release", body: `{"lockTokens":["t1"],"LockTokens":["t2"]}`, status: 400, want: []string{`sent twice in one object, as "lockTokens" and "LockTokens"`}},
			{name: "a token not UTF-8", path: q + ":acknowledge", body: "{\"lockTokens\":[\"t1\",\"t\xff2\"]}", status: 400, want: []string{"not valid UTF-8 (byte 22 is not)", "send the lock token list as UTF-8 JSON"}},
			{name: "a token with half a surrogate pair", path: q + ":reject", body: `{"lockTokens":["t\ud800"]}`, status: 400, want: []string{`"lockTokens[0]" holds the escape \ud800`}},
			{name: "receive from a push subscription", path: "/topics/nsq/eventsubscriptions/psh:receive", status: 400, want: []string{`"psh"`, "deliveryMode Queue"}},
			{name: "settle on a push subscription", path: "/topics/nsq/eventsubscriptions/psh:acknowledge", body: tokens, status: 400, want: []string{`"psh"`, "deliveryMode Queue"}},
			{name: "unknown subscription", path: "/topics/nsq/eventsubscriptions/nope:receive", status: 404, want: []string{`"nope"`, "does not exist"}},
			{name: "unknown operation", path: q + ":peek", status: 404, want: []string{":receive, :acknowledge, :release, :reject, :renewLock"}},
			{name: "no operation", path: q, status: 404, want: []string{":receive"}},
			{name: "wrong key", path: q + ":receive", key: "d3Jvbmc=", status: 401, want: []string{"aeg-sas-key", "does not match"}},
			{name: "unknown topic without credentials (--insecure-dev)", path: "/topics/nope/eventsubscriptions/que:receive", key: "-", status: 404, want: []string{`"nope"`, "does not exist"}},
			{name: "unknown topic answers as a wrong key", path: "/topics/nope/eventsubscriptions/que:receive", key: "d3Jvbmc=", status: 401, want: []string{"does not match"}},
		}
		// One bubble for the table: t.Run cannot be called inside it.
		for _, tt := range tests {
			key := p.key
			switch tt.key {
			case "-":
				key = ""
			case "":
			default:
				key = tt.key
			}
			status, body := p.doKey(tt.path, tt.body, key)
			if status != tt.status {
				t.Errorf("%s: %d %s; want %d", tt.name, status, body, tt.status)
				continue
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == "" {
				t.Errorf("%s: body %s is not Event Grid's error shape", tt.name, body)
				continue
			}
			for _, w := range tt.want {
				if !strings.Contains(e.Error.Message, w) {
					t.Errorf("%s: message %q does not say %q", tt.name, e.Error.Message, w)
				}
			}
		}
	})
}

// A receive body up to the settle limit (1 MB) is read and dropped, whether its length is
// announced or not; one byte more is refused 413, and no event is handed out for it. A
// parameter the pull routes do not read (api-version) may be repeated.
func TestReceiveBodyBoundAndUnreadParameters(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		p := newPullRig(t, h)
		p.publish("e1", "e2")
		receive := func(size int) (int, string) {
			// Neither a Content-Length nor a reader whose length httptest can see: the body is
			// read to find its size.
			body := io.MultiReader(strings.NewReader(strings.Repeat(" ", size)))
			req := localRequest(http.MethodPost, "/topics/nsq/eventsubscriptions/que:receive?api-version=2023-11-01&api-version=2024-06-01", body)
			req.ContentLength = -1
			req.Header.Set("aeg-sas-key", p.key)
			rec := httptest.NewRecorder()
			p.api.ServeHTTP(rec, req)
			return rec.Code, rec.Body.String()
		}
		if status, body := receive(1<<20 + 1); status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "without a body") {
			t.Fatalf("a receive with a body of 1 MB + 1 byte: %d %s; want 413 saying to send no body", status, body)
		}
		if status, body := receive(1 << 20); status != http.StatusOK || !strings.Contains(body, `"id":"e1"`) {
			t.Fatalf("a receive with a body of 1 MB: %d %s; want 200 with event e1", status, body)
		}
		got := p.receive("api-version=2023-11-01")
		if len(got) != 1 || got[0].event.ID() != "e2" {
			t.Fatalf("a receive with api-version repeated got %v; want e2", ids(got))
		}
	})
}

// A :receive that passed its checks asks the poll bound for a slot under its event
// subscription's names as created, before it waits; it gives the slot back when it ends, and
// a poll the bound refuses gets the bound's answer and does not wait.
func TestReceiveAsksForASlotBeforeItWaits(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		p := newPullRig(t, h)
		var (
			mu               sync.Mutex
			admitted         []string
			released, refuse int
		)
		p.api.AdmitPolls(func(w http.ResponseWriter, queue string) (func(), bool) {
			mu.Lock()
			defer mu.Unlock()
			admitted = append(admitted, queue)
			if refuse > 0 {
				refuse--
				w.WriteHeader(http.StatusTooManyRequests)
				return nil, false
			}
			return func() { mu.Lock(); released++; mu.Unlock() }, true
		})
		answered := make(chan int, 1)
		go func() {
			status, _ := p.do("/topics/NSQ/eventsubscriptions/QUE:receive?maxWaitTime=10", "")
			answered <- status
		}()
		h.Advance(9 * time.Second)
		mu.Lock()
		if !slices.Equal(admitted, []string{"nsq/que"}) || released != 0 {
			t.Errorf("a waiting poll: admitted %v, released %d; want admitted once as nsq/que and not released", admitted, released)
		}
		refuse = 1
		mu.Unlock()
		if status, _ := p.do("/topics/nsq/eventsubscriptions/que:receive", ""); status != http.StatusTooManyRequests {
			t.Errorf("a poll the bound refused: %d, want its 429", status)
		}
		h.Advance(time.Second)
		if status := <-answered; status != http.StatusOK {
			t.Errorf("the poll at its maxWaitTime: %d", status)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(admitted) != 2 || released != 1 {
			t.Errorf("admitted %v, released %d; want 2 asked and the ended poll's slot given back", admitted, released)
		}
	})
}

// TestReceiveLongPollOutlivesTheServersReadTimeout runs a :receive through a real
// http.Server built by httpserver with one-second read timeouts: the long poll waits 20
// virtual seconds and still answers with the event published meanwhile, and EndPolls answers
// a waiting poll at once (as a shutdown does).
func TestReceiveLongPollOutlivesTheServersReadTimeout(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		p := newPullRig(t, h)
		ln := testkit.NewPipeListener()
		srv := httpserver.New(httpserver.Config{ReadHeaderTimeout: time.Second, BodyTimeout: time.Second}, p.api,
			httpserver.Requests{}, nil)
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		tr := &http.Transport{DialContext: ln.DialContext}
		client := &http.Client{Transport: tr}
		defer func() {
			tr.CloseIdleConnections()
			_ = srv.Close()
			<-served
		}()

		poll := func() <-chan string {
			out := make(chan string, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, "http://egrid/topics/nsq/eventsubscriptions/que:receive?maxEvents=5&maxWaitTime=120", http.NoBody)
				req.Header.Set("aeg-sas-key", p.key)
				resp, err := client.Do(req)
				if err != nil {
					out <- "error: " + err.Error()
					return
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				out <- fmt.Sprintf("%d %s", resp.StatusCode, raw)
			}()
			return out
		}

		answer := poll()
		h.Advance(20 * time.Second)
		select {
		case a := <-answer:
			t.Fatalf("the poll answered before any event: %s", a)
		default:
		}
		p.publish("late")
		a := <-answer
		if !strings.HasPrefix(a, "200 ") || !strings.Contains(a, `"id":"late"`) {
			t.Fatalf("a poll that waited past the read timeout: %s", a)
		}

		answer = poll()
		h.Advance(5 * time.Second)
		p.api.EndPolls()
		h.Settle()
		select {
		case a := <-answer:
			if a != `200 {"value":[]}` {
				t.Fatalf("a poll ended by EndPolls: %s", a)
			}
		default:
			t.Fatal("EndPolls did not end the waiting poll")
		}
	})
}

// TestQueueSubscriptionOverTheAdminAPI creates a queue subscription with Azure's ARM body
// (properties.deliveryConfiguration), reads it back, and checks that bad settings are refused
// naming the property.
func TestQueueSubscriptionOverTheAdminAPI(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	if status, out := adminDo(t, srv, "tok", "PUT", "/admin/topics/nsq", `{"properties":{"kind":"namespace"}}`); status != 201 {
		t.Fatalf("PUT topic: %d %v", status, out)
	}
	const arm = `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"receiveLockDurationInSeconds":120,"maxDeliveryCount":5,"eventTimeToLive":"PT1H"}},"eventDeliverySchema":"CloudEventSchemaV1_0"}}`
	if status, out := adminDo(t, srv, "tok", "PUT", "/admin/topics/nsq/eventSubscriptions/workers", arm); status != 201 {
		t.Fatalf("PUT queue subscription: %d %v", status, out)
	}
	status, out := adminDo(t, srv, "tok", "GET", "/admin/topics/nsq/eventSubscriptions/workers", "")
	if status != 200 {
		t.Fatalf("GET: %d %v", status, out)
	}
	dc, _ := json.Marshal(out["properties"].(map[string]any)["deliveryConfiguration"])
	if want := `{"deliveryMode":"Queue","queue":{"eventTimeToLive":"PT1H","maxDeliveryCount":5,"receiveLockDurationInSeconds":120}}`; string(dc) != want {
		t.Errorf("deliveryConfiguration read back as %s, want %s", dc, want)
	}

	bad := `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"receiveLockDurationInSeconds":30,"maxDeliveryCount":11,"eventTimeToLive":"P8D"}}}}`
	status, out = adminDo(t, srv, "tok", "PUT", "/admin/topics/nsq/eventSubscriptions/bad", bad)
	msg, _ := json.Marshal(out)
	if status != 400 {
		t.Fatalf("PUT with bad queue settings: %d %s", status, msg)
	}
	for _, w := range []string{"receiveLockDurationInSeconds", "maxDeliveryCount", "eventTimeToLive"} {
		if !strings.Contains(string(msg), w) {
			t.Errorf("the error %s does not name %s", msg, w)
		}
	}
	status, out = adminDo(t, srv, "tok", "PUT", "/admin/topics/nsq/eventSubscriptions/bad", `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{"lockDuration":60}}}}`)
	if msg, _ := json.Marshal(out); status != 400 || !strings.Contains(string(msg), "lockDuration") {
		t.Errorf("a misspelt queue property: %d %s", status, msg)
	}

	// Without --insecure-dev a pull needs the topic key, and an unknown topic answers as a
	// known one does.
	for _, path := range []string{"/topics/nsq/eventsubscriptions/workers:receive", "/topics/nope/eventsubscriptions/workers:receive"} {
		status, out := adminDo(t, srv, "", "POST", path, "")
		if msg, _ := json.Marshal(out); status != 401 || !strings.Contains(string(msg), "no credentials") {
			t.Errorf("POST %s without a key: %d %s", path, status, msg)
		}
	}
}

// closeNotingListener is a testkit.PipeListener whose server-side connections report their Close.
type closeNotingListener struct {
	*testkit.PipeListener
	closed chan struct{} // closed when the first accepted connection is closed
	once   sync.Once
}

func (l *closeNotingListener) Accept() (net.Conn, error) {
	c, err := l.PipeListener.Accept()
	if err != nil {
		return nil, err
	}
	return &closeNotingConn{Conn: c, l: l}, nil
}

type closeNotingConn struct {
	net.Conn
	l *closeNotingListener
}

func (c *closeNotingConn) Close() error {
	c.l.once.Do(func() { close(c.l.closed) })
	return c.Conn.Close()
}

// TestReceiveAnswerToAConsumerThatDoesNotReadIsBounded: a :receive answer (up to 100 events of
// 1 MB, held in memory until written) must be read within a bounded time, or the server gives
// up the connection; otherwise a consumer that stops reading holds the answer, the handler
// and the connection for ever.
func TestReceiveAnswerToAConsumerThatDoesNotReadIsBounded(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		p := newPullRig(t, h)
		var ids []string
		for i := range 60 {
			ids = append(ids, fmt.Sprintf("e%02d", i))
		}
		p.publish(ids...)
		ln := &closeNotingListener{PipeListener: testkit.NewPipeListener(), closed: make(chan struct{})}
		srv := httpserver.New(httpserver.Config{ReadHeaderTimeout: time.Second, BodyTimeout: time.Second}, p.api,
			httpserver.Requests{}, nil)
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer func() {
			_ = srv.Close()
			<-served
		}()

		// A consumer that sends a :receive and never reads the answer.
		c, err := ln.DialContext(context.Background(), "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "POST /topics/nsq/eventsubscriptions/que:receive?maxEvents=50&maxWaitTime=10 HTTP/1.1\r\nHost: egrid\r\naeg-sas-key: %s\r\nContent-Length: 0\r\n\r\n", p.key); err != nil {
			t.Fatal(err)
		}
		h.Advance(10 * time.Minute)
		select {
		case <-ln.closed:
		default:
			t.Fatal("10 minutes on, the server still holds the answer of a consumer that does not read it")
		}
	})
}

// TestReceiveAnswerToASlowSteadyReaderIsWhole: a consumer that keeps reading a large :receive
// answer gets all of it, however long it takes within the answer's overall bound, as long as
// it takes in each 64 KiB within a minute (README "Reliability"). The answer had one flat
// minute in all: a consumer reading 32 KiB every 10 s was cut off after a minute, at 192 KiB
// of a 1 MB answer, and its events came back only when their locks expired.
func TestReceiveAnswerToASlowSteadyReaderIsWhole(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		p := newPullRig(t, h)
		pad := strings.Repeat("x", 25<<10)
		var evs []string
		for i := range 40 {
			evs = append(evs, fmt.Sprintf(`{"specversion":"1.0","id":"e%02d","source":"/orders","type":"Order.Created","data":{"pad":%q}}`, i, pad))
		}
		req := httptest.NewRequest(http.MethodPost, "/topics/nsq:publish?api-version=2023-11-01", strings.NewReader("["+strings.Join(evs, ",")+"]"))
		req.Header.Set("Content-Type", "application/cloudevents-batch+json; charset=utf-8")
		req.Header.Set("aeg-sas-key", p.key)
		rec := httptest.NewRecorder()
		p.api.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("publish: %d %s", rec.Code, rec.Body)
		}
		h.Settle()

		ln := testkit.NewPipeListener()
		srv := httpserver.New(httpserver.Config{ReadHeaderTimeout: time.Second, BodyTimeout: time.Second}, p.api,
			httpserver.Requests{}, nil)
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer func() {
			_ = srv.Close()
			<-served
		}()
		c, err := ln.DialContext(context.Background(), "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "POST /topics/nsq/eventsubscriptions/que:receive?maxEvents=40&maxWaitTime=10 HTTP/1.1\r\nHost: egrid\r\naeg-sas-key: %s\r\nContent-Length: 0\r\n\r\n", p.key); err != nil {
			t.Fatal(err)
		}
		// 32 KiB every 10 s: 64 KiB in 20 s, the 1 MB answer in about 5 minutes.
		var got bytes.Buffer
		buf := make([]byte, 32<<10)
		end := []byte("]}\r\n0\r\n\r\n") // the last chunk of the answer
	reading:
		for range 1000 {
			<-time.After(10 * time.Second)
			for n := 0; n < len(buf); {
				m, err := c.Read(buf[n:])
				got.Write(buf[n : n+m])
				n += m
				if err != nil || bytes.HasSuffix(got.Bytes(), end) {
					break reading
				}
			}
		}
		resp, err := http.ReadResponse(bufio.NewReader(&got), nil)
		if err != nil {
			t.Fatalf("reading the answer (%d bytes taken in): %v", got.Len(), err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("the answer was cut after %d bytes of body: %v", len(body), err)
		}
		var res struct {
			Value []json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(body, &res); err != nil || len(res.Value) != 40 {
			t.Fatalf("answer of %d bytes holds %d events (%v), want all 40", len(body), len(res.Value), err)
		}
	})
}
