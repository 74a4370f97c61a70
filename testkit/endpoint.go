package testkit

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Response is what a scripted endpoint answers one attempt with.
type Response struct {
	Status int
	Header http.Header
	Body   string
	// Hang makes the endpoint never answer: the attempt ends when the sink's timeout expires.
	Hang bool
}

// Behavior scripts an endpoint: given the 0-based number of the attempt at this endpoint and
// the request (whose body it may read), it returns the response.
type Behavior func(n int, r *http.Request) Response

// Always answers every attempt with status.
func Always(status int) Behavior {
	return func(int, *http.Request) Response { return Response{Status: status} }
}

// FailFirst answers the first n attempts with status and every later one with 200.
func FailFirst(n, status int) Behavior {
	return func(i int, _ *http.Request) Response {
		if i < n {
			return Response{Status: status}
		}
		return Response{Status: http.StatusOK}
	}
}

// Sequence answers attempt i with statuses[i], and later attempts with the last status.
func Sequence(statuses ...int) Behavior {
	return func(i int, _ *http.Request) Response {
		return Response{Status: statuses[min(i, len(statuses)-1)]}
	}
}

// RetryAfter answers every attempt with status and a Retry-After header of d (in seconds).
func RetryAfter(status int, d time.Duration) Behavior {
	return func(int, *http.Request) Response {
		return Response{Status: status, Header: http.Header{"Retry-After": {strconv.Itoa(int(d / time.Second))}}}
	}
}

// RejectEvents answers status to every request that carries one of the event ids (a poison
// event) and 200 to the others, so the endpoint stays healthy while those events fail.
func RejectEvents(status int, ids ...string) Behavior {
	return func(_ int, r *http.Request) Response {
		body, _ := io.ReadAll(r.Body)
		for _, id := range (Attempt{Body: body}).EventIDs() {
			if slices.Contains(ids, id) {
				return Response{Status: status}
			}
		}
		return Response{Status: http.StatusOK}
	}
}

// Hang never answers, so every attempt times out.
func Hang() Behavior {
	return func(int, *http.Request) Response { return Response{Hang: true} }
}

// Attempt is one request an endpoint received.
type Attempt struct {
	// At is the virtual time since the harness started.
	At     time.Duration
	Header http.Header
	Body   []byte
	Status int // what the endpoint answered (0 when it hung)
}

// EventIDs returns the ids of the events in the attempt's body (an Event Grid or CloudEvents
// array, or a single CloudEvent).
func (a Attempt) EventIDs() []string {
	var many []struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(a.Body, &many) == nil {
		ids := make([]string, len(many))
		for i, e := range many {
			ids[i] = e.ID
		}
		return ids
	}
	var one struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(a.Body, &one) == nil && one.ID != "" {
		return []string{one.ID}
	}
	return nil
}

// Endpoint is a scripted in-memory webhook endpoint.
type Endpoint struct {
	name     string
	h        *Harness
	behavior Behavior
	mu       sync.Mutex
	attempts []Attempt
}

// URL is the endpoint's URL, for a subscription's endpointUrl.
func (e *Endpoint) URL() string { return "http://" + e.name + ".test/api/events" }

// ServeHTTP implements http.Handler.
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	n := len(e.attempts)
	e.attempts = append(e.attempts, Attempt{At: e.h.Elapsed(), Header: r.Header.Clone(), Body: body})
	e.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	resp := e.behavior(n, r)
	if resp.Hang {
		<-r.Context().Done()
		return
	}
	e.mu.Lock()
	e.attempts[n].Status = resp.Status
	e.mu.Unlock()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.Status)
	_, _ = io.WriteString(w, resp.Body)
}

// Attempts returns a copy of the attempts received so far.
func (e *Endpoint) Attempts() []Attempt {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.attempts)
}

// RequireAttempts fails the test unless the endpoint received exactly n attempts.
func (e *Endpoint) RequireAttempts(t testing.TB, n int) {
	t.Helper()
	if got := len(e.Attempts()); got != n {
		t.Fatalf("endpoint %s received %d attempts, want %d", e.name, got, n)
	}
}

// Delivered returns the ids of events in attempts the endpoint answered with 200-204, in order.
func (e *Endpoint) Delivered() []string {
	var ids []string
	for _, a := range e.Attempts() {
		if a.Status >= 200 && a.Status <= 204 {
			ids = append(ids, a.EventIDs()...)
		}
	}
	return ids
}
