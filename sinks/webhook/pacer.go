package webhook

import (
	"context"
	"time"

	"golang.org/x/time/rate"
)

// newPacer returns the limiter that spaces requests evenly so that at most perMinute start in
// any minute: a token bucket holding one token, refilled every minute/perMinute. The first
// request after a quiet spell goes at once. It returns nil (no cap) for perMinute <= 0.
func newPacer(perMinute int) *rate.Limiter {
	if perMinute <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Every(time.Minute/time.Duration(perMinute)), 1)
}

// waitTurn blocks until the caller's turn on p, or returns ctx's cause when ctx ends first;
// the turn is then given back (see [rate.Reservation.Cancel]). A nil p never waits.
//
// It waits for ctx to end rather than failing at once when the turn lies past ctx's deadline
// (as [rate.Limiter.Wait] does), so a caller that gives up reads as TimedOut or Canceled,
// like any other attempt its context ended.
func waitTurn(ctx context.Context, p *rate.Limiter) error {
	if p == nil {
		return nil
	}
	r := p.Reserve()
	d := r.Delay()
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.Cancel()
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
