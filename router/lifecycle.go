package router

import (
	"sync"
	"time"
)

// subKey names one subscription.
type subKey struct{ topic, name string }

// id is the key under which the lifecycle keeps a subscription: names are case-insensitive
// (names.go).
func (k subKey) id() subKey { return subKey{fold(k.topic), fold(k.name)} }

// lifecycle is the router's bookkeeping of what happens to subscriptions outside delivery:
// their provisioning state, the manual validations under way (by token hash) and the timers
// that end validation windows and expire subscriptions. Its own mutex guards it; code that
// also holds Router.mu takes Router.mu first. Timer callbacks take their topic's admin turn
// (turns.go), never Router.mu across I/O. The zero value is ready to use.
//
// Timer callbacks run in their own goroutines; close stops the timers and waits for callbacks
// already running, so none outlives the router.
type lifecycle struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	// held, while open, keeps timer callbacks waiting: a router being built arms timers from
	// the store before it is ready to run them (see hold and release).
	held chan struct{}
	done chan struct{} // closed by close

	state   map[subKey]*provisioned
	pending map[string]*pendingValidation // by token hash
	expiry  map[subKey]*expiryTimer
}

// expiryTimer deletes a subscription at its expiration time at (expire), or, after a
// deletion that failed, tries it again (retryExpiry).
type expiryTimer struct {
	timer *time.Timer
	at    time.Time
}

// pendingValidation is a validationUrl that may still be fetched (SPEC §2.5).
type pendingValidation struct {
	key  subKey
	hash string // sha256 of the token, hex
	// committed is set once the subscription is stored as AwaitingManualAction; before that a
	// fetch only sets fetched, and the commit then stores the subscription as Succeeded.
	committed bool
	fetched   bool
	timer     *time.Timer // ends the window; nil until committed
}

// afterFunc runs f after d in its own goroutine unless the lifecycle is closed by then; close
// waits for a run that has started.
func (l *lifecycle) afterFunc(d time.Duration, f func()) *time.Timer {
	return time.AfterFunc(d, func() {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return
		}
		l.wg.Add(1)
		held, done := l.held, l.doneChan()
		l.mu.Unlock()
		defer l.wg.Done()
		if held != nil {
			select {
			case <-held:
			case <-done:
				return
			}
		}
		f()
	})
}

// hold makes timer callbacks wait until release; New holds them while it restores.
func (l *lifecycle) hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		l.held = make(chan struct{})
	}
}

// release lets held timer callbacks run. It is idempotent.
func (l *lifecycle) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != nil {
		close(l.held)
		l.held = nil
	}
}

// doneChan returns the channel close closes. Called with l.mu held.
func (l *lifecycle) doneChan() chan struct{} {
	if l.done == nil {
		l.done = make(chan struct{})
	}
	return l.done
}

// close stops every timer and waits for callbacks already running. Call it without holding
// Router.mu (callbacks take it). It is idempotent.
func (l *lifecycle) close() {
	l.mu.Lock()
	if !l.closed {
		close(l.doneChan())
	}
	l.closed = true
	for _, e := range l.expiry {
		e.timer.Stop()
	}
	for _, p := range l.pending {
		if p.timer != nil {
			p.timer.Stop()
		}
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// get returns a subscription's provisioning record (nil means Succeeded, nothing recorded).
func (l *lifecycle) get(k subKey) *provisioned {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state[k.id()]
}

// set records a subscription's provisioning record. An empty record is not kept: get returns
// nil, which reads the same, and an idle subscription costs a map entry less.
func (l *lifecycle) set(k subKey, p *provisioned) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.empty() {
		delete(l.state, k.id())
		return
	}
	if l.state == nil {
		l.state = make(map[subKey]*provisioned)
	}
	l.state[k.id()] = p
}

// forget drops everything about a deleted subscription.
func (l *lifecycle) forget(k subKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.state, k.id())
	if e := l.expiry[k.id()]; e != nil {
		e.timer.Stop()
		delete(l.expiry, k.id())
	}
	for h, p := range l.pending {
		if p.key.id() == k.id() {
			if p.timer != nil {
				p.timer.Stop()
			}
			delete(l.pending, h)
		}
	}
}

// begin registers a validation whose handshake is about to start, or whose stored record is
// read (again: in cluster mode a record another node changed is applied anew), replacing
// the one registered under hash with its timer.
func (l *lifecycle) begin(k subKey, hash string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = make(map[string]*pendingValidation)
	}
	if p := l.pending[hash]; p != nil && p.timer != nil {
		p.timer.Stop()
	}
	l.pending[hash] = &pendingValidation{key: k, hash: hash}
}

// drop forgets a validation.
func (l *lifecycle) drop(hash string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pending[hash]; p != nil {
		if p.timer != nil {
			p.timer.Stop()
		}
		delete(l.pending, hash)
	}
}

// fetchedEarly reports whether the validationUrl of an uncommitted validation was fetched.
func (l *lifecycle) fetchedEarly(hash string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pending[hash]
	return p != nil && p.fetched
}

// commit marks a validation as stored in AwaitingManualAction and arms its window timer. It
// returns false, dropping the validation, when the URL was fetched before the commit: the
// subscription is then Succeeded.
func (l *lifecycle) commit(hash string, window time.Duration, onClose func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pending[hash]
	if p == nil {
		return false
	}
	if p.fetched {
		delete(l.pending, hash)
		return false
	}
	p.committed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	if !l.closed {
		p.timer = l.afterFunc(window, onClose)
	}
	return true
}

// rearm arms the window timer of a committed validation again, to run onClose after d: in
// cluster mode a node without the cluster's duty looks at a passed window again later
// (closeValidationWindow). It reports whether it armed it: not once the validation was
// dropped or the lifecycle closed.
func (l *lifecycle) rearm(hash string, d time.Duration, onClose func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pending[hash]
	if p == nil || !p.committed || l.closed {
		return false
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.timer = l.afterFunc(d, onClose)
	return true
}

// fetch notes that a validationUrl was fetched. It returns the validation and whether it is
// committed (the caller then completes it); an uncommitted one is only marked fetched.
func (l *lifecycle) fetch(hash string) (*pendingValidation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pending[hash]
	if p == nil {
		return nil, false
	}
	if !p.committed {
		p.fetched = true
		return p, false
	}
	return p, true
}

// scheduleExpiry arms (or, for a zero at, disarms) the timer that deletes a subscription at
// its expiration time.
func (l *lifecycle) scheduleExpiry(k subKey, in time.Duration, at time.Time, expire func(subKey, time.Time)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.expiry[k.id()]; e != nil {
		e.timer.Stop()
		delete(l.expiry, k.id())
	}
	if at.IsZero() || l.closed {
		return
	}
	if l.expiry == nil {
		l.expiry = make(map[subKey]*expiryTimer)
	}
	l.expiry[k.id()] = &expiryTimer{timer: l.afterFunc(max(in, 0), func() { expire(k, at) }), at: at}
}

// retryExpiry arms the timer of subscription k again, to run retry after in, when the
// expiration it holds is still at: the subscription was neither updated to another
// expiration (whose timer stays) nor deleted (forget dropped its timer) since the deletion
// that failed. It reports whether it armed it.
func (l *lifecycle) retryExpiry(k subKey, at time.Time, in time.Duration, retry func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.expiry[k.id()]
	if l.closed || e == nil || !e.at.Equal(at) {
		return false
	}
	e.timer.Stop()
	e.timer = l.afterFunc(in, retry)
	return true
}
