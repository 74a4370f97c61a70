package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router/internal/natstoken"
	"github.com/egridio/egrid/router/logattr"
)

// Key names one subscription.
type Key struct{ Topic, Subscription string }

// String is "topic/subscription".
func (k Key) String() string { return k.Topic + "/" + k.Subscription }

// logAttrs are the attributes a log line about k's subscription carries: its topic and its
// name, each under its own key (router/logattr), as every line about a subscription does.
func (k Key) logAttrs() slog.Attr {
	return slog.Group("", logattr.Topic, k.Topic, logattr.Subscription, k.Subscription)
}

// leaseKey escapes k into a key-value key: each part as the JetStream store escapes names
// (natstoken.Escape: letters, digits and '-' stay, every other byte becomes '_' and two hex
// digits), and '.' joins the two parts.
func (k Key) leaseKey() string {
	return natstoken.Escape(k.Topic) + "." + natstoken.Escape(k.Subscription)
}

// Hooks are what the router does when the node's placement decides. They are called from
// the node's own goroutines, never with a lock held; Start and Stop one at a time.
type Hooks struct {
	// Start starts the subscription's actor on this node; the node holds its lease. An
	// error leaves the lease held and Start is called again next round; a Start that fails
	// leaves no actor running (Stop is not called for it).
	Start func(Key) error
	// Stop stops the subscription's actor and returns once its state is written, or once a
	// write that hangs had a bounded time (it goes on in the background): the node releases
	// the lease (or lets it lapse) only after. Once the node is closing Stop may return
	// before the actor stopped (the router stops it with its topics): the lease then lapses.
	Stop func(Key)
	// Appended: another node appended to topic's journal up to last.
	Appended func(topic string, last uint64)
	// Changed: another node changed the definition of topic (subscription "") or of one of
	// its subscriptions; read it from the store.
	Changed func(topic, subscription string)
	// Admin answers a request another node routed here ([Node.Request]); ctx ends when the
	// caller stops waiting (its deadline, or a cancel notice). The answer goes back in one
	// NATS message, so it must fit in [Node.MaxPayload]. When it cannot be sent (larger than
	// that, or the connection is closing) the node logs why and calls unsent, when not nil,
	// with the error: unsent undoes what the answer handed out (a receive's locks) and
	// returns a short answer to send instead (nil: none), so the caller learns of the
	// failure at once rather than at its deadline.
	Admin func(ctx context.Context, req []byte) (answer []byte, unsent func(error) []byte)
}

// Node is this process's membership in the cluster and the placement of subscription actors
// on it. Create it with [Join]; tell it which subscriptions exist with [Node.Want] and
// [Node.Unwant].
type Node struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	opts    Options
	log     *slog.Logger
	hooks   Hooks
	members jetstream.KeyValue
	leases  jetstream.KeyValue
	subs    []*nats.Subscription

	poke     chan struct{}
	quit     chan struct{}
	done     chan struct{}
	viewDone chan struct{} // closed when watchMembers returns
	closed   sync.Once

	// life bounds the NATS calls of the placement loop, the membership watch and the lease
	// releases after stops; Close cancels it (endLife) once it no longer waits for them, so
	// a call waiting on a NATS server that stopped answering ends then.
	life    context.Context
	endLife context.CancelFunc
	// released is set by Release: Running and Duty report nothing from then on, whatever a
	// placement round that Close stopped waiting for still publishes.
	released atomic.Bool

	mu      sync.Mutex
	closing bool                         // Close waits for the starts and stops begun: no other begins
	want    map[Key]uint64               // wanted subscriptions and their config generation
	lost    map[Key]bool                 // actors that stopped by themselves (fenced): start again if still held
	running atomic.Pointer[map[Key]bool] // the actors running here (copy on write), for Running
	live    []string                     // the latest membership view placement used
	view    []string                     // the members watchMembers listed last, at viewAt
	viewAt  time.Time

	inflightMu sync.Mutex
	inflight   map[string]context.CancelFunc // admin requests being answered here, by id

	slot uint32 // this node name's number, unique in the cluster for good

	// busy holds the actor starts and stops under way per key (guarded by mu): they run off
	// the placement loop, one after the other, and a key is not started or taken again until
	// they are done.
	busy map[Key]*keyOps
	ops  sync.WaitGroup // the starts and stops under way; Close waits for them

	held map[Key]*lease // owned by the loop goroutine (and Release once the loop has ended)
	seen map[string]int // rounds each member has been seen live in a row (loop)

	// dutyLease is the cluster's duty lease while this node holds it (owned like held); duty
	// says the node does the duty (duty.go).
	dutyLease *lease
	duty      atomic.Bool
}

