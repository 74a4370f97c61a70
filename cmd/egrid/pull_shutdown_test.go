package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/testkit"
)

// TestShutdownAnswersLongPolls shuts the main server down while a consumer's :receive waits
// (maxWaitTime 120 s): the poll is answered at once with no events, and the shutdown ends
// without waiting for it.
func TestShutdownAnswersLongPolls(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue("ns-orders", "workers", router.QueueInfo{})
		api := httpapi.New(h.Router())
		srv := mainServer(httpserver.Config{}, api, api, h.Router(), nil)
		ln := testkit.NewPipeListener()
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		client := &http.Client{Transport: &http.Transport{DialContext: ln.DialContext}}

		answer := make(chan string, 1)
		go func() {
			resp, err := client.Post("http://localhost/topics/ns-orders/eventsubscriptions/workers:receive?maxWaitTime=120", "application/json", http.NoBody)
			if err != nil {
				answer <- "error: " + err.Error()
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			answer <- resp.Status + " " + string(raw)
		}()
		h.Advance(5 * time.Second) // the poll is waiting in the server
		select {
		case a := <-answer:
			t.Fatalf("the poll answered before the shutdown: %s", a)
		default:
		}

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		// net/http's Shutdown looks for idle connections at growing intervals from 1 ms: a
		// second of virtual time is far more than that and far less than the poll's 120 s.
		if waited := time.Since(start); waited > time.Second {
			t.Errorf("the shutdown waited %v of virtual time for the poll", waited)
		}
		if a := <-answer; a != `200 OK {"value":[]}` {
			t.Errorf("the waiting poll was answered %q", a)
		}
		if err := <-served; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
}
