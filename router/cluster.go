package router

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/store"
)

// NodeHeader is the delivery header that names the cluster node that made an attempt: an
// egrid extension, sent in cluster mode only (README "Extensions").
const NodeHeader = "aeg-egrid-node"

// clusterRuntime is the router's side of cluster mode (package router/cluster has the
// membership, the leases and the notices). Every node runs every topic (committer, topic
// actor); a subscription's actor runs only on the node holding its lease, started and
// stopped by the node's placement loop through start and stop.
type clusterRuntime struct {
	r    *Router
	node *cluster.Node

	mu   sync.Mutex
	subs map[cluster.Key]*clusterSub
	gen  uint64

	quit      chan struct{}
	stopping  chan struct{} // closed when close begins: the hooks stop waiting (waitFor)
	done      chan struct{} // closed once run and its definition syncs (syncDefinitions) ended
	watching  bool          // run was started
	closeOnce sync.Once
	// life bounds the store reads of run and of its definition syncs, and a sync's wait for a
	// topic deleted elsewhere to stop (dropTopicLocally); close cancels it (endLife), so a
	// read waiting on a NATS server that stopped answering ends then.
	life    context.Context
	endLife context.CancelFunc

	// The definition syncs asked for (guarded by mu): by other nodes' notices (onChanged) and
	// every resyncRounds rounds (run). syncDefinitions makes them one at a time in a goroutine
	// of its own, so that a sync that takes long (its store reads, the turn of a topic an admin
	// call holds, a topic deleted elsewhere whose actors take their stop grace to stop) holds
	// neither the journal poll nor the dead-letter adoption of run's rounds. A topic asked for
	// again before its sync starts is synced once, and a full read covers every topic.
	syncTopics map[string]string // topics to read again, names by folded name
	syncEvery  bool              // a full read of the definitions is due
	syncWake   chan struct{}     // (buffer 1) a sync was asked for

	// adopt holds the subscriptions started here since the last adoption of dead letters
	// (guarded by mu); adoptAll asks run to adopt those of every subscription running here.
	adopt    map[cluster.Key]bool
	adoptAll bool

	// The reads of the topic catalogue that topicFresh's misses share (guarded by mu;
	// topiclookup.go).
	nextRead   *catalogueRead       // the read the misses since the last one started wait for
	lastRead   time.Time            // when the last read started
	readerDone chan struct{}        // readCatalogue runs while non-nil; closed when it ends
	noReads    bool                 // close began: no read starts
	misses     map[string]time.Time // names a read started then did not find, by folded name

	// orphans holds the deleted subscriptions whose dead letters this node, holding the
	// cluster's duty, adopted from the outbox: its dead-letter actor writes them (copy on
	// write; only run changes it).
	orphans atomic.Pointer[map[cluster.Key]bool]

	// closing counts the state writers of stopped or replaced actors still closing
	// (closeWriter), and the stops of topics deleted elsewhere (dropTopicLocally): release
	// waits for them. released (guarded by mu) is set as release begins: what starts after
	// it is not counted (background).
	closing  sync.WaitGroup
	released bool
	// left holds the writers of starts that stopped waiting for the topic actor as the
	// router closed (guarded by mu): release closes them once the topic actors stopped.
	left []*actors.StateWriter
}

// clusterSub is a subscription that should deliver: its actor's config, and while this node
// runs the actor, its own state writer (one per actor: a fenced write must not stop the
// other subscriptions of the topic). An entry whose config is nil (the subscription should
// not deliver any more) stays while its actor runs or starts here, so the stop that follows
// finds the writer to close.
type clusterSub struct {
	cfg      *actors.SubscriptionConfig
	gen      uint64
	writer   *actors.StateWriter
	starting bool // a start is under way: the writer it makes is set when it returns
	// loaded is the life (store epoch) the actor running with writer loaded, set by the actor
	// once it has (0 until then): see actorLife.
	loaded *atomic.Uint64
}

// joinCluster starts cluster mode: the node's membership and placement, and the definitions
// and journal watch.
func (r *Router) joinCluster() error {
	c := newClusterRuntime(r)
	node, err := cluster.Join(context.Background(), r.deps.NATS, r.cfg.Cluster, cluster.Hooks{
		Start: c.start, Stop: c.stop, Appended: c.appended, Changed: c.onChanged, Admin: c.admin,
	}, r.log)
	if err != nil {
		c.endLife()
		return err
	}
	c.node = node
	r.cl = c
	return nil
}

