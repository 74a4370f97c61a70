package testkit

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store/jetstream"
)

// ClusterConfig configures [StartCluster]. The zero value runs three nodes on a new
// three-server NATS cluster with replicated state.
type ClusterConfig struct {
	// Nodes is the number of egrid routers; default 3.
	Nodes int
	// NATS is the NATS cluster the routers share; nil starts one of three servers with
	// [StartNATSCluster].
	NATS *NATSCluster
	// Replicas is the JetStream replication of the routers' streams and buckets; default 3
	// when NATS has three or more servers, else 1.
	Replicas int
	// LeaseTTL is the cluster's lease TTL (LeaseTTL of router/cluster's Options): a killed node's
	// subscriptions resume elsewhere about this long after the kill. Default 2 s (egrid
	// serve's default is 5 s).
	LeaseTTL time.Duration
	// Config is every node's router configuration; Cluster.NodeName and Cluster.Prefix are set
	// per node (the node names are node-0, node-1, ...).
	Config router.Config
	// Deps, when set, returns node's dependencies (Go sinks, a dead-letter store, a logger):
	// every node must be able to run every subscription, so give each the same sinks. Store
	// and NATS are set by the kit; a nil Logger discards the logs.
	Deps func(node string) router.Deps
}

// Cluster is a cluster of egrid routers running in one process as cluster nodes (see
// README "Cluster mode"), each with its own NATS connection and JetStream store, sharing one
// [NATSCluster] and a prefix no other cluster in the process uses. It lets a test check its
// own failover: [Cluster.Kill] a node and see its subscriptions resume on the others.
//
// Time is real: the routers talk to NATS over sockets, which a testing/synctest bubble cannot
// hold. Wait for outcomes with bounded polls ([Cluster.WaitRunner]), never for durations.
// Its methods are safe for concurrent use.
type Cluster struct {
	// NATS is the NATS cluster the nodes share.
	NATS *NATSCluster

	t      testing.TB
	cfg    ClusterConfig
	prefix string
	mu     sync.Mutex
	nodes  []*clusterNode
}

// clusterNode is one router of a [Cluster] while it runs.
type clusterNode struct {
	name string
	r    *router.Router // nil while killed or stopped
	nc   *nats.Conn
	st   *jetstream.Store
}

var clusterPrefixes atomic.Int64

// StartCluster starts cfg.Nodes routers as nodes of one cluster and closes them when the test
// ends. It fails the test when a node does not start.
func StartCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.NATS == nil {
		cfg.NATS = StartNATSCluster(t, 3)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
		if cfg.NATS.Size() >= 3 {
			cfg.Replicas = 3
		}
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 2 * time.Second
	}
	c := &Cluster{NATS: cfg.NATS, t: t, cfg: cfg, prefix: fmt.Sprintf("TK%d", clusterPrefixes.Add(1))}
	for i := range cfg.Nodes {
		c.nodes = append(c.nodes, &clusterNode{name: fmt.Sprintf("node-%d", i)})
	}
	t.Cleanup(c.close)
	for i := range cfg.Nodes {
		c.Start(i)
	}
	return c
}

// Size is the number of nodes, running or not.
func (c *Cluster) Size() int { return len(c.nodes) }

// Name is node i's cluster node name (the aeg-egrid-node header of its deliveries).
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// Prefix is the prefix of the cluster's streams, buckets and subjects.
func (c *Cluster) Prefix() string { return c.prefix }

// Router is node i's router, nil while the node is killed or stopped. Serve its HTTP planes
// with router/httpapi.New.
func (c *Cluster) Router(i int) *router.Router {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].r
}

// Running says whether node i runs.
func (c *Cluster) Running(i int) bool { return c.Router(i) != nil }

