package actors

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/bufpool"
	"github.com/egridio/egrid/sinks"
)

// attemptRunner runs a subscription's sink calls off its mailbox. Its goroutines share
// nothing mutable with the actor: they take a batch from work, call the sink and send the
// result back; idle is the actor's alone.
//
// A goroutine that finished an attempt waits for the subscription's next one instead of
// ending: a busy subscription then runs its attempts on goroutines whose stacks have already
// grown to what net/http needs, instead of starting a goroutine per attempt and growing its
// stack by copying, several times, each time (a tenth of egrid's CPU per event with batching
// off, in `egrid bench`'s profile). The actor counts them: an attemptDone means its goroutine
// now waits. When nothing is in flight the actor lets every waiting goroutine go, so a quiet
// subscription keeps none, and no timer is needed to end them.
type attemptRunner struct {
	// work hands batches to waiting goroutines; nil tells one to end. It holds at most one
	// item per waiting goroutine, and there are never more than MaxInFlight goroutines, so
	// with that capacity the actor never blocks on it.
	work     chan *batch
	idle     int // goroutines waiting on work (owned by the actor)
	root     *actor.RootContext
	self     *actor.PID
	sink     sinks.Sink
	parent   context.Context // the incarnation's context: its end ends the waiting goroutines
	values   context.Context // the incarnation's values, which the attempts' contexts carry
	timeout  time.Duration
	wg       *sync.WaitGroup // counts attempts in flight, not waiting goroutines
	finished *atomic.Int32
}

// start runs b's attempt on a waiting goroutine, or on a new one when none waits.
func (r *attemptRunner) start(b *batch) {
	r.wg.Add(1)
	if r.idle > 0 {
		select {
		case r.work <- b:
			r.idle--
			return
		default: // cannot happen: work has room for every waiting goroutine
		}
	}
	go r.worker(b)
}

// returned notes that the goroutine of a finished attempt now waits for work.
func (r *attemptRunner) returned() { r.idle++ }

// release ends every waiting goroutine.
func (r *attemptRunner) release() {
	for ; r.idle > 0; r.idle-- {
		select {
		case r.work <- nil:
		default: // cannot happen, as in start
		}
	}
}

// worker runs b's attempt, then the next ones handed to it, until it is told to end or the
// incarnation ends.
func (r *attemptRunner) worker(b *batch) {
	k := newAttemptClock(r.parent, r.values)
	defer k.close()
	for {
		r.run(k, b)
		select {
		case b = <-r.work:
			if b == nil {
				return
			}
		case <-r.parent.Done():
			// An attempt handed over just before the end may still wait in work: run it (its
			// context is done, so the sink returns at once) so that the stopping actor's
			// wait for its attempts ends.
			for {
				select {
				case b = <-r.work:
					if b != nil {
						r.run(k, b)
					}
				default:
					return
				}
			}
		}
	}
}

// run makes b's attempt, bounded by the attempt timeout, and sends the actor its result. A
// panicking sink is reported as a failed attempt carrying the panic.
func (r *attemptRunner) run(k *attemptClock, b *batch) {
	defer r.wg.Done()
	done := &b.done
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			done.panicked = p
			done.err = &sinks.DeliveryError{Outcome: schemas.GenericError, Err: fmt.Errorf("sink panicked: %v", p)}
		}
		done.duration = time.Since(start)
		bufpool.Put(b.body)
		r.finished.Add(1)
		r.root.Send(r.self, done)
	}()
	ctx := k.begin(r.timeout)
	defer k.finish(ctx)
	done.err = r.sink.Deliver(ctx, &b.sb)
	if done.err == nil {
		done.status = b.sb.StatusCode
	}
}