// newClusterRuntime returns the cluster runtime of r, its node not set yet.
func newClusterRuntime(r *Router) *clusterRuntime {
	c := &clusterRuntime{
		r: r, subs: make(map[cluster.Key]*clusterSub),
		quit: make(chan struct{}), done: make(chan struct{}), stopping: make(chan struct{}),
		syncWake: make(chan struct{}, 1),
	}
	c.life, c.endLife = context.WithCancel(context.Background())
	return c
}

// run watches the definitions and the journals: a topic another node changed is read again
// at once, every topic every resyncRounds rounds, and the journal end of every topic with
// actors here every round (a lost append notice costs at most that long); and it hands the
// dead-letter actor the records of subscriptions placed here. The definitions are read in a
// goroutine of its own (syncDefinitions), so a sync that takes long holds no round's journal
// poll or adoption; run waits for it before it ends. Its store reads, and the syncs', end
// when close cancels c.life.
func (c *clusterRuntime) run() {
	syncs := make(chan struct{})
	go func() {
		defer close(syncs)
		c.syncDefinitions()
	}()
	defer func() {
		<-syncs // it ends at quit, once the sync under way returns (c.life is cancelled)
		close(c.done)
	}()
	round := c.node.Options().LeaseTTL / 5
	t := time.NewTicker(round)
	defer t.Stop()
	n := 0
	for {
		select {
		case <-c.quit:
			return
		case <-t.C:
			n++
			if n%resyncRounds == 0 {
				c.requestSync("")
			}
			c.pollJournals()
			c.adoptDeadLetters()
		}
	}
}

// maxQueuedSyncs bounds the topics whose syncs wait to start; past it a full read is made
// instead, which covers them.
const maxQueuedSyncs = 256

// requestSync asks syncDefinitions to read topic's definitions again ("": every topic's).
func (c *clusterRuntime) requestSync(topic string) {
	c.mu.Lock()
	switch {
	case c.syncEvery: // covers it
	case topic == "" || len(c.syncTopics) >= maxQueuedSyncs:
		c.syncEvery, c.syncTopics = true, nil
	default:
		if c.syncTopics == nil {
			c.syncTopics = make(map[string]string)
		}
		c.syncTopics[fold(topic)] = topic
	}
	c.mu.Unlock()
	select {
	case c.syncWake <- struct{}{}:
	default: // a wake is pending: it takes this request too
	}
}

// syncDefinitions makes the syncs requestSync asks for, one at a time, until quit: a full read
// (after which run adopts the dead letters of every subscription running here, the deleted
// ones this node no longer knows among them), or the topics asked for. A sync that fails
// leaves it to the next full read.
func (c *clusterRuntime) syncDefinitions() {
	for {
		select {
		case <-c.quit:
			return
		case <-c.syncWake:
		}
		for {
			select {
			case <-c.quit:
				return
			default:
			}
			c.mu.Lock()
			every, topics := c.syncEvery, c.syncTopics
			c.syncEvery, c.syncTopics = false, nil
			c.mu.Unlock()
			if every {
				c.r.syncAll(c.life)
				c.mu.Lock()
				c.adoptAll = true
				c.mu.Unlock()
				continue
			}
			if len(topics) == 0 {
				break
			}
			for _, topic := range topics {
				select {
				case <-c.quit:
					return
				default:
				}
				_ = c.r.syncTopic(c.life, topic) // the next full read catches up
			}
		}
	}
}

// resyncRounds is how many placement rounds pass between two full reads of the definitions.
const resyncRounds = 10

// watch starts run; New calls it once the topics are restored.
func (c *clusterRuntime) watch() {
	c.watching = true
	go c.run()
}

