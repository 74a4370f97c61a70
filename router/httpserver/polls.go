package httpserver

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// PollLimit bounds the long polls waiting at once: at most n in all, and at most half of n
// (at least 1) waiting on one queue. The first bound protects the process: every waiting poll
// holds a goroutine, a waiter in the router and a connection (HTTP/1) or stream (HTTP/2) for
// up to 120 s. The second keeps one event subscription's consumers from taking every slot
// from another's. It is safe for concurrent use.
//
// The handler that serves the polls takes a slot with [PollLimit.Admit] once a poll has passed
// its checks — authentication, parameters, the queue exists — and is about to wait, not when
// the request arrives: a request answered at once (wrong credentials, a bad parameter, no
// such queue) never holds a slot. A flood of requests without the topic key then takes no
// slot from the consumers that have it, and each is answered 401, not 429
// (httpapi.API.AdmitPolls takes Admit).
//
// A poll over either bound is not queued: it is answered at once 429 Too Many Requests with
// Retry-After: 1 and an Event Grid error body saying which bound it met and what to do. Azure
// documents no bound on concurrent receive calls; it throttles a namespace by throughput unit
// ("Event egress (push and pull APIs): up to 2,000 events per second or 2 MB per second per
// TU", learn.microsoft.com/azure/event-grid/quotas-limits) and answers a throttled call 429,
// which the Azure SDKs retry. The connection is kept: a poll has no body left to read.
type PollLimit struct {
	n, share int
	mu       sync.Mutex
	total    int
	per      map[string]int // queues with polls in progress only: bounded by n
}

// NewPollLimit returns a bound of n polls waiting at once ([Config.MaxReceivePolls]). n must
// be positive.
func NewPollLimit(n int) *PollLimit {
	if n <= 0 {
		panic("httpserver: NewPollLimit needs a positive limit")
	}
	return &PollLimit{n: n, share: max(1, n/2), per: make(map[string]int)}
}

// Admit takes a slot for a poll about to wait on queue (any name for what it waits on; egrid
// names an event subscription "topic/subscription"). When there is none it answers w 429 and
// returns ok false: the poll must not wait and w must not be written again. Otherwise the
// caller calls release once, when the poll has ended.
func (l *PollLimit) Admit(w http.ResponseWriter, queue string) (release func(), ok bool) {
	if msg := l.acquire(queue); msg != "" {
		write429(w, msg)
		return nil, false
	}
	return func() { l.release(queue) }, true
}

// Take takes a slot for a poll about to wait on queue that did not come through this
// server's handler — in cluster mode, a poll another node routed here
// (router.Router.AdmitRoutedPolls): it shares the bounds of the polls Admit admits. When
// there is none it returns an error saying which bound the poll met and what to do, which
// the node the poll reached answers 429 with. Otherwise the caller calls release once,
// when the poll has ended.
func (l *PollLimit) Take(queue string) (release func(), err error) {
	if msg := l.acquire(queue); msg != "" {
		return nil, errors.New(msg)
	}
	return func() { l.release(queue) }, nil
}

// acquire takes a slot for a poll on queue, or says why there is none.
func (l *PollLimit) acquire(queue string) string {
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

func (l *PollLimit) release(queue string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.per[queue]--; l.per[queue] == 0 {
		delete(l.per, queue)
	}
}