type lease struct {
	rev     uint64
	renewed time.Time
	running bool
	gen     uint64
}

// Subjects and buckets.
func (n *Node) subject(s string) string { return n.opts.Prefix + ".cluster." + s }
func (n *Node) adminSubject(node string) string {
	return n.subject("node." + node + ".admin")
}

// Join creates the cluster's buckets when they do not exist, announces this node and starts
// its placement loop. Close it, then (after the router stopped its actors) Release.
func Join(ctx context.Context, nc *nats.Conn, opts Options, hooks Hooks, log *slog.Logger) (*Node, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.WithDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n := &Node{
		nc: nc, js: js, opts: opts, log: log.With("node", opts.NodeName), hooks: hooks,
		poke: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}), viewDone: make(chan struct{}),
		want: make(map[Key]uint64), lost: make(map[Key]bool),
		held: make(map[Key]*lease), seen: make(map[string]int), busy: make(map[Key]*keyOps),
	}
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
		desc string
	}{
		{&n.members, opts.Prefix + "_members", "egrid cluster members (expire unless renewed)"},
		{&n.leases, opts.Prefix + "_leases", "egrid subscription leases: which node runs each subscription actor"},
	} {
		err = untilLeader(ctx, func(ctx context.Context) (err error) {
			*b.kv, err = js.KeyValue(ctx, b.name)
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				*b.kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b.name, Description: b.desc, History: 1, TTL: opts.LeaseTTL, Storage: jetstream.FileStorage, Replicas: opts.Replicas})
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("cluster: creating bucket %s: %w", b.name, err)
		}
	}
	// The buckets' TTL is the lease TTL every node must use: one that differs (another
	// --cluster-lease-ttl, or buckets made by an earlier run) would let this node stop its
	// actors after a lease lapsed. The buckets win.
	for _, kv := range []jetstream.KeyValue{n.leases, n.members} {
		var st jetstream.KeyValueStatus
		err := untilLeader(ctx, func(ctx context.Context) (err error) {
			st, err = kv.Status(ctx)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("cluster: reading bucket %s: %w", kv.Bucket(), err)
		}
		if ttl := st.TTL(); ttl > 0 && ttl != n.opts.LeaseTTL {
			n.log.Warn("the cluster's buckets have another lease TTL than this node's setting; using the buckets' (delete buckets "+opts.Prefix+"_leases and "+opts.Prefix+"_members while no node runs to change it)", "setting", n.opts.LeaseTTL, "buckets", ttl)
			n.opts.LeaseTTL = ttl
			opts.LeaseTTL = ttl
		}
	}
	if err = untilLeader(ctx, func(ctx context.Context) (err error) {
		n.slot, err = reserveSlot(ctx, js, opts)
		return err
	}); err != nil {
		return nil, err
	}
	var prev jetstream.KeyValueEntry
	err = untilLeader(ctx, func(ctx context.Context) (err error) {
		prev, err = n.members.Get(ctx, opts.NodeName)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: reading the membership of node %s: %w", opts.NodeName, err)
	}
	if e := prev; e != nil && string(e.Value()) != n.incarnation() {
		// Another live node of this name, or this node's previous process whose membership
		// has not lapsed yet: the leases it held lapse within the TTL either way.
		n.log.Warn("a node of this name was live a moment ago: node names must be unique (--node-name); if it was this node before a restart, its subscriptions resume within the lease TTL", "ttl", opts.LeaseTTL)
	}
	if err := untilLeader(ctx, func(ctx context.Context) error {
		_, err := n.members.Put(ctx, opts.NodeName, []byte(n.incarnation()))
		return err
	}); err != nil {
		return nil, fmt.Errorf("cluster: announcing node %s: %w", opts.NodeName, err)
	}
	for subj, fn := range map[string]nats.MsgHandler{
		n.subject("appended"):         n.onAppended,
		n.subject("defs"):             n.onChanged,
		n.adminSubject(opts.NodeName): n.onAdmin,
	} {
		s, err := nc.Subscribe(subj, fn)
		if err != nil {
			n.unsubscribe()
			return nil, fmt.Errorf("cluster: subscribing to %s: %w", subj, err)
		}
		n.subs = append(n.subs, s)
	}
	n.life, n.endLife = context.WithCancel(context.Background())
	go n.watchMembers()
	go n.loop()
	return n, nil
}

// incarnation is this node's membership value: the name of its NATS connection, unique per
// process, so a node restarting under its name is not mistaken for a duplicate.
func (n *Node) incarnation() string {
	id, _ := n.nc.GetClientID()
	return fmt.Sprintf("%s %d %s", n.opts.NodeName, id, n.nc.ConnectedServerId())
}

func (n *Node) unsubscribe() {
	for _, s := range n.subs {
		_ = s.Unsubscribe()
	}
}

// Name is this node's name.
func (n *Node) Name() string { return n.opts.NodeName }

// Options returns the node's options with the defaults filled in.
func (n *Node) Options() Options { return n.opts }

// Want says subscription k should run on some node; gen is its config's generation: when it
// changes while this node runs the actor, the actor is restarted (Stop, Start) with the new
// config.
func (n *Node) Want(k Key, gen uint64) {
	n.mu.Lock()
	n.want[k] = gen
	n.mu.Unlock()
	n.Poke()
}

// Unwant says subscription k should not run (deleted, or not provisioned): this node stops
// its actor, if it runs it, and releases the lease.
func (n *Node) Unwant(k Key) {
	n.mu.Lock()
	delete(n.want, k)
	n.mu.Unlock()
	n.Poke()
}

// ActorStopped reports that k's actor stopped by itself (a state write failed or was fenced
// by another writer): the node starts it again next round (reloading the state) while it
// still holds the lease, and forgets it otherwise.
func (n *Node) ActorStopped(k Key) {
	n.mu.Lock()
	n.lost[k] = true
	n.mu.Unlock()
	n.Poke()
}

// Poke runs a placement round now.
func (n *Node) Poke() {
	select {
	case n.poke <- struct{}{}:
	default:
	}
}

// Running reports whether this node runs k's actor (never once Release ran). It takes no
// lock: actors may call it.
func (n *Node) Running(k Key) bool {
	if n.released.Load() {
		return false
	}
	m := n.running.Load()
	return m != nil && (*m)[k]
}

// Members returns the live nodes as this node last saw them, sorted.
func (n *Node) Members() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.live)
}