// close stops the placement loop and the watch; the actors keep running until the router
// stops its topics. The starts and stops under way stop waiting for the topic actors and
// for state writes (waitFor), and ctx bounds the wait for them and for the placement's NATS
// calls ([cluster.Node.Close]). The watch's store reads are cancelled at once (what they were
// for — reading definitions again, polling journals, adopting dead letters — the next start
// and the other nodes do), so it ends at once; ctx bounds the wait for it all the same, and
// for a read of the topic catalogue under way (topicFresh), cancelled likewise, whose waiting
// misses end with [ErrClosed]. A sync dropping a topic deleted elsewhere stops waiting for its
// actors at once too (dropTopicLocally), which stop in the background (release waits). Should ctx end first, the watch may still apply a definition
// it had read to this router's topics (it writes nothing to the store, and a topic it starts
// once the router is closed is stopped at once by startTopic). Idempotent.
func (c *clusterRuntime) close(ctx context.Context) {
	c.closeOnce.Do(func() {
		reader := c.stopReads()
		close(c.stopping)
		c.node.Close(ctx)
		close(c.quit)
		c.endLife()
		if reader != nil { // a read of the catalogue must not start a topic after Close took the list
			select {
			case <-reader:
			case <-ctx.Done():
				c.r.log.Warn("closing the cluster runtime: no longer waiting for its read of the topic catalogue to end; the read is cancelled", "err", ctx.Err())
			}
		}
		if !c.watching {
			return
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			select {
			case <-c.done:
			default:
				c.r.log.Warn("closing the cluster runtime: no longer waiting for its watch of the definitions and journals to end; its store reads are cancelled", "err", ctx.Err())
			}
		}
	})
}

// closeCluster stops cluster mode's loops, if any, waiting for them until ctx ends.
func (r *Router) closeCluster(ctx context.Context) {
	if r.cl != nil {
		r.cl.close(ctx)
	}
}

// release closes the writers of the actors that ran here, waits for those still closing in
// the background (closeWriter), and gives up the leases. Called by Close after the topic
// actors stopped, in the part of it its context bounds.
func (c *clusterRuntime) release(ctx context.Context) {
	c.mu.Lock()
	c.released = true
	var ws []*actors.StateWriter
	for _, s := range c.subs {
		if s.writer != nil {
			ws = append(ws, s.writer)
			s.writer = nil
		}
	}
	ws = append(ws, c.left...)
	c.left = nil
	c.mu.Unlock()
	for _, w := range ws {
		_ = w.Close()
	}
	c.closing.Wait()
	c.node.Release(ctx)
}

// writerGrace bounds how long a placement step (a start, a stop) waits for the writes the
// state writer of a stopped actor still holds: the actor's own stop grace once more.
const writerGrace = actors.DefaultStopGrace

// closeWriter closes w, the state writer of an actor of this node that stopped or was
// replaced, in a goroutine of its own, and returns a channel closed once it has: Close waits
// for the write under way, which a store that stopped answering (NATS gone quiet, JetStream
// stalled) holds up to its timeout, and the start or stop that waited for it would hold the
// subscription's later starts and stops, and the node's Close, as long. The goroutine ends,
// and the writer with it, once that write returns; release waits for it.
//
// A write that lands after the next actor of the subscription loaded its state costs events
// attempted again, never one lost: an update is a change to the state before it (the
// cursor only moves forward, parked events are put or deleted one by one), decided by an
// actor that has stopped, and the store applies it to the record as it is then. A next
// actor on another node is fenced against it: whichever of its first write and the late
// one comes second fails its compare-and-set (store.ErrFenced) — a late write fenced is
// dropped (its events are attempted again from the state the next actor loaded), a next
// actor fenced restarts from the store, late write included. A late write whose
// subscription was deleted since, or created again, is refused by its epoch
// (store.ErrStaleEpoch). A failure of a writer no longer current is ignored (writeFailed).
func (c *clusterRuntime) closeWriter(w *actors.StateWriter) <-chan struct{} {
	done := make(chan struct{})
	c.background(func() {
		defer close(done)
		_ = w.Close()
	})
	return done
}

// background runs fn in a goroutine of its own that release waits for (closing); once release
// began, the router's Close is past waiting, and nothing waits for it (a WaitGroup must not
// count up from zero while it is waited for).
func (c *clusterRuntime) background(fn func()) {
	c.mu.Lock()
	if c.released {
		c.mu.Unlock()
		go fn()
		return
	}
	c.closing.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.closing.Done()
		fn()
	}()
}

// closeWithin closes w, the state writer of subscription k's actor, which has stopped, and
// waits at most writerGrace for it (closeWriter): the next actor, here or on the node the
// lease goes to, should load what w still holds, but a write that hangs must not hold the
// placement step. Past the grace it logs and returns; the writer closes in the background.
func (c *clusterRuntime) closeWithin(k cluster.Key, w *actors.StateWriter) {
	done := c.closeWriter(w)
	t := time.NewTimer(writerGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-c.stopping: // release waits for it, after the topic actors stopped
	case <-t.C:
		c.r.log.Warn("the last state write of a stopped subscription actor did not finish in time; going on without waiting for it (its events may be attempted again)",
			logattr.Topic, k.Topic, logattr.Subscription, k.Subscription, "grace", writerGrace)
	}
}

