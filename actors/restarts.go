package actors

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/logattr"
)

// ChildRestarts restarts the failed subscription actors that one actor supervises (a topic
// actor, a dead-letter replay), each after a delay that starts at the initial back-off and
// doubles with each failure in a row up to the maximum (OneForOne: siblings are untouched).
// It never gives up: a subscription's events are in the store, and a crash loop is visible
// in the logs and restart counts.
//
// Its timers belong to the supervising actor: a timer only sends that actor a message, and
// stopping the child or the actor stops it, so no restart outlives either. The actor makes a
// ChildRestarts per incarnation, implements actor.SupervisorStrategy with
// [ChildRestarts.HandleFailure] (protoactor asks the actor itself, on its own mailbox, before
// its props' strategy), hands every message to [ChildRestarts.Receive] and calls
// [ChildRestarts.Forget] when it stops a child. All of it runs on the actor's mailbox.
type ChildRestarts struct {
	backoff *restartWithBackoff
	self    *actor.PID
	root    *actor.RootContext
	pending map[string]*pendingRestart // by the child's process id; nil once stopping
	// nameOf, when set, returns the subscription a child's actor belongs to, which the log
	// of its failure names (a topic actor's children); "" for none.
	nameOf func(*actor.PID) string
}

// NewChildRestarts returns the restarts of one incarnation of a supervising actor; failures
// are logged on log.
func NewChildRestarts(initial, max time.Duration, log *slog.Logger) *ChildRestarts {
	return &ChildRestarts{backoff: &restartWithBackoff{initial: initial, max: max, log: log}}
}

// pendingRestart is the restart of a failed child, due when its timer sends the supervising
// actor a [restartDue].
type pendingRestart struct {
	timer      *time.Timer
	supervisor actor.Supervisor // the supervising actor's context, which restarts its children
}

// restartDue tells the supervising actor that the back-off of a failed child is over.
type restartDue struct {
	pid *actor.PID
	p   *pendingRestart
}

// Receive handles what the restarts need of c's messages and reports whether the message was
// theirs alone: it starts them at Started, restarts a child whose back-off is over, stops
// every timer when the actor stops or restarts (its children stop with it), and forgets a
// child that terminated.
func (r *ChildRestarts) Receive(c actor.Context) bool {
	switch msg := c.Message().(type) {
	case *actor.Started:
		r.self, r.root = c.Self(), c.ActorSystem().Root
		r.pending = make(map[string]*pendingRestart)
	case *restartDue:
		if r.pending[msg.pid.Id] == msg.p { // not stopped or replaced meanwhile
			delete(r.pending, msg.pid.Id)
			msg.p.supervisor.RestartChildren(msg.pid)
		}
		return true
	case *actor.Stopping, *actor.Restarting:
		for id := range r.pending {
			r.Forget(id)
		}
		r.pending = nil
	case *actor.Terminated:
		r.Forget(msg.Who.Id)
	}
	return false
}

// HandleFailure implements actor.SupervisorStrategy for the supervising actor: child is
// restarted after its back-off.
func (r *ChildRestarts) HandleFailure(_ *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason any, _ any) {
	name := ""
	if r.nameOf != nil {
		name = r.nameOf(child)
	}
	delay := r.backoff.next(child, name, rs, reason)
	if r.pending == nil {
		return // the supervising actor is stopping, and its children with it
	}
	r.Forget(child.Id)
	p := &pendingRestart{supervisor: supervisor}
	root, self := r.root, r.self
	p.timer = time.AfterFunc(delay, func() { root.Send(self, &restartDue{pid: child, p: p}) })
	r.pending[child.Id] = p
}

// Forget cancels the restart waiting for the child with process id id, if any: the
// supervising actor stops that child instead.
func (r *ChildRestarts) Forget(id string) {
	if p, ok := r.pending[id]; ok {
		p.timer.Stop()
		delete(r.pending, id)
	}
}

// restartWithBackoff computes a failed subscription actor's back-off.
type restartWithBackoff struct {
	initial, max time.Duration
	log          *slog.Logger
}

// next counts a failure of child, the actor of subscription name ("" when not known), and
// returns how long it waits before its restart.
func (r *restartWithBackoff) next(child *actor.PID, name string, rs *actor.RestartStatistics, reason any) time.Duration {
	if rs.NumberOfFailures(r.max*2) == 0 {
		rs.Reset()
	}
	rs.Fail()
	n := rs.FailureCount()
	delay := r.max
	if n < 32 {
		delay = time.Duration(math.Min(float64(r.initial)*math.Pow(2, float64(n-1)), float64(r.max)))
	}
	log := r.log
	if name != "" {
		log = log.With(logattr.Subscription, name)
	}
	log.Error("subscription actor failed; restarting", "actor", child.Id, "reason", fmt.Sprint(reason), "failures", n, "backoff", delay)
	return delay
}
