package deadletter

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// This file is the replay actor (SPEC §5): it re-delivers dead-lettered events to one
// subscription, with a fresh attempt budget and the same event ids, and no other subscription
// sees them.
//
// It does so with the subscription actor itself: the replay actor runs, as its supervised
// child, a second subscription actor with the live subscription's config (same sink, policy,
// delivery schema, headers and hooks, no filter) reading a private in-memory journal that holds
// just the replayed events. Delivery semantics are therefore exactly those of the subscription:
// batching, retries, probation, dead-lettering again when an event still cannot be delivered.
// The replay actor counts the events as they settle and stops when all have.

// ReplayConfig is what a replay actor needs.
type ReplayConfig struct {
	// Subscription is the config of the live subscription to replay into (the router builds a
	// fresh one). Its Store is replaced by the replay's own journal and its filter dropped.
	Subscription *actors.SubscriptionConfig
	// Events are the events to re-deliver, in the topic's input schema, each id once.
	Events []*schemas.Event
	// PublishTime is the publish time the replayed events get: their time to live starts
	// again from it.
	PublishTime time.Time
	// OnProgress, when set, is called from the actor as events settle (delivered, or ended
	// again). It must not block.
	OnProgress func(settled, total int)
	// OnDone, when set, is called once: when every event has settled, or when the replay is
	// stopped before that (Stopped set). It must not block.
	OnDone func(ReplayResult)
}

// ReplayResult is how a replay ended.
type ReplayResult struct {
	Total        int
	Delivered    int
	DeadLettered int
	Dropped      int
	// Stopped is set when the replay was stopped (router closed, subscription deleted or
	// replaced) before every event settled.
	Stopped bool
}

// ReplayProps returns the props of a replay actor.
// Its subscription actor is restarted with back-off when it fails, like a topic actor's.
func ReplayProps(cfg *ReplayConfig) *actor.Props {
	log := cfg.Subscription.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("replay", cfg.Subscription.Name)
	return actor.PropsFromProducer(func() actor.Actor {
		return &replay{cfg: cfg, ChildRestarts: actors.NewChildRestarts(100*time.Millisecond, time.Minute, log)}
	})
}

// replaySettled reports events of the replay that settled.
type replaySettled struct {
	ids     []string
	outcome replayOutcome
}

type replayOutcome uint8

const (
	replayDelivered replayOutcome = iota + 1
	replayDeadLettered
	replayDropped
)

// replay is the replay actor.
type replay struct {
	cfg     *ReplayConfig
	settled map[string]replayOutcome
	result  ReplayResult
	done    bool
	// journalID is the id of the journal this incarnation prepares (see [journalReady]).
	journalID uint64
	// ChildRestarts restarts the subscription actor after its back-off when it fails, with
	// timers of the replay actor's own; it is the actor's supervisor strategy.
	*actors.ChildRestarts
}

// Receive implements actor.Actor.
func (r *replay) Receive(c actor.Context) {
	if r.ChildRestarts.Receive(c) {
		return
	}
	switch msg := c.Message().(type) {
	case *actor.Started:
		r.start(c)
	case *journalReady:
		r.run(c, msg)
	case *replaySettled:
		for _, id := range msg.ids {
			if _, ok := r.settled[id]; ok || r.done {
				continue // delivered again after a restart: counted once
			}
			r.settled[id] = msg.outcome
			switch msg.outcome {
			case replayDelivered:
				r.result.Delivered++
			case replayDeadLettered:
				r.result.DeadLettered++
			case replayDropped:
				r.result.Dropped++
			}
		}
		if r.cfg.OnProgress != nil && !r.done {
			r.cfg.OnProgress(len(r.settled), r.result.Total)
		}
		if len(r.settled) >= r.result.Total {
			r.finish(false)
			c.Stop(c.Self())
		}
	case *actors.GetStatus:
		c.Respond(&actors.Status{Topic: r.cfg.Subscription.Topic, Subscription: r.cfg.Subscription.Name, Backlog: r.result.Total - len(r.settled)})
	case *actor.Stopping:
		r.finish(true)
	}
}