// want registers (or replaces) the config of a subscription that should deliver.
func (c *clusterRuntime) want(sc *actors.SubscriptionConfig) {
	k := cluster.Key{Topic: sc.Topic, Subscription: sc.Name}
	c.mu.Lock()
	c.gen++
	s := c.subs[k]
	if s == nil {
		s = &clusterSub{}
		c.subs[k] = s
	}
	s.cfg, s.gen = sc, c.gen
	gen := c.gen
	c.mu.Unlock()
	c.node.Want(k, gen)
}

// unwant says a subscription should not deliver (deleted, awaiting validation, failed).
func (c *clusterRuntime) unwant(topic, name string) {
	k := cluster.Key{Topic: topic, Subscription: name}
	c.mu.Lock()
	if s := c.subs[k]; s != nil && s.writer == nil && !s.starting {
		delete(c.subs, k)
	} else if s != nil {
		s.cfg = nil // stop drops it (after the start under way, which sets its writer)
	}
	c.mu.Unlock()
	c.node.Unwant(k)
}

// start is the placement's Start hook: this node took the lease.
func (c *clusterRuntime) start(k cluster.Key) error {
	c.mu.Lock()
	s := c.subs[k]
	if s == nil || s.cfg == nil {
		c.mu.Unlock()
		return fmt.Errorf("subscription %s is not known on this node yet", k)
	}
	cfg := *s.cfg
	s.starting = true // an unwant meanwhile keeps s: the writer made here must reach the stop
	c.mu.Unlock()
	started := false
	defer func() {
		if !started {
			c.mu.Lock()
			s.starting = false
			if s.cfg == nil && s.writer == nil && c.subs[k] == s {
				delete(c.subs, k) // unwanted meanwhile: no actor, no stop to come
			}
			c.mu.Unlock()
		}
	}()
	t, err := c.r.topic(k.Topic)
	if err != nil {
		return err
	}
	var w *actors.StateWriter // the writer's first write comes after it is set (Enqueue)
	w = actors.NewStateWriter(watchedStore{c.r.store, func(err error) { c.writeFailed(k, w, err) }}, k.Topic)
	shared := *cfg.SubscriptionShared // the topic's, shared with its other subscriptions: copy, then change
	cfg.SubscriptionShared = &shared
	cfg.Writer = w
	headers := make(map[string]string, len(cfg.Headers)+1)
	for h, v := range cfg.Headers {
		headers[h] = v
	}
	cfg.Headers = headers
	cfg.Headers[NodeHeader] = c.node.Name()
	cfg.OnFenced = func() { c.writeFailed(k, w, store.ErrFenced) }
	loaded := new(atomic.Uint64) // the actor's to write, the sync's to read: no lock in the actor
	cfg.OnLoaded = loaded.Store
	if _, err := c.waitFor(c.r.system.Root.RequestFuture(t.pid, &actors.AddSubscription{Config: &cfg}, 10*time.Second)); err != nil {
		// Not answered in time, the request may still be in the topic actor's mailbox: the
		// actor it starts would run and deliver here while the placement counts it as not
		// running, so no lease lost or handed over would ever stop it. The removal queued
		// after it ends that actor (its state written) before the writer closes.
		rerr := err
		if !errors.Is(err, errStopping) {
			_, rerr = c.waitFor(c.r.system.Root.RequestFuture(t.pid, &actors.RemoveSubscription{Name: k.Subscription}, 30*time.Second))
			if rerr != nil && !errors.Is(rerr, errStopping) {
				c.r.log.Error("stopping a subscription actor whose start failed", logattr.Topic, k.Topic, logattr.Subscription, k.Subscription, "err", rerr)
			}
		}
		if errors.Is(rerr, errStopping) {
			// The router stops its topic actors next, with the actor this start may yet
			// make, which writes its state to w as it stops: release closes w after.
			c.mu.Lock()
			c.left = append(c.left, w)
			c.mu.Unlock()
		} else {
			c.closeWithin(k, w)
		}
		return fmt.Errorf("starting subscription %s: %w", k, err)
	}
	started = true
	c.mu.Lock()
	// s is still c.subs[k], even if the subscription was unwanted meanwhile: the placement's
	// stop, which comes after this start, closes w.
	old := s.writer
	s.writer, s.starting, s.loaded = w, false, loaded
	if c.adopt == nil {
		c.adopt = make(map[cluster.Key]bool)
	}
	c.adopt[k] = true
	c.mu.Unlock()
	if old != nil {
		// The new actor runs already: waiting for the old writer's last write would protect
		// nothing, and one that hangs would hold this start (closeWriter).
		c.closeWriter(old)
	}
	c.r.log.Info("subscription placed on this node", logattr.Topic, k.Topic, logattr.Subscription, k.Subscription)
	return nil
}