// Start starts node i (again, after [Cluster.Kill] or [Cluster.Stop]) under its name: it
// joins the cluster and takes its share of the subscriptions over. Starting a running node
// does nothing. It fails the test when the node does not start.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[i]
	running := n.r != nil
	c.mu.Unlock()
	if running {
		return
	}
	var r *router.Router
	var nc *nats.Conn
	var st *jetstream.Store
	var err error
	for try := 1; ; try++ {
		r, nc, st, err = c.open(n.name)
		if err == nil {
			break
		}
		if try == 3 {
			c.t.Fatalf("node %s: %v", n.name, err)
		}
		// A bucket or stream JetStream created a moment ago may have no leader yet on a
		// loaded machine, and a node's first reads of it time out.
		c.t.Logf("node %s did not start (%v); trying again", n.name, err)
	}
	c.mu.Lock()
	n.r, n.nc, n.st = r, nc, st
	c.mu.Unlock()
}

// open connects, opens the store and starts a router as node name.
func (c *Cluster) open(name string) (*router.Router, *nats.Conn, *jetstream.Store, error) {
	nc, err := nats.Connect(c.NATS.URL(), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1), nats.ReconnectWait(50*time.Millisecond), nats.Name("egrid "+name))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connecting to NATS at %s: %w", c.NATS.URL(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := jetstream.Open(ctx, nc, jetstream.Options{Prefix: c.prefix, Replicas: c.cfg.Replicas, Timeout: 5 * time.Second})
	if err != nil {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("opening the JetStream store: %w", err)
	}
	cfg := c.cfg.Config
	cfg.Cluster.NodeName, cfg.Cluster.Prefix = name, c.prefix
	cfg.Cluster.LeaseTTL, cfg.Cluster.Replicas = c.cfg.LeaseTTL, c.cfg.Replicas
	var deps router.Deps
	if c.cfg.Deps != nil {
		deps = c.cfg.Deps(name)
	}
	deps.Store, deps.NATS = st, nc
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := router.New(cfg, deps)
	if err != nil {
		_ = st.Close()
		nc.Close()
		return nil, nil, nil, err
	}
	return r, nc, st, nil
}

// Kill takes node i away as a crash would: its NATS connection is cut first, so it can
// neither renew its leases nor hand them over nor write its state, then its router is closed.
// Its subscriptions resume on the other nodes once their leases lapse (the lease TTL, plus a
// placement round), from the stored cursors and parked retries; attempts it had in flight
// are made again by the new owner (at least once). Killing a node that does not run does
// nothing.
func (c *Cluster) Kill(i int) { c.down(i, true) }

// Stop closes node i cleanly: its actors write their state and it hands their leases over,
// so the others take its subscriptions over at once. Stopping a node that does not run does
// nothing.
func (c *Cluster) Stop(i int) { c.down(i, false) }

func (c *Cluster) down(i int, kill bool) {
	c.mu.Lock()
	n := c.nodes[i]
	r, nc, st := n.r, n.nc, n.st
	n.r, n.nc, n.st = nil, nil, nil
	c.mu.Unlock()
	if r == nil {
		return
	}
	if kill {
		nc.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil && !kill {
		c.t.Errorf("closing node %s: %v", n.name, err)
	}
	_ = st.Close()
	nc.Close()
}

// Runners returns the running nodes that run topic's subscription sub's actor: one at a
// time, except for the moment a killed node's lease has not lapsed yet (then none).
func (c *Cluster) Runners(topic, sub string) []int {
	var out []int
	for i := range c.nodes {
		if r := c.Router(i); r != nil && r.RunsSubscription(topic, sub) {
			out = append(out, i)
		}
	}
	return out
}

// WaitRunner waits until exactly one running node (other than those in not) runs topic's
// subscription sub and returns it, or fails the test after bound. It polls every 10 ms.
func (c *Cluster) WaitRunner(topic, sub string, bound time.Duration, not ...int) int {
	c.t.Helper()
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if rs := c.Runners(topic, sub); len(rs) == 1 && !slices.Contains(not, rs[0]) {
			return rs[0]
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("subscription %s/%s: no single node (other than %v) runs it within %v; runners %v", topic, sub, not, bound, c.Runners(topic, sub))
		}
		<-tick.C
	}
}

// close stops every running node (at the end of the test).
func (c *Cluster) close() {
	for i := range c.nodes {
		c.down(i, false)
	}
}
