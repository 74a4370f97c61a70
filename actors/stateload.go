package actors

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// startLoad reads a subscription's stored state and its topic's journal head off the mailbox
// and sends them to self as a [stateLoaded] with the returned boot's id: a disk store may wait
// behind a publish's fsync, and a router restarting a thousand subscriptions starts them all
// at once. Before it reads, it waits for the actor it replaces to terminate (cfg.after) and
// then for the stop work of the subscription's actors before it (stops, by name: the
// incarnation before a restart, the actor an update replaced), so that it loads their last
// state write, or loads once their stop grace passed (stopwork.go). Only then does it take
// one of cfg.LoadSlots for the read, when they are set: a load waiting for a stop holds none. withBodies reads the
// parked events with their events (LoadSubscription, for a queue subscription, which hands
// them out); without, only their index (LoadSubscriptionIndex: a push subscription reads a
// body when its event comes due). The read runs under wg and stops when the boot is
// cancelled; it has a context of its own, dropped with the boot once loaded: waiting on the
// actor's context would give every idle subscription a Done channel for good.
func startLoad(cfg *SubscriptionConfig, stops *stopRegistry, withBodies bool, wg *sync.WaitGroup, root *actor.RootContext, self *actor.PID) *boot {
	id := loadIDs.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	st, topic, name, slots := cfg.Store, cfg.Topic, cfg.Name, cfg.LoadSlots
	wg.Add(1)
	go func() {
		defer wg.Done()
		msg := &stateLoaded{id: id}
		defer func() { root.Send(self, msg) }()
		if after := cfg.after; after != nil { // the actor it replaces has yet to stop
			select {
			case <-after:
			case <-ctx.Done():
				msg.err = ctx.Err()
				return
			}
		}
		if idle := stops.idle(name); idle != closedChan { // the last writes of the actors before it
			select {
			case <-idle:
			case <-ctx.Done():
				msg.err = ctx.Err()
				return
			}
		}
		if slots != nil {
			select {
			case slots <- struct{}{}: // a free slot: no Done channel made
			default:
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					msg.err = ctx.Err()
					return
				}
			}
			defer func() { <-slots }()
		}
		load := st.LoadSubscriptionIndex
		if withBodies {
			load = st.LoadSubscription
		}
		if msg.state, msg.err = load(ctx, topic, name); msg.err != nil {
			msg.err = fmt.Errorf("loading subscription %s/%s: %w", topic, name, msg.err)
			return
		}
		if msg.head, msg.err = st.LastSeq(ctx, topic); msg.err != nil {
			msg.err = fmt.Errorf("loading journal head of topic %s: %w", topic, msg.err)
		}
	}()
	b := &boot{id: id, cancel: cancel, since: time.Now()}
	b.timer = time.AfterFunc(statusWait, func() { root.Send(self, &slowLoad{id: id}) })
	return b
}

// loadIDs numbers state loads across incarnations, so a restarted actor ignores the state its
// predecessor asked for.
var loadIDs atomic.Uint64

// boot is a subscription actor's state load in flight.
type boot struct {
	id     uint64
	cancel context.CancelFunc // of the load's context; the actor's stop calls it
	since  time.Time          // when the load started
	early  earlyMessages

	// waiting are the requests kept for the load's end ([boot.hold]); slow is set once the
	// load has run for statusWait (timer sends [slowLoad] then).
	waiting []earlyRequest
	slow    bool
	timer   *time.Timer
}

// earlyRequest is a request kept while the state loads, with whom to answer.
type earlyRequest struct {
	msg    any
	sender *actor.PID
}

// statusWait is how long a status request (or an EndProbation, or a queue's status request)
// that reaches an actor still loading its state waits for the load. A load that ends within it
// — a new subscription's, nearly every restart's — answers it with the loaded state, as if the
// request had come after it, so a client that creates a subscription and reads it back sees its
// delivery state; past it, a load that hangs (a store that stopped answering) answers it with
// the loading status ([Status.Loading]), and an EndProbation with [ErrLoading].
const statusWait = time.Second

