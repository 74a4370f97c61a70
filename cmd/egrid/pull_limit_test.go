package main

import (
	"context"
	"io"
	"net"
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
		srv := mainServer(httpserver.Config{MaxReceivePolls: 4}, api, api, nil)
		ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer srv.Close() // on a failure, ends the polls still waiting
		tr := &http.Transport{DialContext: ln.dial}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}

		answers := make(chan string, 16)
		poll := func(sub, wait string) {
			resp, err := client.Post("http://egrid/topics/ns-orders/eventsubscriptions/"+sub+":receive?maxWaitTime="+wait, "application/json", http.NoBody)
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

// TestReceivePollSelectsPollsBySubscription checks which requests the long-poll limit counts,
// and under which subscription.
func TestReceivePollSelectsPollsBySubscription(t *testing.T) {
	for _, tt := range []struct {
		method, path string
		want         string
		ok           bool
	}{
		{method: http.MethodPost, path: "/topics/orders/eventsubscriptions/workers:receive", want: "orders/workers", ok: true},
		{method: http.MethodPost, path: "/topics/Orders/eventsubscriptions/Workers:Receive", want: "orders/workers", ok: true},
		{method: http.MethodPost, path: "/topics/orders/eventsubscriptions/workers:acknowledge"},
		{method: http.MethodPost, path: "/topics/orders:publish"},
		{method: http.MethodGet, path: "/topics/orders/eventsubscriptions/workers:receive"},
		{method: http.MethodPost, path: "/admin/topics/orders/eventSubscriptions/workers:receive"},
	} {
		req, _ := http.NewRequest(tt.method, "http://egrid"+tt.path, nil)
		if got, ok := receivePoll(req); got != tt.want || ok != tt.ok {
			t.Errorf("receivePoll(%s %s) = %q, %v; want %q, %v", tt.method, tt.path, got, ok, tt.want, tt.ok)
		}
	}
}