// adoptDeadLetters hands the dead-letter actor the outbox records of the subscriptions that
// started here since the last round (and every so often of all that run here): records the
// node that ran them before had not written yet, which this node writes at their due time.
// Every so often too, the node holding the cluster's duty adopts the records of
// subscriptions deleted (or whose topic was deleted) before their records were written: no
// node runs them any more, so none would write them otherwise. It writes them, as a router
// of its own writes a deleted subscription's records, to the destination each record carries.
func (c *clusterRuntime) adoptDeadLetters() {
	d := c.r.dead
	c.mu.Lock()
	keys, all := c.adopt, c.adoptAll
	c.adopt, c.adoptAll = nil, false
	c.mu.Unlock()
	if d == nil || (len(keys) == 0 && !all) {
		return
	}
	if !c.r.deps.NATS.IsConnected() {
		c.mu.Lock()
		c.adoptAll = true // once connected again (the actors stop meanwhile anyway)
		c.mu.Unlock()
		return
	}
	duty := all && c.node.Duty()
	if all && !duty {
		c.orphans.Store(nil)
	}
	ctx, cancel := context.WithTimeout(c.life, 30*time.Second)
	defer cancel()
	node := c.node
	found := map[cluster.Key]bool{}
	stored := map[string]map[string]bool{} // the store's subscriptions by topic; nil: topic gone
	keep := func(topic, sub string) (bool, error) {
		k := cluster.Key{Topic: topic, Subscription: sub}
		if node.Running(k) {
			return all || keys[k], nil
		}
		if !duty || found[k] {
			return found[k], nil
		}
		orphan, err := c.deleted(ctx, k, stored)
		if err != nil || !orphan {
			return false, err
		}
		found[k] = true
		c.addOrphan(k) // before the records are handed: the actor may write them at once
		return true, nil
	}
	err := d.outbox.Adopt(ctx, c.r.system.Root, d.pid, keep)
	if duty && err == nil {
		c.orphans.Store(&found) // those deleted subscriptions whose records are still in the outbox
	}
	if err != nil {
		c.r.log.Warn("reading the dead-letter outbox for subscriptions placed here or deleted; trying again later", "err", err)
		c.mu.Lock()
		c.adoptAll = true
		c.mu.Unlock()
	}
}

// deleted reports whether subscription k is deleted (or its topic): neither this node nor the
// store knows it under its name as created. stored caches the store's subscriptions by topic.
// A subscription this node knows is not deleted, even if another node deleted it a moment
// ago: its records are adopted the next time, once this node has read the deletion.
func (c *clusterRuntime) deleted(ctx context.Context, k cluster.Key, stored map[string]map[string]bool) (bool, error) {
	if t, _, display, err := c.r.lookup(k.Topic, k.Subscription); err == nil && t.name == k.Topic && display == k.Subscription {
		return false, nil
	}
	subs, ok := stored[k.Topic]
	if !ok {
		defs, err := c.r.store.Subscriptions(ctx, k.Topic)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return false, fmt.Errorf("reading the subscriptions of topic %q: %w", k.Topic, err)
		default:
			subs = make(map[string]bool, len(defs))
			for _, def := range defs {
				subs[def.Name] = true
			}
		}
		stored[k.Topic] = subs
	}
	return !subs[k.Subscription], nil
}

// addOrphan adds k to the orphans (run calls it).
func (c *clusterRuntime) addOrphan(k cluster.Key) {
	m := map[cluster.Key]bool{k: true}
	if old := c.orphans.Load(); old != nil {
		maps.Copy(m, *old)
	}
	c.orphans.Store(&m)
}