// Holder returns the node holding k's lease ("" when none does).
func (n *Node) Holder(ctx context.Context, k Key) (string, error) {
	e, err := n.leases.Get(ctx, k.leaseKey())
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("cluster: reading the lease of %s: %w", k, err)
	}
	return string(e.Value()), nil
}

type notice struct {
	Node  string `json:"n"`
	Topic string `json:"t"`
	Sub   string `json:"s,omitempty"`
	Last  uint64 `json:"l,omitempty"`
}

// Appended tells the other nodes that this one appended to topic's journal up to last.
// Best effort: the others also poll the journal's end.
func (n *Node) Appended(topic string, last uint64) {
	b, _ := json.Marshal(notice{Node: n.opts.NodeName, Topic: topic, Last: last})
	_ = n.nc.Publish(n.subject("appended"), b)
}

// Changed tells the other nodes that this one changed a definition (subscription "" for the
// topic's own). Best effort: the others also read the definitions periodically.
func (n *Node) Changed(topic, subscription string) {
	b, _ := json.Marshal(notice{Node: n.opts.NodeName, Topic: topic, Sub: subscription})
	_ = n.nc.Publish(n.subject("defs"), b)
}

func (n *Node) onAppended(m *nats.Msg) {
	var nt notice
	if json.Unmarshal(m.Data, &nt) != nil || nt.Node == n.opts.NodeName || n.hooks.Appended == nil {
		return
	}
	n.hooks.Appended(nt.Topic, nt.Last)
}

