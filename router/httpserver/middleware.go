package httpserver

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// LimitBodies serves at most n of the requests match selects at once (the others pass
// freely): a selected request waits up to wait for a slot, then is answered 429 Too Many
// Requests with Retry-After: 1 and an Event Grid error body, as Event Grid answers when it
// sheds load (SPEC §1.1), and its connection is closed (its body was not read). A request whose client goes away while it waits gets no answer. n
// must be positive.
func LimitBodies(h http.Handler, n int, wait time.Duration, match func(*http.Request) bool) http.Handler {
	if n <= 0 {
		panic("httpserver: LimitBodies needs a positive limit")
	}
	sem := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !match(r) {
			h.ServeHTTP(w, r)
			return
		}
		select {
		case sem <- struct{}{}:
		default:
			t := time.NewTimer(wait)
			select {
			case sem <- struct{}{}:
				t.Stop()
			case <-t.C:
				tooManyRequests(w, n)
				return
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		defer func() { <-sem }()
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
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusTooManyRequests)
	type body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	_ = json.NewEncoder(w).Encode(struct {
		Error body `json:"error"`
	}{body{Code: "TooManyRequests", Message: msg}})
}
