package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
)

// stuckClient is the answer side of a :receive whose consumer does not read: each write
// blocks until the test lets the client go (free: the write fails, as on a closed
// connection) or, with deadlines, until the write deadline the handler set passes.
type stuckClient struct {
	header    http.Header
	deadlines bool
	free      chan struct{} // closed: writes fail at once
	wrote     chan struct{} // closed at the first write: the poll got its answer
	once      sync.Once
	freeOnce  sync.Once

	mu       sync.Mutex
	deadline time.Time
}

func newStuckClient(deadlines bool) *stuckClient {
	return &stuckClient{header: http.Header{}, deadlines: deadlines, free: make(chan struct{}), wrote: make(chan struct{})}
}

func (c *stuckClient) Header() http.Header { return c.header }
func (c *stuckClient) WriteHeader(int)     {}

func (c *stuckClient) Write(p []byte) (int, error) {
	c.once.Do(func() { close(c.wrote) })
	var timeout <-chan time.Time
	if c.deadlines {
		c.mu.Lock()
		if !c.deadline.IsZero() {
			timeout = time.After(time.Until(c.deadline))
		}
		c.mu.Unlock()
	}
	select {
	case <-c.free:
		return 0, errors.New("connection closed")
	case <-timeout:
		return 0, os.ErrDeadlineExceeded
	}
}

func (c *stuckClient) FlushError() error { _, err := c.Write(nil); return err }

func (c *stuckClient) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

// leave makes the client go away: its writes fail.
func (c *stuckClient) leave() { c.freeOnce.Do(func() { close(c.free) }) }

func (c *stuckClient) answered() bool {
	select {
	case <-c.wrote:
		return true
	default:
		return false
	}
}

// budgetQueue makes a router bounding receive answers at budget bytes, with queue
// subscription nsq/que holding n events of about size bytes each, and returns it, its API,
// the topic key and the events' exact size.
func budgetQueue(t *testing.T, budget int64, n, size int) (*router.Router, *httpapi.API, string, int) {
	t.Helper()
	r, err := router.New(router.Config{AdminToken: fuzzToken, SkipEndpointValidation: true, MaxReceiveAnswerBytes: budget}, router.Deps{HTTPClient: noNetwork})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	ctx := context.Background()
	spec, err := r.CreateTopic(ctx, "nsq", router.TopicSpec{Kind: router.KindNamespace})
	if err != nil {
		t.Fatal(err)
	}
	queue := router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}}
	if err := r.CreateSubscription(ctx, "nsq", "que", queue); err != nil {
		t.Fatal(err)
	}
	exact := 0
	for i := range n {
		ev := fmt.Appendf(nil, `{"specversion":"1.0","id":"e%03d","source":"/s","type":"T","data":"%s"}`, i, strings.Repeat("x", size))
		exact = len(ev)
		if err := r.Publish(ctx, "nsq", json.RawMessage(ev)); err != nil {
			t.Fatal(err)
		}
	}
	return r, httpapi.New(r), spec.Key1, exact
}

// poll serves one :receive of up to 100 events into c, as a client sends it; done is closed
// when the handler has returned.
func poll(ctx context.Context, api *httpapi.API, key string, c http.ResponseWriter) (done chan struct{}) {
	done = make(chan struct{})
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/topics/nsq/eventsubscriptions/que:receive?maxEvents=100&maxWaitTime=120", nil)
	req.Header.Set("Aeg-Sas-Key", key)
	go func() {
		defer close(done)
		api.ServeHTTP(c, req)
	}()
	return done
}