func (n *Node) onChanged(m *nats.Msg) {
	var nt notice
	if json.Unmarshal(m.Data, &nt) != nil || nt.Node == n.opts.NodeName || n.hooks.Changed == nil {
		return
	}
	n.hooks.Changed(nt.Topic, nt.Sub)
}

// Headers of admin requests: the request's id, the time the caller still waits for the
// answer (milliseconds), and on a cancel notice the id of the request the caller gave up.
const (
	hdrID      = "Egrid-Request"
	hdrTimeout = "Egrid-Timeout-Ms"
	hdrCancel  = "Egrid-Cancel"
)

// Bounds of the time an admin request's handler may run: the caller's wait, by default
// DefaultRequestTimeout, at most MaxRequestTimeout.
const (
	DefaultRequestTimeout = 30 * time.Second
	MaxRequestTimeout     = 5 * time.Minute
)

func (n *Node) onAdmin(m *nats.Msg) {
	if id := m.Header.Get(hdrCancel); id != "" {
		n.inflightMu.Lock()
		cancel := n.inflight[id]
		n.inflightMu.Unlock()
		if cancel != nil {
			cancel()
		}
		return
	}
	if n.hooks.Admin == nil {
		return
	}
	timeout := DefaultRequestTimeout
	if ms, err := strconv.ParseInt(m.Header.Get(hdrTimeout), 10, 64); err == nil && ms > 0 {
		timeout = min(time.Duration(ms)*time.Millisecond, MaxRequestTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	// Registered before the next message of the subscription is dispatched, so a cancel
	// notice that follows the request always finds it.
	id := m.Header.Get(hdrID)
	if id != "" {
		n.inflightMu.Lock()
		if n.inflight == nil {
			n.inflight = make(map[string]context.CancelFunc)
		}
		n.inflight[id] = cancel
		n.inflightMu.Unlock()
	}
	data := slices.Clone(m.Data)
	go func() { // the handler may wait on actors: not on the connection's dispatcher
		defer func() {
			if id != "" {
				n.inflightMu.Lock()
				delete(n.inflight, id)
				n.inflightMu.Unlock()
			}
			cancel()
		}()
		answer, unsent := n.hooks.Admin(ctx, data)
		err := m.Respond(answer)
		if err == nil {
			return
		}
		n.log.Warn("the answer to a request another node routed here could not be sent", "bytes", len(answer), "maxPayload", n.nc.MaxPayload(), "err", err)
		if unsent == nil {
			return
		}
		if instead := unsent(err); instead != nil {
			if err := m.Respond(instead); err != nil {
				n.log.Warn("the error answer to a request another node routed here could not be sent either", "err", err)
			}
		}
	}()
}

// MaxPayload is the largest message the node's NATS connection sends (the server's
// max_payload): the bound of an answer of [Hooks.Admin].
func (n *Node) MaxPayload() int64 { return n.nc.MaxPayload() }

// ErrNoResponders is returned by [Node.Request] when the node is not reachable.
var ErrNoResponders = errors.New("cluster: the node is not reachable")

var requestIDs atomic.Uint64

// Request sends req to node's admin handler and returns its answer. ctx bounds the wait
// (DefaultRequestTimeout without a deadline) and the handler's: the request carries the time
// left, the handler's context ends then, and when ctx ends first (cancelled, or its deadline
// passed) the node is told at once (a cancel notice), so a handler waiting for something (a
// long poll) stops waiting rather than running on for nobody.
func (n *Node) Request(ctx context.Context, node string, req []byte) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRequestTimeout)
		defer cancel()
	}
	d, _ := ctx.Deadline()
	id := fmt.Sprintf("%s.%d", n.opts.NodeName, requestIDs.Add(1))
	msg := nats.NewMsg(n.adminSubject(node))
	msg.Data = req
	msg.Header.Set(hdrID, id)
	msg.Header.Set(hdrTimeout, strconv.FormatInt(max(time.Until(d).Milliseconds(), 1), 10))
	m, err := n.nc.RequestMsgWithContext(ctx, msg)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w: %s", ErrNoResponders, node)
	}
	if err != nil {
		if ctx.Err() != nil {
			c := nats.NewMsg(n.adminSubject(node))
			c.Header.Set(hdrCancel, id)
			_ = n.nc.PublishMsg(c)
			return nil, fmt.Errorf("cluster: asking node %s: %w", node, ctx.Err())
		}
		return nil, fmt.Errorf("cluster: asking node %s: %w", node, err)
	}
	return m.Data, nil
}

