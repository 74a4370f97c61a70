package actors

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// attemptCtx is the context one sink call runs under. It behaves as
// context.WithTimeout(incarnation, timeout) would, ended when the call returns: it is done when
// the attempt timeout passes (Err: context.DeadlineExceeded), when the subscription's
// incarnation ends or when the call is over (context.Canceled), and its values are the
// incarnation's. What it saves on every attempt is the bookkeeping around it: it has no timer
// of its own (its goroutine's [attemptClock] reuses one), it is not entered in the
// incarnation's context (the goroutine is, once), and the contexts derived from it (net/http's
// own, one per request) register with it through AfterFunc instead of a map.
type attemptCtx struct {
	values   context.Context // the incarnation's values, without its cancellation
	deadline time.Time
	done     chan struct{}

	mu     sync.Mutex
	err    error        // set once, under mu, just before done closes
	afters []afterEntry // what AfterFunc registered and did not stop, run when it ends
	next   uint64       // the id of the next AfterFunc
	inline [2]afterEntry
}

type afterEntry struct {
	id uint64
	f  func()
}

func newAttemptCtx(values context.Context, deadline time.Time) *attemptCtx {
	c := &attemptCtx{values: values, deadline: deadline, done: make(chan struct{})}
	c.afters = c.inline[:0]
	return c
}

// Deadline implements [context.Context]: the attempt timeout.
func (c *attemptCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Done implements [context.Context].
func (c *attemptCtx) Done() <-chan struct{} { return c.done }

// Err implements [context.Context].
func (c *attemptCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value implements [context.Context]. The values come through context.WithoutCancel, which
// hides the incarnation's cancellation from context.Cause too: Cause of an attempt's context
// is its own Err.
func (c *attemptCtx) Value(key any) any { return c.values.Value(key) }

// AfterFunc arranges for f to run once c is done, as [context.AfterFunc] describes; the
// context package calls it for every context derived from c. f runs on the goroutine that
// ends c, or on its own goroutine when c is done already. stop unregisters f and reports
// whether that kept it from running.
func (c *attemptCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f() // the context package may hold a lock of its own while registering
		return func() bool { return false }
	}
	id := c.next
	c.next++
	c.afters = append(c.afters, afterEntry{id: id, f: f})
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, e := range c.afters {
			if e.id == id {
				c.afters = append(c.afters[:i], c.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// end makes c done with err, unless it is done already, and runs what AfterFunc registered.
func (c *attemptCtx) end(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	fs := c.afters
	c.afters = nil
	close(c.done)
	c.mu.Unlock()
	for _, e := range fs {
		e.f()
	}
}

// attemptClock ends the attempt contexts of one attempt goroutine: its timer, reused from
// attempt to attempt, ends the current one at its deadline, and its one registration with the
// incarnation's context ends the current one when the incarnation ends.
type attemptClock struct {
	incarnation context.Context
	values      context.Context // the incarnation's values, without its cancellation
	timer       *time.Timer
	cur         atomic.Pointer[attemptCtx]
	unwatch     func() bool // undoes the registration with the incarnation's context
}

// newAttemptClock returns the clock of an attempt goroutine of incarnation, whose attempts'
// contexts carry values (context.WithoutCancel(incarnation), made once for all of them).
func newAttemptClock(incarnation, values context.Context) *attemptClock {
	k := &attemptClock{incarnation: incarnation, values: values}
	k.timer = time.AfterFunc(time.Hour, k.expire)
	k.timer.Stop()
	k.unwatch = context.AfterFunc(incarnation, func() {
		if c := k.cur.Load(); c != nil {
			c.end(context.Canceled)
		}
	})
	return k
}

// expire ends the current attempt if its deadline has passed. A timer that fired as one
// attempt finished may find the next one current, whose deadline is still ahead: it leaves
// that one alone, and sets the timer for it again in case its own setting came first.
func (k *attemptClock) expire() {
	c := k.cur.Load()
	if c == nil {
		return
	}
	if d := time.Until(c.deadline); d > 0 {
		k.timer.Reset(d)
		return
	}
	c.end(context.DeadlineExceeded)
}

// begin returns the context of an attempt that may run until timeout from now.
func (k *attemptClock) begin(timeout time.Duration) *attemptCtx {
	c := newAttemptCtx(k.values, time.Now().Add(timeout))
	k.cur.Store(c)
	// After the Store: an incarnation that ended before it found no current attempt to end.
	if k.incarnation.Err() != nil {
		c.end(context.Canceled)
	}
	k.timer.Reset(timeout)
	return c
}

// finish ends the attempt begun last, as the cancel function of context.WithTimeout does.
func (k *attemptClock) finish(c *attemptCtx) {
	k.timer.Stop()
	k.cur.Store(nil)
	c.end(context.Canceled)
}

// close releases the clock: its goroutine makes no more attempts.
func (k *attemptClock) close() {
	k.timer.Stop()
	k.unwatch()
}
