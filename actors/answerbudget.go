package actors

import (
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// DefaultAnswerBudget is the default bound of an [AnswerBudget]: 256 MiB of receive answers
// held at once.
const DefaultAnswerBudget = 256 << 20

// AnswerBudget bounds the bytes of pull delivery answers (:receive) held in memory at once by
// one router, across its queue subscriptions and their polls: an answer stays in memory until
// its consumer has read it (up to 10 minutes), and a consumer that opens many polls for big
// events and never reads would otherwise hold them all. A queue subscription actor takes its
// events' bytes from it as it hands them out ([AnswerHold]), and the caller gives them back
// once the answer is written, or has failed, timed out or been refused.
//
// Taking never blocks: when the budget cannot cover the next event, the poll gets the events
// already taken (when it has some), or keeps waiting, and the actor is sent a message once
// bytes are given back, so it tries again. An event is taken alone whatever its size when
// nothing is held, so a budget smaller than an event still lets it through, one at a time:
// what is held never exceeds the bound by more than one event.
//
// It is safe for concurrent use. A nil *AnswerBudget bounds nothing.
type AnswerBudget struct {
	limit int64
	send  func(pid *actor.PID, msg any)

	mu      sync.Mutex
	held    int64
	waiting map[*actor.PID]struct{} // actors refused bytes since the last give-back
}

// NewAnswerBudget returns a budget of limit bytes (0 or less: [DefaultAnswerBudget]); root
// sends the actors waiting for bytes their wake-up.
func NewAnswerBudget(limit int64, root *actor.RootContext) *AnswerBudget {
	if limit <= 0 {
		limit = DefaultAnswerBudget
	}
	return &AnswerBudget{limit: limit, send: func(pid *actor.PID, msg any) { root.Send(pid, msg) }}
}

// Limit is the budget's bound in bytes.
func (b *AnswerBudget) Limit() int64 { return b.limit }

// Held is the bytes taken and not given back yet.
func (b *AnswerBudget) Held() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// take takes n bytes for an event the actor self is about to hand out, and reports whether
// it could: the held bytes stay within the limit, or nothing else is held. Refused, self is
// sent an [answerBudgetFreed] at the next give-back.
func (b *AnswerBudget) take(n int64, self *actor.PID) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == 0 || b.held+n <= b.limit {
		b.held += n
		return true
	}
	if b.waiting == nil {
		b.waiting = make(map[*actor.PID]struct{})
	}
	b.waiting[self] = struct{}{}
	return false
}

// charge counts n bytes held whatever the budget holds already: an answer that is in memory
// anyway (in cluster mode, the copy of an answer another node sent), so that the events
// handed out here wait for it to be written.
func (b *AnswerBudget) charge(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.held += n
	b.mu.Unlock()
}

// give gives n bytes back and wakes the actors that were refused bytes meanwhile.
func (b *AnswerBudget) give(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.held -= n
	waiting := b.waiting
	b.waiting = nil
	b.mu.Unlock()
	for pid := range waiting {
		b.send(pid, &answerBudgetFreed{})
	}
}

// Hold returns a hold of n bytes charged to b whatever it holds already (see [AnswerHold]):
// for an answer that is in memory anyway, such as the copy of an answer another cluster node
// sent, so that the events handed out here wait for it to be written.
func (b *AnswerBudget) Hold(n int64) *AnswerHold {
	b.charge(n)
	h := &AnswerHold{b: b}
	h.n.Store(n)
	return h
}

// AnswerHold is the share of an [AnswerBudget] one answer holds. Release gives it back; only
// the first call does anything, so every path that ends with the answer may call it. A nil
// *AnswerHold holds nothing.
type AnswerHold struct {
	b *AnswerBudget
	n atomic.Int64
}

// Bytes is what the hold has not given back yet.
func (h *AnswerHold) Bytes() int64 {
	if h == nil {
		return 0
	}
	return h.n.Load()
}

// Release gives the hold's bytes back to its budget. It is safe to call more than once, from
// any goroutine.
func (h *AnswerHold) Release() {
	if h == nil {
		return
	}
	h.b.give(h.n.Swap(0))
}

// AnswerClaim ties the [AnswerHold] of the answer to one [ReceiveEvents] to its caller, who
// may stop waiting before the answer comes: a receipt's synced write can finish after the
// caller's future has timed out, and protoactor delivers such an answer to dead letters,
// where nobody releases its hold. The queue actor attaches the answer's hold as it makes the
// answer; the caller that gives up calls Drop. Whichever comes second releases the hold, so
// it is given back exactly once whatever the order, and an answer the caller does get is
// released by the caller as usual ([ReceivedEvents.Hold]).
//
// It is safe for concurrent use; its zero value is ready. A nil *AnswerClaim claims nothing.
type AnswerClaim struct {
	hold    atomic.Pointer[AnswerHold]
	dropped atomic.Bool
}

// Drop gives up the answer: its hold is released now if the answer was made, or as it is
// made. Call it only when the answer will not be taken (a caller that took it releases its
// hold instead); more calls do nothing more.
func (c *AnswerClaim) Drop() {
	if c == nil {
		return
	}
	c.dropped.Store(true)
	c.hold.Load().Release()
}

// attach records h as the answer's hold, released at once when the caller dropped its claim
// already.
func (c *AnswerClaim) attach(h *AnswerHold) {
	if c == nil || h == nil {
		return
	}
	c.hold.Store(h)
	if c.dropped.Load() {
		h.Release()
	}
}

// answerBudgetFreed tells a queue actor that bytes of its router's [AnswerBudget] were given
// back: its waiting receivers may be served now.
type answerBudgetFreed struct{}
