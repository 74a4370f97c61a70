package actors

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Drain asks subscription actors, before their owner stops them, to start no more attempts
// and to say when none of theirs is in flight: a stop cancels the attempts in flight, and a
// shutdown that gives them their stop grace first settles the events their answers deliver,
// so that only the ones still unanswered are attempted again after the next start. Sent to a
// topic actor ([Drain.Send]) it reaches every subscription actor of the topic; a queue
// subscription (pull) has no attempts and answers at once. A subscription actor that gets it
// stays drained until it stops. It is safe for concurrent use.
type Drain struct {
	mu      sync.Mutex
	pending pendingWork // topic and subscription actors that have not answered
	// inFlight is, by subscription, the attempts in flight of the subscription actors that
	// have not answered because of them ([Drain.InFlight]).
	inFlight map[drainKey]int
}

// drainKey names a subscription in a [Drain].
type drainKey struct{ topic, subscription string }

// DrainInFlight is a subscription actor that had not answered a [Drain] because attempts of
// its were still in flight: its topic, its name and how many attempts (batches).
type DrainInFlight struct {
	Topic, Subscription string
	Attempts            int
}

// Send sends d to the topic actor pid.
func (d *Drain) Send(root *actor.RootContext, pid *actor.PID) {
	d.add(1)
	root.Send(pid, d)
}

// Wait waits at most grace for every actor d reached to have no attempt in flight and
// reports whether they all got there. An actor that never gets d (stopped, or waiting for
// its restart) holds it for the whole grace.
// Nothing waits for an answer that never comes once Wait has returned.
func (d *Drain) Wait(grace time.Duration) bool {
	d.mu.Lock()
	idle := d.pending.idle
	d.mu.Unlock()
	if idle == nil {
		return true
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

// InFlight returns the subscription actors that have not answered d because attempts of
// theirs are in flight, with how many, by topic and name; and how many other actors have not
// answered (stopped, or waiting for their restart). Called once [Drain.Wait] reports that the
// grace ended first, it names the subscriptions whose attempts the stop cuts.
func (d *Drain) InFlight() (subs []DrainInFlight, others int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, n := range d.inFlight {
		subs = append(subs, DrainInFlight{Topic: k.topic, Subscription: k.subscription, Attempts: n})
	}
	slices.SortFunc(subs, func(a, b DrainInFlight) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Subscription, b.Subscription))
	})
	return subs, max(0, d.pending.n-len(subs))
}

// holding notes that subscription sub of topic waits for n attempts in flight before it
// answers d (0: it answered).
func (d *Drain) holding(topic, sub string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := drainKey{topic, sub}
	if n == 0 {
		delete(d.inFlight, k)
		return
	}
	if d.inFlight == nil {
		d.inFlight = map[drainKey]int{}
	}
	d.inFlight[k] = n
}

// add counts n more actors to answer.
func (d *Drain) add(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for range n {
		d.pending.add()
	}
}

// forward sends d on to each of pids, which answer it, and answers for the sender.
func (d *Drain) forward(c actor.Context, pids []*actor.PID) {
	d.add(len(pids))
	for _, pid := range pids {
		c.Send(pid, d)
	}
	d.done()
}

// done is an actor's answer: none of its attempts is in flight.
func (d *Drain) done() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending.done()
}

// drain makes the actor start no more attempts (its owner stops it next) and answers d once
// none is in flight: at once when none is, else when the last one is answered
// ([subscription.drained]) or the actor stops.
func (s *subscription) drain(d *Drain) {
	s.draining = true
	if len(s.batches) == 0 || s.fenced {
		d.done()
		return
	}
	d.holding(s.cfg.Topic, s.cfg.Name, len(s.batches))
	s.drains = append(s.drains, d)
}

// drained answers the drains waiting once no attempt is in flight.
func (s *subscription) drained() {
	if len(s.drains) == 0 {
		return
	}
	if len(s.batches) > 0 {
		for _, d := range s.drains {
			d.holding(s.cfg.Topic, s.cfg.Name, len(s.batches))
		}
		return
	}
	s.answerDrains()
}

// answerDrains answers the drains waiting: none of the actor's attempts is in flight, or it
// stops.
func (s *subscription) answerDrains() {
	for _, d := range s.drains {
		d.holding(s.cfg.Topic, s.cfg.Name, 0)
		d.done()
	}
	s.drains = nil
}
