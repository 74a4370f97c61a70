package actors

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
)

// TopicConfig is what a topic actor needs.
type TopicConfig struct {
	Name    string
	Metrics *metrics.Set
	Logger  *slog.Logger
	// Subscriptions are started when the actor starts. From then on the actor keeps its own
	// list ([AddSubscription], [RemoveSubscription]): an incarnation restarted after a panic
	// starts the subscriptions the topic has at that moment, not these.
	Subscriptions []*SubscriptionConfig
	// RestartBackoff is the first delay before a failed subscription actor is restarted; it
	// doubles with each failure in a row up to MaxRestartBackoff. Defaults 100 ms and 1 min.
	RestartBackoff, MaxRestartBackoff time.Duration
}

// TopicProps returns the props of a topic actor. Spawn them once: the actor's incarnations
// share what they hold (its subscriptions, their stop work).
func TopicProps(cfg *TopicConfig) *actor.Props {
	initial, maxDelay := cfg.RestartBackoff, cfg.MaxRestartBackoff
	if initial <= 0 {
		initial = 100 * time.Millisecond
	}
	if maxDelay <= 0 {
		maxDelay = time.Minute
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With(logattr.Topic, cfg.Name)
	stops := new(stopRegistry)                   // the topic actor's incarnations share it: see topic.stops
	set := newSubscriptionSet(cfg.Subscriptions) // and this: see topic.set
	return actor.PropsFromProducer(func() actor.Actor {
		t := &topic{cfg: cfg, stops: stops, set: set, ChildRestarts: NewChildRestarts(initial, maxDelay, log)}
		t.nameOf = t.childName
		return t
	})
}

// childName returns the name of the subscription whose actor is pid, "" when none is: what
// the log of a failed child names (ChildRestarts.nameOf). It runs on the actor's mailbox.
func (t *topic) childName(pid *actor.PID) string {
	for name, ch := range t.subs {
		if ch.pid.Equal(pid) {
			return name
		}
	}
	return ""
}

// subscriptionSet is the subscriptions of a topic actor, in fan-out order: those it was
// spawned with, then as [AddSubscription] and [RemoveSubscription] change them. The actor's
// incarnations share it, one at a time and on the actor's mailbox, so an incarnation
// restarted after a panic starts the subscriptions the topic has at that moment: those added
// since the spawn run again, those removed stay removed.
type subscriptionSet struct {
	order   []string
	configs map[string]*SubscriptionConfig // as added: never with an after of a replaced actor
	// ended holds the subscriptions whose actor stopped by itself (a fenced state write: it
	// no longer owns the state). A restarted incarnation does not start them again; their
	// owner removes (or adds) them.
	ended map[string]bool
}

func newSubscriptionSet(initial []*SubscriptionConfig) *subscriptionSet {
	s := &subscriptionSet{configs: make(map[string]*SubscriptionConfig), ended: make(map[string]bool)}
	for _, sc := range initial {
		s.put(sc)
	}
	return s
}

// put adds subscription sc, or replaces the one of its name (keeping its place).
func (s *subscriptionSet) put(sc *SubscriptionConfig) {
	if _, ok := s.configs[sc.Name]; !ok {
		s.order = append(s.order, sc.Name)
	}
	s.configs[sc.Name] = sc
	delete(s.ended, sc.Name)
}

// remove removes subscription name and reports whether the set held it.
func (s *subscriptionSet) remove(name string) bool {
	if _, ok := s.configs[name]; !ok {
		return false
	}
	delete(s.configs, name)
	delete(s.ended, name)
	s.order = slices.DeleteFunc(s.order, func(n string) bool { return n == name })
	return true
}

type child struct {
	cfg *SubscriptionConfig
	pid *actor.PID
}

// stopping is a subscription actor being stopped by [RemoveSubscription] (or replaced by
// [AddSubscription]): who waits for its end.
type stopping struct {
	name    string
	waiters []*actor.PID // answered once it terminated and its stop work ended
	// done is closed at its Terminated, made when an actor replacing it waits for it (add);
	// that actor's load then waits for the stop work by name itself (startLoad).
	done chan struct{}
}

// topic is the topic actor: it fans journal entries out to its subscription actors, filtering
// for each.
type topic struct {
	cfg  *TopicConfig
	subs map[string]*child
	// order keeps fan-out deterministic.
	order []string
	// stopping holds the subscription actors stopped here and not yet terminated, by
	// process id: a RemoveSubscription is answered once its actor has terminated and its stop
	// work has ended — its last state written, or its stop grace passed (stopwork.go) — so
	// that a caller closing the actor's state writer or giving its lease up afterwards comes
	// after that write.
	stopping map[string]*stopping
	// ended holds the subscription actors that terminated by themselves while still in subs.
	ended map[string]bool
	// stops is the stop work of the subscription actors under way, by name, which an actor's
	// load waits for (startLoad) and RemoveSubscription's answer too. It is the topic's, not
	// the incarnation's: a topic actor that restarts stops its children, and the new
	// incarnation's load theirs after their stop work.
	stops *stopRegistry
	// set is the topic's subscriptions, which the incarnations share: the one starting
	// (Started) starts them, and adds and removes keep it current.
	set *subscriptionSet

	// ChildRestarts restarts a failed subscription actor after its back-off, with timers of
	// the topic actor's own; it is the actor's supervisor strategy (HandleFailure).
	*ChildRestarts
}

// Receive implements actor.Actor.
func (t *topic) Receive(c actor.Context) {
	if t.ChildRestarts.Receive(c) {
		return
	}
	switch msg := c.Message().(type) {
	case *actor.Started:
		t.subs = make(map[string]*child)
		t.stopping = make(map[string]*stopping)
		t.ended = make(map[string]bool)
		t.order = t.order[:0]
		for _, name := range t.set.order {
			if !t.set.ended[name] {
				t.add(c, t.set.configs[name])
			}
		}
	case *actor.Restarting:
		// Its children stop with it, and their Terminated come to this incarnation: they did
		// not stop by themselves, and the next incarnation starts them again.
		clear(t.subs)
	case *Appended:
		t.fanOut(c, msg)
	case *JournalAt:
		for _, name := range t.order {
			c.Send(t.subs[name].pid, &Deliver{Through: msg.Last, From: msg.Last + 1})
		}
	case *AddSubscription:
		t.set.put(msg.Config)
		t.add(c, msg.Config)
		c.Respond(true)
	case *RemoveSubscription:
		st, found := t.remove(c, msg.Name)
		// One whose actor stopped by itself before this incarnation started has no actor
		// here: answered once its stop work ended, as when found.
		found = t.set.remove(msg.Name) || found
		switch {
		case c.Sender() == nil:
		case st != nil:
			st.waiters = append(st.waiters, c.Sender()) // answered after its Terminated
		case found: // it had stopped by itself: answered once its stop work ended
			t.answerAfterStop(c, msg.Name, []*actor.PID{c.Sender()})
		default:
			c.Respond(true)
		}
	case *actor.Terminated:
		if st, ok := t.stopping[msg.Who.Id]; ok {
			delete(t.stopping, msg.Who.Id)
			if st.done != nil {
				close(st.done)
			}
			t.answerAfterStop(c, st.name, st.waiters)
			return
		}
		for name, ch := range t.subs {
			if ch.pid.Id == msg.Who.Id { // it stopped itself; a later remove need not wait
				t.ended[msg.Who.Id] = true
				t.set.ended[name] = true
			}
		}
	case *Drain:
		pids := make([]*actor.PID, 0, len(t.order))
		for _, name := range t.order {
			if ch := t.subs[name]; !t.ended[ch.pid.Id] {
				pids = append(pids, ch.pid)
			}
		}
		msg.forward(c, pids)
	case *GetStatus:
		t.forward(c, msg.Subscription)
	case *EndProbation:
		t.forward(c, msg.Subscription)
	case *ReceiveEvents:
		t.forwardQueue(c, msg.Subscription)
	case *SettleEvents:
		t.forwardQueue(c, msg.Subscription)
	case *CancelReceive:
		if ch, ok := t.subs[msg.Subscription]; ok && ch.cfg.Queue != nil {
			c.Forward(ch.pid)
		}
	}
}

func (t *topic) forward(c actor.Context, name string) {
	ch, ok := t.subs[name]
	if !ok {
		c.Respond(fmt.Errorf("subscription %q of topic %q: %w", name, t.cfg.Name, ErrNotRunning))
		return
	}
	if t.ended[ch.pid.Id] {
		// It stopped itself after a fenced state write (another node took it over): the
		// request would reach no actor and wait for its own timeout.
		c.Respond(unsaved(name, t.cfg.Name, store.ErrFenced))
		return
	}
	c.Forward(ch.pid)
}

// forwardQueue forwards a pull request to a queue subscription's actor; a push subscription
// answers [ErrNotQueue].
func (t *topic) forwardQueue(c actor.Context, name string) {
	if ch, ok := t.subs[name]; ok && ch.cfg.Queue == nil {
		c.Respond(ErrNotQueue)
		return
	}
	t.forward(c, name)
}

func (t *topic) add(c actor.Context, sc *SubscriptionConfig) {
	if old, ok := t.subs[sc.Name]; ok {
		// The new actor starts at once (events handed to it meanwhile are kept, as during
		// any load), but reads the stored state only once the old one has terminated and its
		// stop work has ended, its last state write in the store (startLoad): it would
		// otherwise go on from an older cursor, and miss a retry the old one parked just
		// before. One that terminated already (it stopped by itself) has begun its stop work:
		// the load waits for that alone.
		if st := t.stop(c, old.pid, sc.Name); st != nil {
			if st.done == nil {
				st.done = make(chan struct{})
			}
			cfg := *sc
			cfg.after = st.done
			sc = &cfg
		}
	} else {
		t.order = append(t.order, sc.Name)
	}
	props := subscriptionProps(sc, t.stops)
	if sc.Queue != nil {
		props = queueProps(sc, t.stops)
	}
	pid := c.Spawn(props)
	t.subs[sc.Name] = &child{cfg: sc, pid: pid}
}

// stop stops subscription name's actor and returns its entry in t.stopping, or nil when it
// has terminated already (it stopped itself: a fenced write; its stop work may still be under
// way).
func (t *topic) stop(c actor.Context, pid *actor.PID, name string) *stopping {
	if t.ended[pid.Id] {
		delete(t.ended, pid.Id)
		return nil
	}
	t.Forget(pid.Id) // a failed actor waiting for its restart stops instead
	st := t.stopping[pid.Id]
	if st == nil {
		st = &stopping{name: name}
		t.stopping[pid.Id] = st
	}
	c.Stop(pid)
	return st
}

// answerAfterStop answers waiters once no stop work of subscription name is under way: at
// once when none is, or else from a goroutine of its own, so the topic actor goes on (and
// the answers go out even if it stops meanwhile). Call it once the actor it waits for has
// terminated, its stop work begun.
func (t *topic) answerAfterStop(c actor.Context, name string, waiters []*actor.PID) {
	if len(waiters) == 0 {
		return
	}
	root, idle := c.ActorSystem().Root, t.stops.idle(name)
	answer := func() {
		for _, w := range waiters {
			root.Send(w, true)
		}
	}
	select {
	case <-idle:
		answer()
	default:
		go func() {
			<-idle // bounded: the stop work waits at most twice the stop grace
			answer()
		}()
	}
}

// remove stops the actor of subscription name and returns its entry in t.stopping, nil when
// the subscription has no actor here or its actor terminated already; found reports whether
// it had one.
func (t *topic) remove(c actor.Context, name string) (st *stopping, found bool) {
	ch, ok := t.subs[name]
	if !ok {
		return nil, false
	}
	st = t.stop(c, ch.pid, name)
	delete(t.subs, name)
	for i, n := range t.order {
		if n == name {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
	return st, true
}

func (t *topic) fanOut(c actor.Context, a *Appended) {
	defer a.Handed()
	if len(a.Entries) == 0 {
		return
	}
	through, from := a.Entries[len(a.Entries)-1].Seq, a.Entries[0].Seq
	matchedAny := make([]bool, len(a.Entries))
	for _, name := range t.order {
		ch := t.subs[name]
		d := &Deliver{Through: through, From: from}
		if ch.cfg.Filter == nil {
			d.Entries = a.Entries
			for i := range matchedAny {
				matchedAny[i] = true
			}
		} else {
			if ch.cfg.Filter.Advanced() > 0 {
				t.cfg.Metrics.Add(metrics.Key{Name: metrics.AdvancedFilterEvaluationCount, Scope: metrics.SubscriptionScope(t.cfg.Name, name)}, int64(len(a.Entries)))
			}
			for i, e := range a.Entries {
				if ch.cfg.Filter.Match(e.Event) {
					d.Entries = append(d.Entries, e)
					matchedAny[i] = true
				}
			}
		}
		if n := len(d.Entries); n > 0 {
			t.cfg.Metrics.Add(metrics.Key{Name: metrics.MatchedEventCount, Scope: metrics.SubscriptionScope(t.cfg.Name, name)}, int64(n))
		}
		c.Send(ch.pid, d)
	}
	unmatched := 0
	for _, m := range matchedAny {
		if !m {
			unmatched++
		}
	}
	if unmatched > 0 {
		t.cfg.Metrics.Add(metrics.Key{Name: metrics.UnmatchedEventCount, Scope: t.cfg.Name}, int64(unmatched))
	}
}