// actorLife reports whether this node runs (or is starting) the actor of subscription k, and
// the life (store epoch) that actor loaded: 0 while it has not loaded yet, or when it runs
// none.
func (c *clusterRuntime) actorLife(k cluster.Key) (life uint64, runs bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.subs[k]
	if s == nil || (s.writer == nil && !s.starting) {
		return 0, false
	}
	if s.writer != nil && s.loaded != nil {
		life = s.loaded.Load()
	}
	return life, true
}

// writesDeadLetters reports whether this node's dead-letter actor writes the records of
// subscription k: those of a subscription it runs, and, while it holds the cluster's duty,
// those of a deleted subscription it adopted. It takes no lock: the actor calls it.
func (c *clusterRuntime) writesDeadLetters(k cluster.Key) bool {
	if c.node.Running(k) {
		return true
	}
	m := c.orphans.Load()
	return m != nil && (*m)[k] && c.node.Duty()
}

// stop is the placement's Stop hook: stop the actor (the topic actor answers once the
// actor's stop work has ended, off its mailbox: its sink calls returned and its last state
// write is in, each waited for at most its stop grace), then close its writer, so the lease
// goes only after the state is written — or once the writer had writerGrace more: a write
// that hangs goes on in the background (closeWithin).
func (c *clusterRuntime) stop(k cluster.Key) {
	if t, err := c.r.topic(k.Topic); err == nil {
		_, err := c.waitFor(c.r.system.Root.RequestFuture(t.pid, &actors.RemoveSubscription{Name: k.Subscription}, 30*time.Second))
		if errors.Is(err, errStopping) {
			// The actor may not have stopped yet: it writes its state as the router stops
			// its topic actor, and release closes its writer after.
			c.r.log.Warn("the router is closing: not waiting for a subscription actor to stop; it stops with its topic", logattr.Topic, k.Topic, logattr.Subscription, k.Subscription)
			return
		}
		if err != nil {
			c.r.log.Error("stopping a subscription actor", logattr.Topic, k.Topic, logattr.Subscription, k.Subscription, "err", err)
		} else if _, _, _, lerr := c.r.lookup(k.Topic, k.Subscription); lerr != nil {
			// Deleted, not moved: its counters go with it, unless it runs here again already
			// (created again under its name), which the Set's guard sees.
			c.r.subscriptionGone(k.Topic, k.Subscription)
		}
	}
	c.mu.Lock()
	s := c.subs[k]
	var w *actors.StateWriter
	if s != nil {
		w, s.writer = s.writer, nil
		if s.cfg == nil {
			delete(c.subs, k)
		}
	}
	c.mu.Unlock()
	if w != nil {
		c.closeWithin(k, w)
	}
	c.r.log.Info("subscription left this node", logattr.Topic, k.Topic, logattr.Subscription, k.Subscription)
}

// errStopping is waitFor's error once the router began to close.
var errStopping = errors.New("the router is closing")

// waitFor returns f's answer, or errStopping once the router begins to close (stopping): a
// start or stop must not hold the router's Close for the time the topic actor has to answer
// (the topic actors are stopped next anyway). The request's own timeout ends the goroutine
// that waits for it.
func (c *clusterRuntime) waitFor(f *actor.Future) (any, error) {
	type answer struct {
		res any
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := f.Result()
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-c.stopping:
		select {
		case a := <-ch: // answered already
			return a.res, a.err
		default:
			return nil, errStopping
		}
	}
}

// writeFailed is called when a state write of the actor running with writer w failed (by
// the writer, or the actor's OnFenced): the writer keeps the subscription's first error for
// good, so the actor stops, and the placement starts it again with a new writer, loading the
// state, if this node still holds the lease — after a fenced write (another node wrote the
// state) as after an outage shorter than the lease. A write that found the subscription
// deleted (store.ErrNotFound) the writer drops instead of keeping; the actor is stopped all
// the same. A report about an actor that is no longer the current one is ignored.
func (c *clusterRuntime) writeFailed(k cluster.Key, w *actors.StateWriter, err error) {
	c.mu.Lock()
	s := c.subs[k]
	current := s != nil && s.writer == w
	if current {
		s.writer = nil
	}
	c.mu.Unlock()
	if !current {
		return
	}
	if errors.Is(err, store.ErrFenced) {
		c.r.log.Warn("a state write of a subscription was fenced: another node wrote its state; stopping its actor here", logattr.Topic, k.Topic, logattr.Subscription, k.Subscription)
	} else {
		c.r.log.Warn("a state write of a subscription failed; restarting its actor from the stored state", logattr.Topic, k.Topic, logattr.Subscription, k.Subscription, "err", err)
	}
	go func() {
		defer func() { _ = w.Close() }()
		if t, err := c.r.topic(k.Topic); err == nil {
			_, _ = c.r.system.Root.RequestFuture(t.pid, &actors.RemoveSubscription{Name: k.Subscription}, 30*time.Second).Result()
		}
		c.node.ActorStopped(k)
	}()
}