// Owner returns the preferred owner of k among members: the highest rendezvous hash.
func Owner(members []string, k Key) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m))
		h.Write([]byte{0})
		h.Write([]byte(k.Topic))
		h.Write([]byte{0})
		h.Write([]byte(k.Subscription))
		s := mix(h.Sum64())
		if best == "" || s > bestScore || s == bestScore && m < best {
			best, bestScore = m, s
		}
	}
	return best
}

// mix is splitmix64's finaliser: FNV's low bits alone spread poorly over few members.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Close stops the placement loop, the membership watch and the notice subscriptions; the
// actors keep running and the leases stay held until Release (or until they lapse). ctx
// bounds every wait of Close: for the placement round and the membership listing under way
// (each bounded by 3/10 of the lease TTL, on a NATS server that stopped answering), then for
// the actor starts and stops under way (the Start and Stop hooks, and the lease releases after
// them). Once ctx ends Close logs what it left and returns:
//   - the round and the listing: their NATS calls are cancelled, so they end at once; a lease
//     renewal, lease or membership write one of them had sent may still land, which lasts
//     until the lease TTL like any lease of a node that stopped (Release then leaves the
//     leases to lapse). They start and stop no actor (no start or stop begins once Close
//     waits for them) and publish nothing once Release ran (Running and Duty report nothing).
//   - the starts and stops: they go on in the background — an actor whose stop did not
//     finish still writes its state as the router stops it, and a lease not released lapses.
//
// Idempotent.
func (n *Node) Close(ctx context.Context) {
	n.closed.Do(func() {
		close(n.quit)
		defer n.unsubscribe()
		defer n.endLife() // ends the lease releases still waiting on NATS, if Close left them
		var left []string
		if !waitClosed(ctx, n.done) {
			left = append(left, "the placement round")
		}
		if !waitClosed(ctx, n.viewDone) {
			left = append(left, "the membership listing")
		}
		n.mu.Lock()
		n.closing = true // no start or stop begins from now: the wait below sees them all
		n.mu.Unlock()
		if len(left) > 0 {
			n.endLife() // their NATS calls end now (after closing: the round left starts nothing)
			n.log.Warn("closing the cluster node: no longer waiting for its NATS calls under way (a NATS server that stopped answering?); they are cancelled, and a lease or membership they renewed or took meanwhile lapses after the lease TTL",
				"left", left, "ttl", n.opts.LeaseTTL, "err", ctx.Err())
		}
		ops := make(chan struct{})
		go func() {
			n.ops.Wait()
			close(ops)
		}()
		if !waitClosed(ctx, ops) {
			n.mu.Lock()
			keys := make([]string, 0, len(n.busy))
			for k := range n.busy {
				keys = append(keys, k.String())
			}
			n.mu.Unlock()
			if len(keys) > 0 { // none: the last one ended as ctx did
				n.log.Warn("closing the cluster node: no longer waiting for the subscription actor starts and stops under way; an actor whose stop did not finish writes its state as the router stops it, and a lease not released lapses after the lease TTL",
					"subscriptions", keys, "ttl", n.opts.LeaseTTL, "err", ctx.Err())
			}
		}
	})
}

