package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/internal/bucketkeys"
)

// round is the placement period: every round the node renews its membership and leases,
// reads the membership and takes, hands over or gives up leases.
func (n *Node) round() time.Duration { return n.opts.LeaseTTL / 5 }

// stopAfter is how long after its last renewal a lease's actor is stopped when renewals
// fail: well before the lease lapses (LeaseTTL) and another node may start it.
func (n *Node) stopAfter() time.Duration { return n.opts.LeaseTTL * 3 / 5 }

func (n *Node) loop() {
	defer close(n.done)
	t := time.NewTicker(n.round())
	defer t.Stop()
	for {
		n.place()
		select {
		case <-n.quit: // before a tick or a poke that are ready too: no round after Close
			return
		default:
		}
		// A round also runs when an actor's stop falls due (nextStop): while NATS is away
		// rounds end at once, and one that waited for the next tick would stop it up to a
		// round late.
		var due <-chan time.Time
		at, ok := n.nextStop()
		var timer *time.Timer
		if ok {
			timer = time.NewTimer(time.Until(at))
			due = timer.C
		}
		select {
		case <-n.quit:
			return
		case <-t.C:
		case <-n.poke:
		case <-due:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// nextStop is when the first actor running here is to stop, or the duty to be given up,
// unless its lease is renewed first: stopAfter past the lease's last renewal. ok is false
// when no actor runs here and the node has no duty.
func (n *Node) nextStop() (at time.Time, ok bool) {
	for _, l := range n.held {
		if l.running && (!ok || l.renewed.Before(at)) {
			at, ok = l.renewed, true
		}
	}
	if l := n.dutyLease; l != nil && n.duty.Load() && (!ok || l.renewed.Before(at)) {
		at, ok = l.renewed, true
	}
	return at.Add(n.stopAfter()), ok
}

// watchMembers keeps n.view, the live members, listed every round within the round's bound
// (their keys in the members bucket, which expire unless renewed). Until Close, which may
// cancel a listing under way (n.life).
func (n *Node) watchMembers() {
	defer close(n.viewDone)
	t := time.NewTicker(n.round())
	defer t.Stop()
	for {
		if n.nc.IsConnected() {
			ctx, cancel := context.WithTimeout(n.life, n.opts.LeaseTTL*3/10)
			keys, err := listKeys(ctx, n.members, streamKeys(n.js, n.members))
			cancel()
			if err == nil {
				n.mu.Lock()
				n.view, n.viewAt = keys, time.Now()
				n.mu.Unlock()
				n.Poke()
			}
		}
		select {
		case <-n.quit: // before a tick that is ready too
			return
		default:
		}
		select {
		case <-n.quit:
			return
		case <-t.C:
		}
	}
}

// place runs one placement round.
func (n *Node) place() {
	// Actors whose leases went unrenewed for stopAfter stop first, before any call to NATS:
	// the round's calls may wait until its deadline.
	now := time.Now()
	for k, l := range n.held {
		n.lapse(k, l, now)
	}
	if l := n.dutyLease; l != nil {
		n.lapseDuty(l, now)
	}
	// One bound for the whole round, longer than the round itself (a loaded NATS server must
	// not make a healthy node think it is cut off); Close may end the round sooner (n.life).
	// Each call whose failure would stop an actor (or give the duty up) is cut short, besides,
	// to when that falls due (cut): a round stuck on NATS then ends each actor's wait right
	// when its stop falls due, and it stops on time (3/5 TTL after its last renewal), however
	// long NATS takes to answer, well before its lease lapses (TTL). Only those calls are cut:
	// one lease's missed renewal must not shorten the other leases' renewals, which would then
	// miss theirs on a slow NATS, and so on until every actor of the node stopped.
	deadline := now.Add(n.opts.LeaseTTL * 3 / 10)
	ctx, cancel := context.WithDeadline(n.life, deadline)
	defer cancel()
	cut := func(at time.Time) (context.Context, context.CancelFunc) {
		if at.Before(deadline) {
			return context.WithDeadline(ctx, at)
		}
		return ctx, func() {}
	}
	connected := n.nc.IsConnected()
	if connected {
		// Every renewal waits for this put: it ends when the first stop falls due.
		putCtx, cancelPut := ctx, context.CancelFunc(func() {})
		if at, ok := n.nextStop(); ok {
			putCtx, cancelPut = cut(at)
		}
		_, err := n.members.Put(putCtx, n.opts.NodeName, []byte(n.incarnation()))
		cancelPut()
		if err != nil {
			connected = false
		}
	}
	// The membership comes from its own loop (watchMembers): listing it can take seconds
	// while a NATS server is lost, and renewals must not wait for it. Without a fresh view
	// the node renews and keeps what it holds, and hands nothing over and takes nothing.
	n.mu.Lock()
	live, viewAt := n.view, n.viewAt
	n.mu.Unlock()
	viewOK := connected && !viewAt.IsZero() && now.Sub(viewAt) < n.opts.LeaseTTL/2
	if viewOK {
		live = slices.Clone(live)
		if !slices.Contains(live, n.opts.NodeName) {
			live = append(live, n.opts.NodeName)
		}
		slices.Sort(live)
		seen := make(map[string]int, len(live))
		for _, m := range live {
			seen[m] = n.seen[m] + 1
		}
		n.seen = seen
	}
	seen := n.seen

	n.mu.Lock()
	want := make(map[Key]uint64, len(n.want))
	for k, g := range n.want {
		want[k] = g
	}
	lost := n.lost
	n.lost = make(map[Key]bool)
	if viewOK {
		n.live = live
	}
	n.mu.Unlock()

	for k := range lost {
		if l := n.held[k]; l != nil {
			l.running = false
		}
	}
	// Renew what this node keeps first, all at once (stopping an actor can take seconds, and
	// must not delay the other renewals), then give up, hand over and start.
	var keep, drop, handOver []Key
	for k := range n.held {
		_, wanted := want[k]
		switch {
		case !wanted:
			drop = append(drop, k)
		case !viewOK:
			keep = append(keep, k)
		case Owner(live, k) != n.opts.NodeName && seen[Owner(live, k)] >= 2:
			handOver = append(handOver, k) // a node joined (and stayed a round)
		default:
			keep = append(keep, k)
		}
	}
	var renewed map[Key]renewal
	if connected {
		renewed = n.renew(ctx, cut, keep, func(k Key) { n.lapse(k, n.held[k], time.Now()) })
	}
	for _, k := range keep {
		l := n.held[k]
		if l == nil {
			continue // lapsed while the renewals ran (renew's failed)
		}
		res, tried := renewed[k]
		switch {
		case !tried || (res.err != nil && !isConflict(res.err)):
			n.lapse(k, l, time.Now()) // NATS is away: stop the actor before the lease lapses
		case res.err != nil:
			n.log.Warn("lost the lease of a subscription; stopping its actor", k.logAttrs(), "err", res.err)
			n.stop(k, l)
			delete(n.held, k)
		default:
			l.rev, l.renewed = res.rev, now
		}
	}
	for _, k := range drop {
		n.stopAndRelease(k, n.held[k])
	}
	for _, k := range handOver {
		n.log.Info("handing a subscription over", k.logAttrs(), "to", Owner(live, k))
		n.stopAndRelease(k, n.held[k])
	}
	for _, k := range keep {
		l := n.held[k]
		if l == nil || !renewed[k].ok() {
			continue
		}
		if gen := want[k]; l.running && l.gen != gen {
			n.stop(k, l) // a new config: start it again with it
		}
		n.start(k, l, want[k])
	}
	dutyCtx, cancelDuty := ctx, context.CancelFunc(func() {})
	if l := n.dutyLease; l != nil && n.duty.Load() {
		dutyCtx, cancelDuty = cut(l.renewed.Add(n.stopAfter()))
	}
	n.placeDuty(dutyCtx, now, connected, viewOK, live, seen)
	cancelDuty()
	if !viewOK {
		n.publishRunning()
		return
	}
	// Take the free leases of the subscriptions this node is the preferred owner of.
	for k, gen := range want {
		if n.held[k] != nil || Owner(live, k) != n.opts.NodeName || n.isBusy(k) {
			continue
		}
		rev, err := n.leases.Create(ctx, k.leaseKey(), []byte(n.opts.NodeName))
		if err != nil {
			continue // held by another node (which hands it over), or NATS failed: next round
		}
		l := &lease{rev: rev, renewed: now}
		n.held[k] = l
		n.start(k, l, gen)
	}
	n.publishRunning()
}

// renewal is the result of one lease renewal.
type renewal struct {
	rev uint64
	err error
}

func (r renewal) ok() bool { return r.err == nil && r.rev != 0 }

// maxRenewing bounds the lease renewals in flight at once.
const maxRenewing = 64

// renew renews the leases of keys concurrently (each an Update on the revision held, its
// context cut short to when its actor must stop: cut), and calls failed, on the caller's
// goroutine, for each renewal that failed for want of NATS as soon as it failed, so that an
// actor whose renewal ended at its stop's due time stops then, not once every other renewal
// of the round ended.
func (n *Node) renew(ctx context.Context, cut func(time.Time) (context.Context, context.CancelFunc), keys []Key, failed func(Key)) map[Key]renewal {
	type call struct {
		k      Key
		rev    uint64
		ctx    context.Context
		cancel context.CancelFunc
	}
	calls := make([]call, 0, len(keys))
	for _, k := range keys {
		l := n.held[k]
		c := call{k: k, rev: l.rev, ctx: ctx, cancel: func() {}}
		if l.running {
			c.ctx, c.cancel = cut(l.renewed.Add(n.stopAfter())) // its actor stops then
		}
		calls = append(calls, c)
	}
	type result struct {
		k Key
		r renewal
	}
	done := make(chan result, len(calls))
	go func() {
		sem := make(chan struct{}, maxRenewing)
		for _, c := range calls {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				defer c.cancel()
				rev, err := n.leases.Update(c.ctx, c.k.leaseKey(), []byte(n.opts.NodeName), c.rev)
				done <- result{c.k, renewal{rev: rev, err: err}}
			}()
		}
	}()
	out := make(map[Key]renewal, len(calls))
	for range calls {
		res := <-done
		out[res.k] = res.r
		if res.r.err != nil && !isConflict(res.r.err) {
			failed(res.k)
		}
	}
	return out
}

// lapse handles a lease not renewed for want of NATS: the actor stops once stopAfter passed
// since the last renewal, and the lease is forgotten once it lapsed. Every round calls it
// for every lease held before its calls to NATS, and for those it could not renew after.
func (n *Node) lapse(k Key, l *lease, now time.Time) {
	since := now.Sub(l.renewed)
	if l.running && since >= n.stopAfter() {
		n.log.Warn("cannot renew the lease of a subscription; stopping its actor before the lease lapses", k.logAttrs(), "sinceRenewal", since)
		n.stop(k, l)
	}
	if since >= n.opts.LeaseTTL {
		delete(n.held, k)
	}
}

// start starts a subscription's actor, off the placement loop like stop (the Start hook
// asks the topic actor, whose mailbox may be long under load, and a round waiting for it
// would renew no lease and stop no lapsing actor meanwhile). The lease counts as running at
// once; a Start that fails marks it lost, so the next round starts it again while the lease
// is held. No start is issued while an earlier start or stop of the key is under way.
func (n *Node) start(k Key, l *lease, gen uint64) {
	if l.running || n.hooks.Start == nil || n.isBusy(k) {
		return // an operation under way: start it in a later round
	}
	l.running, l.gen = true, gen
	n.publishRunning()
	began := n.async(k, func() {
		if err := n.hooks.Start(k); err != nil {
			n.log.Warn("starting a subscription actor; trying again next round", k.logAttrs(), "err", err)
			n.mu.Lock()
			n.lost[k] = true
			n.mu.Unlock()
		}
	})
	if !began { // the node is closing
		l.running = false
		n.publishRunning()
	}
}

// stop stops a subscription's actor, off the placement loop: stopping an actor closes its
// state writer, which waits for its last write, and while NATS reconnects that can take the
// store's timeout; a round that waited for it would renew no other lease and stop no other
// actor whose lease is lapsing, so those would outlive their leases on this node while
// another node takes them over. Until the stop is done the key is neither started nor taken
// here again; then, if given, then runs (the release of a lease handed over) — unless the
// node began to close meanwhile: the Stop hook may then have returned before its actor
// stopped, so the lease lapses instead.
func (n *Node) stop(k Key, l *lease) { n.stopThen(k, l, nil) }

func (n *Node) stopThen(k Key, l *lease, then func()) {
	if !l.running || n.hooks.Stop == nil {
		l.running = false
		if then != nil {
			n.async(k, then)
		}
		return
	}
	l.running = false
	n.publishRunning() // before the actor stops: its dead letters are no longer this node's
	n.async(k, func() {
		n.hooks.Stop(k)
		select {
		case <-n.quit:
			// Closing: the hook may have stopped waiting for the actor, which stops (and
			// writes its state) only with the router's topics. The lease lapses instead.
			return
		default:
		}
		if then != nil {
			then()
		}
	})
}

// async runs fn in a goroutine of its own, after every earlier operation on k has finished:
// a stop issued while its actor's start is under way waits for that start, so the actor is
// never started after the stop meant to end it. Close waits for all of them. Once Close
// waits for them (or stopped waiting) async runs nothing and returns false: a placement
// round Close left running starts no actor, and stops none (the actors stop with the
// router's topics, writing their state; the lease of a stop not run lapses).
func (n *Node) async(k Key, fn func()) bool {
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return false
	}
	o := n.busy[k]
	if o == nil {
		o = &keyOps{}
		n.busy[k] = o
	}
	prev, done := o.last, make(chan struct{})
	o.last = done
	o.pending++
	n.ops.Add(1) // with closing false, under mu: before Close's Wait
	n.mu.Unlock()
	go func() {
		defer n.ops.Done()
		if prev != nil {
			<-prev
		}
		fn()
		close(done)
		n.mu.Lock()
		if o.pending--; o.pending == 0 {
			delete(n.busy, k)
		}
		n.mu.Unlock()
		n.Poke() // a round may now start or take it again
	}()
	return true
}

// keyOps is the start and stop operations of one key under way (guarded by Node.mu).
type keyOps struct {
	pending int
	last    chan struct{} // closed when the latest one has finished
}

// isBusy reports whether a start or stop of k is under way.
func (n *Node) isBusy(k Key) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.busy[k] != nil
}

