package httpserver

import (
	"fmt"
	"net/http"
	"sync"
)

// LimitPolls serves at most n of the long polls poll selects at once, and at most half of n
// (at least 1) of those waiting on one queue, the key poll returns (the other requests pass
// freely). The first bound protects the process: every waiting poll holds a goroutine, a
// waiter in the router and a connection (HTTP/1) or stream (HTTP/2) for up to 120 s. The
// second keeps one event subscription's consumers from taking every slot from another's.
//
// A poll over either bound is not queued: it is answered at once 429 Too Many Requests with
// Retry-After: 1 and an Event Grid error body saying which bound it met and what to do. Azure
// documents no bound on concurrent receive calls; it throttles a namespace by throughput unit
// ("Event egress (push and pull APIs): up to 2,000 events per second or 2 MB per second per
// TU", learn.microsoft.com/azure/event-grid/quotas-limits) and answers a throttled call 429,
// which the Azure SDKs retry. The connection is kept: a poll has no body left to read. n must
// be positive.
func LimitPolls(h http.Handler, n int, poll func(*http.Request) (queue string, ok bool)) http.Handler {
	if n <= 0 {
		panic("httpserver: LimitPolls needs a positive limit")
	}
	l := &pollLimit{n: n, share: max(1, n/2), per: make(map[string]int)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queue, ok := poll(r)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		if msg := l.acquire(queue); msg != "" {
			write429(w, msg)
			return
		}
		defer l.release(queue)
		h.ServeHTTP(w, r)
	})
}

// pollLimit counts the polls in progress, in all and per queue.
type pollLimit struct {
	n, share int
	mu       sync.Mutex
	total    int
	per      map[string]int // queues with polls in progress only: bounded by n
}

// acquire takes a slot for a poll on queue, or says why there is none.
func (l *pollLimit) acquire(queue string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= l.n:
		return fmt.Sprintf("the server has %d receive long polls waiting already, its limit: retry after the Retry-After delay, or raise the limit (egrid serve --max-receive-polls, server.maxReceivePolls)", l.n)
	case l.per[queue] >= l.share:
		return fmt.Sprintf("event subscription %s has %d receive long polls waiting already, the most one event subscription may hold (half of the server's %d): retry after the Retry-After delay, have fewer consumers wait at once, or raise the server's limit (egrid serve --max-receive-polls, server.maxReceivePolls)", queue, l.share, l.n)
	}
	l.total++
	l.per[queue]++
	return ""
}

func (l *pollLimit) release(queue string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.per[queue]--; l.per[queue] == 0 {
		delete(l.per, queue)
	}
}
