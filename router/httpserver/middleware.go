package httpserver

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// BodyLimit bounds the requests with bodies served at once ([Config.MaxPublishBodies]), and so
// the bodies in memory. It is safe for concurrent use.
//
// The handler that serves the requests takes a slot with [BodyLimit.Admit] once a request
// has passed the checks that need no body — authentication, and that its topic exists — and
// is about to read its body, not when the request arrives: a request answered without its
// body (wrong credentials, an unknown topic) never holds a slot. A flood of requests without
// the topic key, each waiting meanwhile for its topic to be looked up (in cluster mode a
// read of the cluster's store), then takes no slot from the publishers that have the key,
// and each is answered 401, not 429 (httpapi.API.AdmitBodies takes Admit). [LimitBodies]
// takes the slot on arrival instead, for a handler that does not admit its requests itself.
type BodyLimit struct {
	sem  chan struct{}
	wait time.Duration
}

// NewBodyLimit returns a bound of n requests with bodies served at once, a request waiting
// up to wait for a slot ([Config.PublishWait]). n must be positive.
func NewBodyLimit(n int, wait time.Duration) *BodyLimit {
	if n <= 0 {
		panic("httpserver: NewBodyLimit needs a positive limit")
	}
	return &BodyLimit{sem: make(chan struct{}, n), wait: wait}
}

// Admit takes a slot for r, about to read its body, waiting up to the limit's wait for one.
// When none comes free it answers w 429 Too Many Requests with Retry-After: 1 and an Event
// Grid error body, as Event Grid answers when it sheds load (SPEC §1.1), closing the
// connection (the body was not read), and returns ok false: w must not be written again.
// When r's client goes away while it waits, it returns ok false without an answer. Otherwise
// the caller calls release once, when it is done with the body.
func (l *BodyLimit) Admit(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	select {
	case l.sem <- struct{}{}:
	default:
		t := time.NewTimer(l.wait)
		select {
		case l.sem <- struct{}{}:
			t.Stop()
		case <-t.C:
			tooManyRequests(w, cap(l.sem))
			return nil, false
		case <-r.Context().Done():
			t.Stop()
			return nil, false
		}
	}
	return func() { <-l.sem }, true
}

// LimitBodies serves at most n of the requests match selects at once (the others pass
// freely), taking each one's slot ([BodyLimit.Admit]) as it arrives: a selected request waits
// up to wait for a slot, then is answered 429 Too Many Requests with Retry-After: 1 and an
// Event Grid error body, and its connection is closed (its body was not read). A request
// whose client goes away while it waits gets no answer. n must be positive. A handler that
// can refuse requests before reading their bodies should take its slots itself with a
// [BodyLimit] instead, after those checks.
func LimitBodies(h http.Handler, n int, wait time.Duration, match func(*http.Request) bool) http.Handler {
	if n <= 0 {
		panic("httpserver: LimitBodies needs a positive limit")
	}
	l := NewBodyLimit(n, wait)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !match(r) {
			h.ServeHTTP(w, r)
			return
		}
		release, ok := l.Admit(w, r)
		if !ok {
			return
		}
		defer release()
		h.ServeHTTP(w, r)
	})
}

// tooManyRequests writes Event Grid's error body with status 429.
func tooManyRequests(w http.ResponseWriter, n int) {
	// Close the connection after the answer: otherwise net/http would read on (up to 256 KB of
	// the unread body) before reusing it, and a slow client would keep it until its deadline.
	w.Header().Set("Connection", "close")
	write429(w, "the server is serving "+strconv.Itoa(n)+" publish requests already; nothing of this request was accepted: retry after the Retry-After delay")
}

// write429 answers 429 with Retry-After: 1 and Event Grid's error body carrying msg.
func write429(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusTooManyRequests, "TooManyRequests", msg)
}

// writeError answers status with Event Grid's error body, in the shape every answer of the
// API has: code, msg, and one detail repeating them.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	type detail struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	type body struct {
		Code    string   `json:"code"`
		Message string   `json:"message"`
		Details []detail `json:"details"`
	}
	_ = json.NewEncoder(w).Encode(struct {
		Error body `json:"error"`
	}{body{Code: code, Message: msg, Details: []detail{{Code: code, Message: msg}}}})
}
