package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/testkit"
)

// TestReceivePollsBeyondTheLimitAre429 runs the main server with --max-receive-polls 4: a
// subscription's consumers hold at most 2 waiting polls, the server at most 4; a poll over
// either bound is answered 429 at once while the others keep waiting, and a poll that ends
// frees its slot.
func TestReceivePollsBeyondTheLimitAre429(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		for _, sub := range []string{"workers", "audit", "billing"} {
			h.SubscribeQueue("ns-orders", sub, router.QueueInfo{})
		}
		api := httpapi.New(h.Router())
		srv := mainServer(httpserver.Config{MaxReceivePolls: 4}, api, api, h.Router(), nil)
		ln := testkit.NewPipeListener()
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer srv.Close() // on a failure, ends the polls still waiting
		tr := &http.Transport{DialContext: ln.DialContext}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}

		answers := make(chan string, 16)
		poll := func(sub, wait string) {
			resp, err := client.Post("http://localhost/topics/ns-orders/eventsubscriptions/"+sub+":receive?maxWaitTime="+wait, "application/json", http.NoBody)
			if err != nil {
				answers <- sub + " error: " + err.Error()
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			answers <- sub + " " + resp.Status + " " + resp.Header.Get("Retry-After") + " " + string(raw)
		}
		waiting := func(what string) {
			t.Helper()
			h.Advance(time.Second)
			select {
			case a := <-answers:
				t.Fatalf("%s: a poll was answered instead of waiting: %s", what, a)
			default:
			}
		}
		shed := func(sub, want string) {
			t.Helper()
			go poll(sub, "120")
			h.Advance(0) // answered with no time passing
			select {
			case a := <-answers:
				if !strings.HasPrefix(a, sub+" 429 Too Many Requests 1 ") || !strings.Contains(a, `"code":"TooManyRequests"`) ||
					!strings.Contains(a, want) || !strings.Contains(a, "--max-receive-polls") {
					t.Fatalf("a poll over the bound was answered %s", a)
				}
			default:
				t.Fatalf("a poll of %s over the bound was not answered at once", sub)
			}
		}

		go poll("workers", "10")
		go poll("Workers", "10") // names match ignoring case, in the limit too
		waiting("two polls of workers")
		shed("WORKERS", "event subscription ns-orders/workers has 2 receive long polls waiting already")
		go poll("audit", "120")
		go poll("audit", "120")
		waiting("two polls of workers and two of audit")
		shed("billing", "the server has 4 receive long polls waiting already")

		h.Advance(8 * time.Second) // workers' polls end empty after their 10 s
		for range 2 {
			if a := <-answers; !strings.HasPrefix(a, "workers 200 OK") && !strings.HasPrefix(a, "Workers 200 OK") {
				t.Fatalf("a poll of workers at its maxWaitTime: %s", a)
			}
		}
		go poll("billing", "120")
		go poll("workers", "120")
		waiting("polls in the freed slots")
		shed("billing", "the server has 4")

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		for range 4 {
			if a := <-answers; !strings.Contains(a, " 200 OK ") {
				t.Errorf("a waiting poll at the shutdown: %s", a)
			}
		}
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
}

// TestReceivePollsTakeSlotsOnlyOnceAuthenticated runs the main server with
// --max-receive-polls 2, both slots held by consumers with the topic key. A poll with a wrong
// key is answered 401, not 429, and the polls that fail another check at once get their own
// answers too: they take no slot, so requests without the key can neither fill the bound nor
// keep a consumer with the key out of a free slot. A poll with the key still meets the bound.
func TestReceivePollsTakeSlotsOnlyOnceAuthenticated(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue("ns-orders", "workers", router.QueueInfo{})
		h.SubscribeQueue("ns-orders", "audit", router.QueueInfo{})
		h.Subscribe("ns-orders", "push", router.SubscriptionSpec{Destination: router.WebHook(h.Endpoint("hook").URL())})
		spec, err := h.Router().Topic("ns-orders")
		if err != nil {
			t.Fatal(err)
		}
		const wrong = "d3Jvbmc="
		api := httpapi.New(h.Router())
		srv := mainServer(httpserver.Config{MaxReceivePolls: 2}, api, api, h.Router(), nil)
		ln := testkit.NewPipeListener()
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer srv.Close() // on a failure, ends the polls still waiting
		tr := &http.Transport{DialContext: ln.DialContext}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}

		answers := make(chan string, 16)
		poll := func(op, key string) {
			req, _ := http.NewRequest(http.MethodPost, "http://localhost/topics/ns-orders/eventsubscriptions/"+op, http.NoBody)
			req.Header.Set("aeg-sas-key", key)
			resp, err := client.Do(req)
			if err != nil {
				answers <- op + " error: " + err.Error()
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			answers <- op + " " + resp.Status + " " + string(raw)
		}
		waiting := func(what string) {
			t.Helper()
			h.Advance(time.Second)
			select {
			case a := <-answers:
				t.Fatalf("%s: a poll was answered instead of waiting: %s", what, a)
			default:
			}
		}
		atOnce := func(op, key, want string) {
			t.Helper()
			go poll(op, key)
			h.Advance(0) // answered with no time passing
			select {
			case a := <-answers:
				if !strings.HasPrefix(a, op+" "+want) {
					t.Fatalf("%s: answered %s, want %s", op, a, want)
				}
			default:
				t.Fatalf("%s was not answered at once", op)
			}
		}

		go poll("workers:receive?maxWaitTime=10", spec.Key1)
		go poll("audit:receive?maxWaitTime=120", spec.Key1)
		waiting("a poll of workers and one of audit")
		atOnce("workers:receive", wrong, "401 Unauthorized")
		atOnce("workers:receive?maxEvents=0", spec.Key1, "400 Bad Request")
		atOnce("push:receive", spec.Key1, "400 Bad Request")
		atOnce("nope:receive", spec.Key1, "404 Not Found")
		atOnce("billing:receive", spec.Key1, "404 Not Found")
		atOnce("audit:receive", spec.Key1, "429 Too Many Requests") // the bound holds

		h.Advance(9 * time.Second) // workers' poll ends empty after its 10 s: a slot is free
		if a := <-answers; !strings.HasPrefix(a, "workers:receive?maxWaitTime=10 200 OK") {
			t.Fatalf("the poll of workers at its maxWaitTime: %s", a)
		}
		for range 3 {
			atOnce("workers:receive?maxWaitTime=120", wrong, "401 Unauthorized")
		}
		go poll("workers:receive?maxWaitTime=120", spec.Key1)
		waiting("a poll with the key after polls with a wrong one")

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		for range 2 {
			if a := <-answers; !strings.Contains(a, " 200 OK ") {
				t.Errorf("a waiting poll at the shutdown: %s", a)
			}
		}
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
}
