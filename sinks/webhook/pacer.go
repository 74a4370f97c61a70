package webhook

import (
	"context"
	"sync"
	"time"
)

// pacer spaces requests evenly so that at most perMinute start in any minute: a token bucket
// holding one token, refilled every minute/perMinute. The first request after a quiet spell
// goes at once. A nil pacer never waits.
type pacer struct {
	interval time.Duration
	mu       sync.Mutex
	next     time.Time // when the next request may start
}

func newPacer(perMinute int) *pacer {
	if perMinute <= 0 {
		return nil
	}
	return &pacer{interval: time.Minute / time.Duration(perMinute)}
}

// wait blocks until the caller's turn, or returns ctx's error when ctx ends first (the turn is
// then given back only if no later caller has taken one since).
func (p *pacer) wait(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	now := time.Now()
	at := p.next
	if at.Before(now) {
		at = now
	}
	p.next = at.Add(p.interval)
	p.mu.Unlock()
	d := at.Sub(now)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		if p.next.Equal(at.Add(p.interval)) {
			p.next = at
		}
		p.mu.Unlock()
		return context.Cause(ctx)
	}
}

// flatten lists the leaves of a tree of joined errors.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