func (r *replay) start(c actor.Context) {
	r.settled = make(map[string]replayOutcome)
	r.result = ReplayResult{Total: len(r.cfg.Events)}
	if r.result.Total == 0 {
		r.finish(false)
		c.Stop(c.Self())
		return
	}
	// The journal is written off the mailbox, as every store is; the subscription starts once
	// it is ready.
	r.journalID = journalIDs.Add(1)
	id, live, at, events := r.journalID, r.cfg.Subscription, r.cfg.PublishTime, r.cfg.Events
	root, self := c.ActorSystem().Root, c.Self()
	go func() {
		msg := &journalReady{id: id, journal: store.NewMemory()}
		ctx := context.Background()
		if msg.err = msg.journal.PutTopic(ctx, live.Topic, nil); msg.err == nil {
			if msg.err = msg.journal.PutSubscription(ctx, live.Topic, live.Name, nil); msg.err == nil {
				_, msg.err = msg.journal.Append(ctx, live.Topic, at, events)
			}
		}
		root.Send(self, msg)
	}()
}

// journalIDs numbers the replay journals across incarnations, so that a restarted replay
// ignores the journal its predecessor asked for.
var journalIDs atomic.Uint64

// journalReady brings a replay its private journal, holding the events to replay.
type journalReady struct {
	id      uint64
	journal *store.Memory
	err     error
}

// run replays the events of journal through a copy of the live subscription.
func (r *replay) run(c actor.Context, m *journalReady) {
	if m.id != r.journalID {
		return // from before a restart
	}
	if m.err != nil {
		panic(fmt.Errorf("preparing the replay journal: %w", m.err))
	}
	journal, live := m.journal, r.cfg.Subscription
	root, self := c.ActorSystem().Root, c.Self()
	sc := *live
	shared := *live.SubscriptionShared // the live subscription's is the topic's: copy, then change
	sc.SubscriptionShared = &shared
	sc.Store = journal
	// Its state is the private journal's: the live subscription's state writer must not see
	// the replay's sequence numbers. Its dead letters are handed to the dead-letter actor from
	// there, which puts them in the durable outbox itself (a replay that a crash interrupts
	// before that is run again from the objects it read).
	sc.Writer = nil
	if h, ok := sc.Handoff.(*storeHandoff); ok {
		own := *h
		own.save = true
		sc.Handoff = &own
	}
	sc.Filter = nil    // these events matched once; a replay re-delivers them all
	sc.NoGauges = true // the gauges are the live subscription's
	onAttempt, onDeadLetter := live.OnAttempt, live.OnDeadLetter
	sc.OnAttempt = func(a *actors.AttemptRecord) {
		if onAttempt != nil {
			onAttempt(a)
		}
		var delivered, dropped []string
		for i, id := range a.EventIDs {
			if i >= len(a.Decisions) {
				break
			}
			switch dec := a.Decisions[i]; {
			case dec.Action == retry.Drop:
				dropped = append(dropped, id)
			case dec.Action == 0 && a.Outcome == schemas.Delivered:
				delivered = append(delivered, id)
			}
		}
		if len(delivered) > 0 {
			root.Send(self, &replaySettled{ids: delivered, outcome: replayDelivered})
		}
		if len(dropped) > 0 {
			root.Send(self, &replaySettled{ids: dropped, outcome: replayDropped})
		}
	}
	sc.OnDeadLetter = func(d *actors.DeadLetter) {
		if onDeadLetter != nil {
			onDeadLetter(d)
		}
		root.Send(self, &replaySettled{ids: []string{d.Event.ID}, outcome: replayDeadLettered})
	}
	if live.Logger != nil {
		live.Logger.Info("replaying dead letters", logattr.Topic, live.Topic, logattr.Subscription, live.Name, "events", r.result.Total)
	}
	c.Spawn(actors.SubscriptionProps(&sc))
}

func (r *replay) finish(stopped bool) {
	if r.done {
		return
	}
	r.done = true
	r.result.Stopped = stopped
	if r.cfg.OnDone != nil {
		r.cfg.OnDone(r.result)
	}
}