// TestReceiveAnswersStayWithinTheBudget opens eight polls of up to 100 big events each, whose
// consumer reads none of its answers: the answers held stay within the router's budget (plus
// one event), the events beyond are not locked (they are not handed out and stay available),
// and a poll waiting for bytes gets its events as soon as an answer is done with. Before the
// budget every poll took what was available: all twenty events, held for up to 10 minutes.
func TestReceiveAnswersStayWithinTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 350 << 10
		r, api, key, size := budgetQueue(t, budget, 20, 100<<10)
		ctx := context.Background()
		clients := make([]*stuckClient, 8)
		done := make([]chan struct{}, len(clients))
		for i := range clients {
			clients[i] = newStuckClient(false)
			done[i] = poll(ctx, api, key, clients[i])
		}
		defer func() { // every handler ends, whatever the test found
			for i, c := range clients {
				c.leave()
				<-done[i]
			}
		}()
		synctest.Wait()

		// check checks the bytes held, and that the events locked are those handed out:
		// earlier answers' (locked until settled or their lock ends) and the one held.
		check := func(when string, answers int) {
			t.Helper()
			held, limit := r.ReceiveAnswerBytes()
			if limit != budget || held > budget+int64(size) {
				t.Errorf("%s: %d bytes of answers held (limit %d); want at most the budget %d plus one event of %d", when, held, limit, budget, size)
			}
			st, err := r.Status(ctx, "nsq", "que")
			if err != nil {
				t.Fatal(err)
			}
			if want := answers * (budget / size); st.InFlight != want {
				t.Errorf("%s: %d events locked; want %d, those of the answers the budget covered (the others stay available)", when, st.InFlight, want)
			}
		}
		check("eight polls waiting", 1)
		var first int
		answered := 0
		for i, c := range clients {
			if c.answered() {
				first, answered = i, answered+1
			}
		}
		if answered != 1 {
			t.Fatalf("%d polls got events; want 1, the others waiting for bytes of the budget", answered)
		}

		// The first consumer goes away: its answer's bytes come back, and the next poll
		// gets the next events at once.
		clients[first].leave()
		<-done[first]
		synctest.Wait()
		answered = 0
		for i, c := range clients {
			if i != first && c.answered() {
				answered++
			}
		}
		if answered != 1 {
			t.Fatalf("after the first answer was done with, %d more polls got events; want 1, at once", answered)
		}
		check("the second answer held", 2)

		for i, c := range clients {
			c.leave()
			<-done[i]
		}
		if held, _ := r.ReceiveAnswerBytes(); held != 0 {
			t.Errorf("%d bytes still held after every poll ended; want 0", held)
		}
	})
}

// TestReceiveAnswerBytesComeBack runs a receive's answer to each of its ends — its write fails,
// times out, or its client went away before it — and checks that its bytes of the budget come
// back as the handler returns, so that later polls are not refused for an answer nobody holds.
func TestReceiveAnswerBytesComeBack(t *testing.T) {
	for _, c := range []struct {
		name string
		// serve runs the receive through api, as a client with key does.
		serve func(t *testing.T, api *httpapi.API, key string)
	}{
		{"write fails", func(t *testing.T, api *httpapi.API, key string) {
			c := newStuckClient(false)
			c.leave()
			<-poll(context.Background(), api, key, c)
			if !c.answered() {
				t.Fatal("the poll wrote nothing")
			}
		}},
		{"write times out", func(t *testing.T, api *httpapi.API, key string) {
			c := newStuckClient(true)
			start := time.Now()
			<-poll(context.Background(), api, key, c)
			if !c.answered() {
				t.Fatal("the poll wrote nothing")
			}
			if waited := time.Since(start); waited < time.Minute {
				t.Fatalf("the stalled answer ended after %v; want its write deadline, a minute", waited)
			}
		}},
		{"client gone before the answer", func(t *testing.T, api *httpapi.API, key string) {
			ctx, gone := context.WithCancel(context.Background())
			defer httpapi.SetAfterReceive(func(*http.Request) { gone() })()
			c := newStuckClient(false)
			<-poll(ctx, api, key, c)
			if c.answered() {
				t.Fatal("the gone client's poll wrote an answer")
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, api, key, size := budgetQueue(t, 1, 3, 10<<10)
				c.serve(t, api, key)
				if held, _ := r.ReceiveAnswerBytes(); held != 0 {
					t.Fatalf("%d bytes held after the handler returned; want 0", held)
				}
				// A budget of one byte hands out one event when nothing is held: the next
				// receive gets one at once.
				start := time.Now()
				evs, err := r.Receive(context.Background(), "nsq", "que", router.ReceiveOptions{MaxEvents: 100, MaxWait: router.MinReceiveWait})
				if err != nil || len(evs) != 1 || len(evs[0].Event) != size || time.Since(start) != 0 {
					t.Fatalf("next receive: %d events after %v, %v; want one at once", len(evs), time.Since(start), err)
				}
			})
		})
	}
}
