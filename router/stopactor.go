package router

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// stopWaitNotice is how often stopActor says that an actor it stopped has not terminated yet.
const stopWaitNotice = 10 * time.Second

// stopActor stops the actor pid (what names it in the log) and returns once it has
// terminated: its stopping turn has run, and its children's, so the stop work they begin there
// (their last writes, off their mailboxes) is counted in the [actors.Stops] or
// [deadletter.Stops] that the caller waits for next, before it closes what those writes need.
// protoactor's StopFuture gives up after 10 s: had a turn in progress held the mailbox that
// long, the wait for the stop work that followed found none begun, and the store closed under
// the writes still to come. stopActor waits as long as the turn does, saying so every
// stopWaitNotice; the caller's context still bounds [Router.Close]. An actor that has
// terminated already answers at once. The stop goes ahead of the messages in the mailbox,
// which are dropped: see drainActor.
func (r *Router) stopActor(pid *actor.PID, what string) {
	r.terminate(pid, what, r.system.Root.Stop)
}

// drainActor is stopActor for an actor that must first handle the messages sent to it before
// (a poison pill, queued behind them, stops it).
func (r *Router) drainActor(pid *actor.PID, what string) {
	r.terminate(pid, what, r.system.Root.Poison)
}

// terminate watches pid, stops it with stop and waits for its Terminated (see stopActor).
func (r *Router) terminate(pid *actor.PID, what string, stop func(*actor.PID)) {
	terminated := actor.NewFuture(r.system, -1)  // no timeout: the actor's Terminated answers it
	proc, _ := r.system.ProcessRegistry.Get(pid) // a terminated actor's is the dead-letter process, which answers the watch
	// The watch goes first, as StopFuture's does: a watch that reaches a stopping actor is
	// answered at once, before its children have terminated.
	proc.SendSystemMessage(pid, &actor.Watch{Watcher: terminated.PID()})
	stop(pid)
	done := make(chan struct{})
	go func() {
		_ = terminated.Wait()
		close(done)
	}()
	tick := time.NewTicker(stopWaitNotice)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			r.log.Warn(what+" has not stopped yet: a turn in progress holds its mailbox; still waiting, so that what it writes as it stops is written before the store closes",
				"waited", time.Since(start).Round(time.Second))
		}
	}
}