// watchedStore reports a failed subscription state write of one actor's writer at once, so
// the actor stops without waiting for its next write to find out.
type watchedStore struct {
	store.Store
	onFailed func(error)
}

// UpdateSubscription implements [store.Store].
func (f watchedStore) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	err := f.Store.UpdateSubscription(ctx, topic, sub, u)
	if err != nil {
		f.onFailed(err)
	}
	return err
}

// appended is the node's Appended hook: another node appended to a topic's journal.
func (c *clusterRuntime) appended(topic string, last uint64) {
	if t, err := c.r.topic(topic); err == nil {
		c.r.system.Root.Send(t.pid, &actors.JournalAt{Last: last})
	}
}

// pollJournals tells the topics that have actors here where their journals end: the safety
// net for lost append notices.
func (c *clusterRuntime) pollJournals() {
	c.mu.Lock()
	topics := map[string]bool{}
	for k, s := range c.subs {
		if s.writer != nil {
			topics[k.Topic] = true
		}
	}
	c.mu.Unlock()
	for topic := range topics {
		ctx, cancel := context.WithTimeout(c.life, c.node.Options().LeaseTTL/5)
		last, err := c.r.store.LastSeq(ctx, topic)
		cancel()
		if err == nil {
			c.appended(topic, last)
		}
	}
}

// onChanged is the node's Changed hook: another node changed a topic's definitions (or one
// of its subscriptions'). syncDefinitions reads them again.
func (c *clusterRuntime) onChanged(topic, _ string) {
	if topic != "" {
		c.requestSync(topic)
	}
}

// runSubscriptionTimeout bounds runSubscription's wait for the topic actor: for a stop, until
// the subscription's actor has stopped and its stop work ended, which takes up to its stop
// grace for the attempts in flight and as long again for its last state write. Tests set it
// lower.
var runSubscriptionTimeout = 10 * time.Second

// runSubscription starts (sc non-nil) or stops the delivery of a subscription after its
// definition changed on this node: in the topic actor here, or in cluster mode on the node
// its placement picks, and the other nodes are told to read the definition.
func (r *Router) runSubscription(t *topicRuntime, name string, sc *actors.SubscriptionConfig) error {
	if r.cl != nil {
		if sc != nil {
			r.cl.want(sc)
		} else {
			r.cl.unwant(t.name, name)
		}
		r.cl.node.Changed(t.name, name)
		return nil
	}
	var msg any = &actors.RemoveSubscription{Name: name}
	verb := "stopping"
	if sc != nil {
		msg, verb = &actors.AddSubscription{Config: sc}, "starting"
	}
	if _, err := r.system.Root.RequestFuture(t.pid, msg, runSubscriptionTimeout).Result(); err != nil {
		return fmt.Errorf("%s event subscription %q: %w", verb, name, err)
	}
	return nil
}

// queueRemote reports, in cluster mode, that another node runs a queue subscription's
// actor: its pull calls are routed there ([clusterRuntime.ask]).
func (r *Router) queueRemote(topic, name string) bool {
	return r.cl != nil && !r.cl.node.Running(cluster.Key{Topic: topic, Subscription: name})
}

// NodeName returns this router's cluster node name, "" when it does not run in cluster mode.
func (r *Router) NodeName() string {
	if r.cl == nil {
		return ""
	}
	return r.cl.node.Name()
}

// RunsSubscription reports whether this router runs the actor of a subscription: outside
// cluster mode, whether the subscription exists; in cluster mode, whether this node holds its
// lease and runs its actor (one node at a time).
func (r *Router) RunsSubscription(topic, name string) bool {
	t, _, display, err := r.lookup(topic, name)
	if err != nil {
		return false
	}
	if r.cl == nil {
		return true
	}
	return r.cl.node.Running(cluster.Key{Topic: t.name, Subscription: display})
}

// ClusterMembers returns the live cluster nodes as this node last saw them (nil outside
// cluster mode).
func (r *Router) ClusterMembers() []string {
	if r.cl == nil {
		return nil
	}
	return r.cl.node.Members()
}