// maxEarlyRequests bounds the requests kept while the state loads; past it they are answered
// at once, as after statusWait, so pollers of a hung load grow nothing.
const maxEarlyRequests = 64

// slowLoad tells an actor that its load id has run for statusWait.
type slowLoad struct{ id uint64 }

// hold keeps a request from sender for the load's end and reports whether it did: only within
// the load's first statusWait, with fewer than maxEarlyRequests kept, and when there is
// someone to answer.
func (b *boot) hold(msg any, sender *actor.PID) bool {
	if b.slow || sender == nil || len(b.waiting) >= maxEarlyRequests {
		return false
	}
	b.waiting = append(b.waiting, earlyRequest{msg: msg, sender: sender})
	return true
}

// overdue marks the load as past statusWait and hands back the requests kept, to be answered
// now; later ones are answered at once.
func (b *boot) overdue() []earlyRequest {
	b.slow = true
	w := b.waiting
	b.waiting = nil
	return w
}

// abandon answers the requests kept for the load ([boot.hold]) as the actor stops or restarts
// before its state is in: with an error wrapping [ErrNotRunning] that names the subscription,
// so their callers hear it now instead of waiting out their own timeouts.
func (b *boot) abandon(c actor.Context, topic, name string) {
	if len(b.waiting) == 0 {
		return
	}
	err := fmt.Errorf("event subscription %q of topic %q stopped before it had loaded its state (it was deleted or changed, moved, is shutting down, or restarts after a failure): %w",
		name, topic, ErrNotRunning)
	for _, r := range b.waiting {
		c.Send(r.sender, err)
	}
	b.waiting = nil
}

// end stops the load's context and its statusWait timer: the load is in, or the actor stops.
func (b *boot) end() {
	b.cancel()
	if b.timer != nil {
		b.timer.Stop()
	}
}

// status is the answer to a status request while the state loads: that it loads, and since
// when; nothing of the state, which is not known yet ([Status.Loading]).
func (b *boot) status(cfg *SubscriptionConfig) *Status {
	return &Status{Topic: cfg.Topic, Subscription: cfg.Name, Loading: true, LoadingSince: b.since}
}

// refuseEndProbation is the answer to an EndProbation while the state loads ([ErrLoading]).
func (b *boot) refuseEndProbation(cfg *SubscriptionConfig) error {
	return fmt.Errorf("ending the probation of event subscription %q of topic %q: %w (since %s, %s ago); nothing was changed: try again once it is loaded (until then its status says it is loading)",
		cfg.Name, cfg.Topic, ErrLoading, b.since.UTC().Format(time.RFC3339), time.Since(b.since).Round(time.Second))
}

// earlyMessages keeps the Delivers a subscription or queue actor receives while its state is
// loading, bounded by maxEarlyEntries. Requests are kept apart, for at most statusWait and at
// most maxEarlyRequests of them ([boot.hold]); a queue's settlement is answered at once (no
// lock is held before the load), and a queue's receives wait, each with its own MaxWait,
// bounded by the router's limit on long polls.
type earlyMessages struct {
	delivers []*Deliver
	entries  int    // in delivers, a Deliver without entries counting one
	through  uint64 // the highest seq announced by a Deliver not kept (0: all were kept)
}

// maxEarlyEntries bounds the journal entries kept from Delivers that arrive while a
// subscription loads its state, and the Delivers kept: one without entries (an append the
// subscription's filter does not match, a poll of the journal's end) counts as one entry.
// Past it only the journal head is kept, and the entries are read back from the journal.
const maxEarlyEntries = 4096

// keep holds c's message for after the load and reports whether it did: Delivers (up to
// maxEarlyEntries entries, then only the head they announce).
func (e *earlyMessages) keep(c actor.Context) bool {
	msg, ok := c.Message().(*Deliver)
	if !ok {
		return false
	}
	if n := max(len(msg.Entries), 1); e.through == 0 && e.entries+n <= maxEarlyEntries {
		e.delivers = append(e.delivers, msg)
		e.entries += n
	} else {
		e.through = max(e.through, msg.Through)
	}
	return true
}