// stopAndRelease gives a lease up: the actor stops (and writes its state) before the lease is
// deleted, so the next owner starts from that state.
func (n *Node) stopAndRelease(k Key, l *lease) {
	delete(n.held, k)
	rev := l.rev
	n.stopThen(k, l, func() {
		ctx, cancel := context.WithTimeout(n.life, n.opts.LeaseTTL*3/10)
		defer cancel()
		_ = n.leases.Delete(ctx, k.leaseKey(), jetstream.LastRevision(rev))
	})
}

func (n *Node) publishRunning() {
	running := make(map[Key]bool, len(n.held))
	for k, l := range n.held {
		if l.running {
			running[k] = true
		}
	}
	n.running.Store(&running)
}

// isConflict reports a compare-and-set that found another revision: another node took the
// lease (after this one's lapsed).
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyNotFound)
}

// listKeys lists the live keys of kv within ctx. KeyValue.Keys of nats.go does not: once its
// watch is made it waits for the end of the listing however long it takes, and while a
// NATS server is lost that took seconds, in which the placement round renewed no lease and
// stopped no lapsing actor.
//
// A watch's end-of-listing marker can also come before every key was delivered: the watcher
// sends it on the first message whose pending count is zero, and the server's count is not
// monotonic while keys are written (nats-io/nats-server#4824), which the members bucket is
// all the time (every node renews its key every round). A member left out looks gone: the
// node takes leases meant for it and hands them back a round later, and Members reports a
// smaller cluster. Or the marker never comes: a member's key the watch counted that expires
// (a node gone without releasing its membership) before it is delivered leaves the watch
// waiting for the next renewal of any member, which may not come before the listing's
// deadline; the watch is then left after a pause without a value
// (bucketkeys.InitialValues). Either way, stored (streamKeys: the keys kv's stream holds) is
// then read, and each of its keys the watch did not deliver is read with a get (a deleted or
// expired one is not found and left out).
func listKeys(ctx context.Context, kv jetstream.KeyValue, stored func(context.Context) ([]string, error)) ([]string, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var keys []string
	seen := make(map[string]bool)
	err = bucketkeys.InitialValues(ctx, w, func(e jetstream.KeyValueEntry) error {
		if !seen[e.Key()] {
			seen[e.Key()] = true
			if e.Operation() == jetstream.KeyValuePut {
				keys = append(keys, e.Key())
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	want, err := stored(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	for _, k := range want {
		if seen[k] {
			continue
		}
		_, err := kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		case err != nil:
			return nil, fmt.Errorf("listing keys: reading key %s, which the watch did not deliver: %w", k, err)
		default:
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// streamKeys returns what lists the keys kv's stream holds a message for
// (bucketkeys.Stored): every key written and not expired or purged, deleted ones included.
func streamKeys(js jetstream.JetStream, kv jetstream.KeyValue) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		return bucketkeys.Stored(ctx, js, kv.Bucket(), ">")
	}
}
