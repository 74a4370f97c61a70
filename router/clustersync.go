package router

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/store"
)

// syncAll reads every definition from the store and applies what changed, within ctx and
// 30 s.
func (r *Router) syncAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	defs, err := r.store.Topics(ctx)
	if err != nil {
		return
	}
	names := map[string]bool{}
	for _, d := range defs {
		names[fold(d.Name)] = true
		r.syncTopicDef(ctx, d.Name, &d)
	}
	for _, name := range r.Topics() {
		if !names[fold(name)] {
			r.syncTopicDef(ctx, name, nil)
		}
	}
}

// syncTopic reads one topic's definitions from the store and applies what changed, within ctx
// and 30 s. It returns the error of a store that could not list the topics (nothing changed
// then).
func (r *Router) syncTopic(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	defs, err := r.store.Topics(ctx)
	if err != nil {
		return err
	}
	for _, d := range defs {
		if fold(d.Name) == fold(name) {
			r.syncTopicDef(ctx, d.Name, &d)
			return nil
		}
	}
	r.syncTopicDef(ctx, name, nil)
	return nil
}

// syncTopicDef makes the local runtime of a topic match its stored definition d (nil: the
// topic is gone), without writing to the store: another node wrote it. A subscription whose
// stored life is another than its runtime's here is started again (syncSubscriptionDef), so
// a topic deleted and created again unseen, with the same definitions, runs its
// subscriptions from their new state. It runs in the
// topic's turn, as the admin calls that change a topic do. It returns why it could not: the
// turn not had within ctx, or a store read that failed (nothing changed then).
func (r *Router) syncTopicDef(ctx context.Context, name string, d *store.Definition) error {
	release, err := r.turns.acquire(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	r.mu.RLock()
	t, closed := r.topics[fold(name)], r.closed
	r.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if t != nil && (d == nil || string(localSpec(t)) != string(d.Spec)) {
		// Read again in the turn: the listing may predate a change that just finished here.
		defs, err := r.store.Topics(ctx)
		if err != nil {
			return err
		}
		d = nil
		for i := range defs {
			if fold(defs[i].Name) == fold(name) {
				d = &defs[i]
			}
		}
		if d == nil {
			r.dropTopicLocally(r.cl.life, t)
			return nil
		}
	}
	if d == nil {
		return nil
	}
	var spec TopicSpec
	if err := json.Unmarshal(d.Spec, &spec); err != nil {
		r.log.Error("reading a topic another node stored", logattr.Topic, d.Name, "err", err)
		return nil
	}
	subDefs, err := r.store.Subscriptions(ctx, d.Name)
	if err != nil {
		return err
	}
	if t == nil {
		t = r.newTopicRuntime(d.Name, spec)
		if err := r.startTopic(t, nil); err != nil {
			return err
		}
		r.log.Info("topic created on another node", logattr.Topic, d.Name)
	} else if string(localSpec(t)) != string(d.Spec) {
		t.state.Store(newTopicState(spec)) // keys rotated elsewhere: publishes see old or new, whole
	}
	stored := map[string]bool{}
	for _, sd := range subDefs {
		stored[fold(sd.Name)] = true
		r.syncSubscriptionDef(t, sd)
	}
	r.mu.RLock()
	var gone []string
	for f := range t.subs { // subNames holds only names with capitals
		if !stored[f] {
			gone = append(gone, t.displayName(f))
		}
	}
	r.mu.RUnlock()
	for _, name := range gone {
		r.cl.unwant(t.name, name)
		r.stopReplays(t.name, name)
		r.mu.Lock()
		t.delSub(name)
		r.mu.Unlock()
		r.life.forget(subKey{t.name, name})
	}
	return nil
}

// localSpec is a topic's definition in force here, as the store keeps it.
func localSpec(t *topicRuntime) []byte {
	b, _ := json.Marshal(t.load().spec)
	return b
}

// syncSubscriptionDef applies a subscription definition read from the store when it differs
// from the one in force here, or when it is of another life of the subscription than the one
// in force here (sd.Life: deleted and created again, perhaps with the same definition, while
// this node missed the notices): the subscription is then started again from its stored
// state, as after a change of its definition. Without that, the actor here would keep its
// cursor of the old life, wait for journal numbers the new life reaches only later (a topic
// created again numbers its journal from 1 again), and deliver nothing of what comes before
// them; its stale state write would fail only after a delivery. A runtime built without a
// known life (created on this node) takes the stored one, and so does one whose actor runs on
// another node (nothing here to start again) or whose actor here loaded the stored life: the
// store gives a subscription's state a new epoch when it starts a state that does not decode
// afresh as the actor loads it, and that actor runs the new life already
// ([actors.SubscriptionConfig.OnLoaded]).
func (r *Router) syncSubscriptionDef(t *topicRuntime, sd store.Definition) {
	var rec record
	if err := json.Unmarshal(sd.Spec, &rec); err != nil {
		r.log.Error("reading a subscription another node stored", logattr.Topic, t.name, logattr.Subscription, sd.Name, "err", err)
		return
	}
	r.mu.RLock()
	cur, display, exists := t.sub(sd.Name)
	life := t.lives[fold(sd.Name)]
	r.mu.RUnlock()
	prov := r.life.get(subKey{t.name, sd.Name})
	if exists {
		a, _ := json.Marshal(record{SubscriptionSpec: *cur, Egrid: nonEmpty(prov)})
		b, _ := json.Marshal(record{SubscriptionSpec: rec.SubscriptionSpec, Egrid: nonEmpty(rec.Egrid)})
		same := string(a) == string(b)
		loaded, runs := r.cl.actorLife(cluster.Key{Topic: t.name, Subscription: display})
		switch {
		case same && (sd.Life == 0 || life == sd.Life):
			return
		case same && (sd.Life == loaded || !runs || life == 0 && loaded == 0):
			// The actor here loaded the stored life (the store gave its state a new epoch as
			// it loaded it: a state that did not decode, started afresh), or no actor runs
			// here to start again (the next start loads the stored state), or the life is
			// not known here yet: take the stored one.
			r.mu.Lock()
			t.setLife(sd.Name, sd.Life)
			r.mu.Unlock()
			return
		case same:
			r.log.Info("subscription deleted and created again on another node: starting it again from its new state",
				logattr.Topic, t.name, logattr.Subscription, sd.Name)
		}
		r.mu.Lock()
		t.delSub(sd.Name)
		r.mu.Unlock()
	}
	sc, err := r.restoreSubscription(t, sd)
	r.life.release()
	if err != nil {
		r.log.Error("applying a subscription another node stored", logattr.Topic, t.name, logattr.Subscription, sd.Name, "err", err)
		return
	}
	if sc == nil {
		r.cl.unwant(t.name, sd.Name)
		return
	}
	r.cl.want(sc)
}

func nonEmpty(p *provisioned) *provisioned {
	if p == nil || *p == (provisioned{}) {
		return nil
	}
	return p
}

// dropTopicWait bounds how long dropping a topic another node deleted waits, in the topic's
// turn, for the topic to stop: its replays and its subscription actors (their sink calls and
// last state writes, each within the actor's stop grace), its topic actor, and the close of
// its state writer after them.
const dropTopicWait = 3 * actors.DefaultStopGrace

// dropTopicLocally stops a topic another node deleted. The stop runs in a goroutine of its
// own that the cluster runtime's release waits for (background); the drop waits for it at
// most dropTopicWait and only until life ends (the cluster runtime's: close), then logs and
// leaves it to end in the background, so neither the sync that called it nor close is held by
// actors slow to stop or a store slow to take their last writes.
func (r *Router) dropTopicLocally(life context.Context, t *topicRuntime) {
	r.mu.Lock()
	if r.topics[fold(t.name)] != t {
		r.mu.Unlock()
		return
	}
	delete(r.topics, fold(t.name))
	names := slices.Collect(func(yield func(string) bool) {
		for k := range t.subs { // subNames holds only names with capitals
			if !yield(t.displayName(k)) {
				return
			}
		}
	})
	r.mu.Unlock()
	for _, n := range names {
		r.cl.unwant(t.name, n)
		r.life.forget(subKey{t.name, n})
	}
	stopped := make(chan struct{})
	r.cl.background(func() {
		defer close(stopped)
		r.stopReplays(t.name, "")
		t.commit.close()
		r.stopActor(t.pid, "topic actor "+t.name)           // its children's stop work has begun then
		_ = r.stops.WaitTopic(context.Background(), t.name) // bounded by the actors' stop grace
		_ = t.writer.Close()                                // after the actors: they flush on stop
		// Not once a topic of the name is back (created again while this stop outlasted
		// dropTopicWait): a new topic without subscriptions has no actor the metrics set's
		// guard would see, and it holds its own publish histogram already. Checked under
		// r.mu, which a create takes to add the topic. (A create that has built its runtime
		// and not yet added it, a few instructions, is not seen: its publish histogram would
		// then be dropped from /metrics until a restart.)
		r.mu.Lock()
		if _, again := r.topics[fold(t.name)]; !again {
			r.topicGone(t.name, names)
		}
		r.mu.Unlock()
	})
	ctx, cancel := context.WithTimeout(life, dropTopicWait)
	defer cancel()
	select {
	case <-stopped:
		r.log.Info("topic deleted on another node", logattr.Topic, t.name)
	case <-ctx.Done():
		r.log.Warn("topic deleted on another node: no longer waiting for its actors to stop; they stop and write their last state in the background",
			logattr.Topic, t.name, "wait", dropTopicWait, "err", ctx.Err())
	}
}