// waitClosed waits until ch is closed or ctx ends, and reports whether ch was closed (a
// closed ch wins over an ended ctx).
func waitClosed(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// Release gives up every lease this node holds and its membership, so the others take its
// subscriptions over at once rather than after the lease TTL. Call it after Close, once the
// router stopped the actors and wrote their state. From then on Running and Duty report
// nothing. It waits for the placement loop to end (it does at once: Close cancelled its NATS
// calls) until ctx ends; a loop that did not end in time still owns the leases, which then
// lapse after the lease TTL.
func (n *Node) Release(ctx context.Context) {
	n.released.Store(true) // the router stopped the actors
	n.duty.Store(false)
	if !waitClosed(ctx, n.done) {
		n.log.Warn("releasing the cluster node: its placement round has not ended; its leases and membership lapse after the lease TTL instead of being released", "ttl", n.opts.LeaseTTL, "err", ctx.Err())
		return
	}
	if !n.nc.IsConnected() {
		return // the leases lapse by themselves
	}
	n.releaseDuty(ctx)
	for k, l := range n.held {
		_ = n.leases.Delete(ctx, k.leaseKey(), jetstream.LastRevision(l.rev))
		delete(n.held, k)
	}
	_ = n.members.Delete(ctx, n.opts.NodeName)
}

// MaxSlot bounds [Node.Slot].
const MaxSlot = 1<<24 - 1

// Slot is a number unique to this node's name in the cluster, kept for good (a node started
// again under its name gets it back): the dead-letter outbox numbers this node's records
// from it, so nodes never give two records one ID.
func (n *Node) Slot() uint32 { return n.slot }

// reserveSlot returns the slot of opts.NodeName, taking the next free one (a compare-and-set
// counter in bucket P_nodes) the first time the name joins.
func reserveSlot(ctx context.Context, js jetstream.JetStream, opts Options) (uint32, error) {
	name := opts.Prefix + "_nodes"
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, Description: "egrid cluster node names and their slots", History: 1, Replicas: opts.Replicas})
	}
	if err != nil {
		return 0, fmt.Errorf("cluster: creating bucket %s: %w", name, err)
	}
	key := "node." + opts.NodeName
	for range 100 {
		if e, err := kv.Get(ctx, key); err == nil {
			var slot uint32
			if _, err := fmt.Sscan(string(e.Value()), &slot); err != nil {
				return 0, fmt.Errorf("cluster: the slot of node %s: %w", opts.NodeName, err)
			}
			return slot, nil
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0, fmt.Errorf("cluster: reading the slot of node %s: %w", opts.NodeName, err)
		}
		var next uint64 = 1
		var rev uint64
		if e, err := kv.Get(ctx, "next"); err == nil {
			if _, err := fmt.Sscan(string(e.Value()), &next); err != nil {
				return 0, fmt.Errorf("cluster: the next slot: %w", err)
			}
			rev = e.Revision()
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0, fmt.Errorf("cluster: reading the next slot: %w", err)
		}
		if next > MaxSlot {
			return 0, fmt.Errorf("cluster: %d node names have joined, the most a cluster numbers; reuse node names (--node-name) rather than the default host-pid", MaxSlot)
		}
		val := []byte(fmt.Sprint(next + 1))
		if rev == 0 {
			_, err = kv.Create(ctx, "next", val)
		} else {
			_, err = kv.Update(ctx, "next", val, rev)
		}
		if err != nil {
			continue // another node took it: read again
		}
		if _, err := kv.Create(ctx, key, []byte(fmt.Sprint(next))); err != nil {
			continue // this name joined meanwhile (the slot taken above stays unused)
		}
		return uint32(next), nil
	}
	return 0, fmt.Errorf("cluster: could not reserve a slot for node %s: too many nodes joining at once; start it again", opts.NodeName)
}

// leaderWait bounds how long Join waits for its buckets to answer: a bucket just created with
// replicas has no leader for a moment (seconds while the NATS servers start together), and its
// reads time out meanwhile.
const leaderWait = time.Minute

// leaderTry bounds one read or write of Join while it waits for a leader.
const leaderTry = 5 * time.Second

// untilLeader runs fn until it returns anything but what a bucket without a leader yet answers
// (see noLeaderYet), each try bounded by leaderTry, for at most leaderWait or until ctx ends.
// It returns fn's last error.
func untilLeader(ctx context.Context, fn func(context.Context) error) error {
	deadline := time.Now().Add(leaderWait)
	wait := 100 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, leaderTry)
		err := fn(tctx)
		cancel()
		if err == nil || !noLeaderYet(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// noLeaderYet reports whether err is what a JetStream call answers while the stream behind it
// has no leader: a timeout or no response. Or "stream not found": Join reads only buckets it
// has just opened or created, and a server whose copy of the cluster's JetStream state lags
// answers so for a moment after a bucket with replicas is created (seen in CI: a Status read
// right after CreateKeyValue on three servers).
func noLeaderYet(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrStreamNotFound)
}
