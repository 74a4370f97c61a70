package actors

import (
	"context"
	"fmt"
	"sync"
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
