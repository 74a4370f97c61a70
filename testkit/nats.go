package testkit

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/egridio/egrid/router/store/jetstream"
)

// NATSCluster is a cluster of in-process NATS servers with JetStream clustered, started for
// one test by [StartNATSCluster]: what egrid's cluster mode runs on, without installing
// anything. Each server listens for clients and routes on 127.0.0.1, keeps its JetStream files
// in its own temporary directory, and accepts messages up to [jetstream.MinMaxPayload] (a
// 1 MiB event is one message). A server taken away with [NATSCluster.Kill] comes back with
// [NATSCluster.Restart] on the same ports, name and files, so clients holding
// [NATSCluster.URLs] reconnect by themselves and its replicas catch up.
//
// Its methods are safe for concurrent use. Servers run in the test's process, so they are
// stopped by Kill rather than crashed: a killed server closes its connections at once, as a
// crashed one's peers see it.
type NATSCluster struct {
	t       testing.TB
	name    string
	mu      sync.Mutex
	servers []*natsNode
	closed  bool
}

// natsNode is one server of a [NATSCluster]; its options (ports, name, directory) stay the
// same across restarts.
type natsNode struct {
	opts     *natsserver.Options
	srv      *natsserver.Server // nil while killed
	starting bool               // a Restart is starting it
}

// natsReadyBound bounds how long StartNATSCluster and Restart wait for the servers and their
// JetStream meta group, per try; a three-server group forms in under a second, and in a few
// seconds on a loaded two-core machine under the race detector.
//
// nats-server 2.10 now and then (about one start in ten under the race detector on a loaded
// machine, when two servers elect a leader before the third's vote is counted) forms a meta
// group that leaves a server out: the server follows the leader, but the leader never counts
// it as a peer, and it stays so. So a start or restart that has not
// formed the whole group within the bound is tried again (up to natsTries times): a cluster
// start with fresh ports and directories, a restart by stopping and starting the server again.
const (
	natsReadyBound = 15 * time.Second
	natsTries      = 8
)

// StartNATSCluster starts n NATS servers (n ≥ 1; use 3 for replicated streams) routed to each
// other as one cluster with JetStream clustered, waits until their JetStream meta group has a
// leader and every server is a current member of it, and stops them when the test ends (their
// temporary directories are removed after that). With n = 1 it is a single server with
// JetStream, not clustered.
//
// It fails the test when the servers do not come up within a minute or so. With
// EGRID_TEST_NATS_LOG=1 in the environment the servers log to stderr (debug level), for when a
// cluster test needs explaining.
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("StartNATSCluster(%d): a cluster needs at least one server", n)
	}
	c := &NATSCluster{t: t, name: fmt.Sprintf("egrid-test-%d", time.Now().UnixNano()%1e6)}
	dir := t.TempDir()
	t.Cleanup(c.close) // after TempDir's own cleanup is registered, so it runs first
	for try := 1; ; try++ {
		err := c.startAll(filepath.Join(dir, fmt.Sprint("try", try)), n)
		if err == nil {
			return c
		}
		c.close()
		if try == natsTries {
			t.Fatalf("starting a cluster of %d NATS servers: %v", n, err)
		}
		t.Logf("starting a cluster of %d NATS servers failed (%v); trying again with other ports", n, err)
		c.mu.Lock()
		c.closed, c.servers = false, nil
		c.mu.Unlock()
	}
}

// startAll starts n servers on fresh ports, each routed to all the others, one after the
// other, and waits until they form the JetStream meta group.
func (c *NATSCluster) startAll(dir string, n int) error {
	for i := range n {
		opts := &natsserver.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i)),
			MaxPayload: jetstream.MinMaxPayload, NoLog: true, NoSigs: true,
		}
		if n > 1 {
			port, err := freePort()
			if err != nil {
				return err
			}
			opts.Cluster = natsserver.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: port}
			// Routes to the servers already running, and to itself (JetStream clustering
			// needs a configured route; a server skips the one to itself): two servers
			// dialling each other at once race (nats-server closes one as a duplicate route,
			// and now and then a server then never hears the other's votes). The servers tell
			// each other about the rest.
			opts.Routes = append(c.routes(-1), &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", port)})
		}
		srv, err := startServer(opts)
		if err != nil {
			return fmt.Errorf("server %d: %w", i, err)
		}
		// Restarts keep the ports, so the URLs clients hold stay valid and the routes of the
		// other servers find it again.
		opts.Port = srv.Addr().(*net.TCPAddr).Port
		c.mu.Lock()
		c.servers = append(c.servers, &natsNode{opts: opts, srv: srv})
		c.mu.Unlock()
		// One server at a time: each joins a meta group that has settled without it, which
		// avoids most of the left-out starts natsTries is for.
		if err := c.waitReady(); err != nil {
			return err
		}
	}
	return nil
}

// routes returns the route URLs of every server of the cluster but server except.
func (c *NATSCluster) routes(except int) []*url.URL {
	c.mu.Lock()
	defer c.mu.Unlock()
	var routes []*url.URL
	for i, n := range c.servers {
		if i != except {
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", n.opts.Cluster.Port)})
		}
	}
	return routes
}

// startServer starts a server with opts and waits until it listens.
func startServer(opts *natsserver.Options) (*natsserver.Server, error) {
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		return nil, err
	}
	if os.Getenv("EGRID_TEST_NATS_LOG") != "" {
		srv.SetLoggerV2(&natsLogger{name: opts.ServerName}, true, true, false)
	}
	go srv.Start()
	if !srv.ReadyForConnections(natsReadyBound) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("server %s did not listen on 127.0.0.1 within %v (a port taken meanwhile?)", opts.ServerName, natsReadyBound)
	}
	return srv, nil
}

// waitReady waits until the running servers' JetStream meta group has a leader that sees
// every running server as a current peer, and each running server is current.
func (c *NATSCluster) waitReady() error {
	start := time.Now()
	deadline := start.Add(natsReadyBound)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		state := c.readiness()
		if state == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("JetStream not ready within %v: %s; meta group as each server sees it: %s", natsReadyBound, state, c.metaViews())
		}
		if time.Since(start) > natsStuckAfter && c.noPeers() {
			return fmt.Errorf("JetStream not ready: no server has a meta leader or a peer after %v (a start seen stuck so for good): %s", natsStuckAfter, c.metaViews())
		}
		<-tick.C
	}
}

// natsStuckAfter is how long waitReady gives servers that have neither a meta leader nor a
// peer before it takes them for stuck. nats-server 2.10 now and then starts two servers so:
// each sees a cluster of 2 and no peer, and no such start was seen to leave that state within
// the whole natsReadyBound (one in five starts beside two busy loops, four tries in a row in
// a loaded CI run). A group forming normally has a leader within a second or two, a few
// seconds on a loaded machine under the race detector.
const natsStuckAfter = 6 * time.Second

// noPeers reports whether more than one server runs and none of them sees a meta leader or
// any peer.
func (c *NATSCluster) noPeers() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	running := 0
	for _, n := range c.servers {
		if n.srv == nil {
			continue
		}
		running++
		info, err := n.srv.Jsz(&natsserver.JSzOptions{})
		if err != nil || info.Meta == nil || info.Meta.Leader != "" || len(info.Meta.Replicas) > 0 {
			return false
		}
	}
	return running > 1
}

// readiness returns "" when the JetStream meta group of the running servers is ready or there
// is none to wait for (fewer than a majority run, as when the only server was killed), or what
// it still waits for.
func (c *NATSCluster) readiness() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var running []*natsserver.Server
	for _, n := range c.servers {
		if n.srv != nil {
			running = append(running, n.srv)
		}
	}
	if len(running) < len(c.servers)/2+1 {
		// No quorum to wait for; with one server, it was killed (a Kill during a Restart's
		// wait), and the Kill stands.
		return ""
	}
	if len(c.servers) == 1 {
		if running[0].JetStreamEnabled() {
			return ""
		}
		return "JetStream not enabled yet"
	}
	leader := false
	for _, s := range running {
		if !s.JetStreamIsCurrent() {
			return fmt.Sprintf("server %s is not current in the meta group", s.Name())
		}
		if !s.JetStreamIsLeader() {
			continue
		}
		leader = true
		info, err := s.Jsz(&natsserver.JSzOptions{})
		if err != nil || info.Meta == nil {
			return fmt.Sprintf("the meta leader %s has no meta group information (%v)", s.Name(), err)
		}
		current, peers := 1, []string{s.Name() + " (leader)"} // the leader
		for _, p := range info.Meta.Replicas {
			if p.Current && !p.Offline {
				current++
			}
			peers = append(peers, fmt.Sprintf("%s (current %v, offline %v, last seen %v ago, lag %d)", p.Name, p.Current, p.Offline, p.Active, p.Lag))
		}
		if current < len(running) {
			return fmt.Sprintf("the meta leader %s has %d of %d running servers current: %s", s.Name(), current, len(running), strings.Join(peers, ", "))
		}
		// Placement takes only servers whose statistics the leader has; until then creating a
		// replicated stream fails with "no suitable peers for placement".
		if online := s.JetStreamClusterPeers(); len(online) < len(running) {
			return fmt.Sprintf("the meta leader %s has statistics of %d of %d running servers (%v)", s.Name(), len(online), len(running), online)
		}
	}
	if !leader {
		return "no meta leader"
	}
	return ""
}

// metaViews describes each running server's view of the JetStream meta group, for errors.
func (c *NATSCluster) metaViews() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var views []string
	for i, n := range c.servers {
		if n.srv == nil {
			views = append(views, fmt.Sprintf("server %d killed", i))
			continue
		}
		v := fmt.Sprintf("%s: current %v, leader %v", n.srv.Name(), n.srv.JetStreamIsCurrent(), n.srv.JetStreamIsLeader())
		if info, err := n.srv.Jsz(&natsserver.JSzOptions{}); err == nil && info.Meta != nil {
			v += fmt.Sprintf(", sees leader %q, cluster size %d, %d peers", info.Meta.Leader, info.Meta.Size, len(info.Meta.Replicas))
		}
		views = append(views, v)
	}
	return strings.Join(views, "; ")
}

// Size is the number of servers, running or killed.
func (c *NATSCluster) Size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.servers)
}

// ClientURL is server i's client URL (nats://127.0.0.1:port); it stays the same across
// [NATSCluster.Kill] and [NATSCluster.Restart].
func (c *NATSCluster) ClientURL(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d", c.servers[i].opts.Port)
}

// URLs are the client URLs of every server, running or not, in server order.
func (c *NATSCluster) URLs() []string {
	urls := make([]string, c.Size())
	for i := range urls {
		urls[i] = c.ClientURL(i)
	}
	return urls
}

// URL is [NATSCluster.URLs] joined by commas: what `egrid serve --cluster` and nats.Connect
// take.
func (c *NATSCluster) URL() string { return strings.Join(c.URLs(), ",") }

// Running says whether server i is running (not killed).
func (c *NATSCluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i].srv != nil
}

// Server is server i's in-process server (nil while it is killed), for what the helpers do
// not cover (monitoring structures, stream leaders).
func (c *NATSCluster) Server(i int) *natsserver.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i].srv
}

// Kill stops server i at once: its clients and routes see their connections close, and the
// other servers elect new leaders for what it led. Killing a killed server does nothing.
func (c *NATSCluster) Kill(i int) {
	c.mu.Lock()
	srv := c.servers[i].srv
	c.servers[i].srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Restart starts killed server i again on its ports, with its name and JetStream files, and
// waits until it is a current member of the JetStream meta group again (its streams' replicas
// then catch up in the background). Restarting a running server does nothing. It fails the
// test when the server does not come back within a minute or so. While fewer than a majority of the
// servers run there is no meta group to join, and Restart returns once the server listens. A
// Kill of the same server while Restart waits stands: Restart returns, the server killed.
func (c *NATSCluster) Restart(i int) {
	c.t.Helper()
	for try := 1; ; try++ {
		started, err := c.start(i)
		if !started {
			return
		}
		if err == nil {
			err = c.waitReady()
		}
		if err == nil {
			return
		}
		if try == natsTries {
			c.t.Fatalf("restarting NATS server %d: %v", i, err)
		}
		c.t.Logf("restarting NATS server %d failed (%v); stopping and starting it again", i, err)
		c.Kill(i)
	}
}

// start starts killed server i; started is false when there was nothing to start (it runs,
// another Restart is starting it, or the cluster was stopped).
func (c *NATSCluster) start(i int) (started bool, err error) {
	c.mu.Lock()
	node := c.servers[i]
	if node.srv != nil || node.starting || c.closed {
		c.mu.Unlock()
		return false, nil
	}
	node.starting = true
	opts := node.opts
	c.mu.Unlock()
	if len(c.routes(i)) > 0 {
		// A restarted server dials every other one (they may not dial it: a server dials
		// again only the routes it was configured with).
		opts = opts.Clone()
		opts.Routes = c.routes(-1)
	}
	srv, err := startServer(opts)
	c.mu.Lock()
	defer c.mu.Unlock()
	node.starting = false
	switch {
	case err != nil:
		return true, err
	case c.closed:
		srv.Shutdown() // the test ended meanwhile
		return false, nil
	}
	node.srv = srv
	return true, nil
}

// WaitStream waits until stream of the global account has a leader and every replica on a
// running server is current, or ctx ends: after a [NATSCluster.Restart], that is when the
// restarted server's copy has caught up.
func (c *NATSCluster) WaitStream(ctx context.Context, stream string) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.streamReady(stream) {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("waiting for stream %s to have a leader and current replicas: %w", stream, ctx.Err())
		}
	}
}

func (c *NATSCluster) streamReady(stream string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	leader := false
	for _, n := range c.servers {
		if n.srv == nil {
			continue
		}
		acc := n.srv.GlobalAccount().Name
		if n.srv.JetStreamIsStreamLeader(acc, stream) {
			leader = true
		}
		if n.srv.JetStreamIsStreamAssigned(acc, stream) && !n.srv.JetStreamIsStreamCurrent(acc, stream) {
			return false
		}
	}
	return leader
}

// close stops every server; it is idempotent.
func (c *NATSCluster) close() {
	c.mu.Lock()
	c.closed = true
	var running []*natsserver.Server
	for _, n := range c.servers {
		if n.srv != nil {
			running = append(running, n.srv)
			n.srv = nil
		}
	}
	c.mu.Unlock()
	for _, s := range running {
		s.Shutdown()
	}
	for _, s := range running {
		s.WaitForShutdown()
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// natsLogger writes a server's log lines to stderr, each prefixed with the server's name.
type natsLogger struct{ name string }

func (l *natsLogger) Noticef(f string, v ...any) { log.Printf(l.name+" "+f, v...) }
func (l *natsLogger) Warnf(f string, v ...any)   { log.Printf(l.name+" WARN "+f, v...) }
func (l *natsLogger) Fatalf(f string, v ...any)  { log.Printf(l.name+" FATAL "+f, v...) }
func (l *natsLogger) Errorf(f string, v ...any)  { log.Printf(l.name+" ERR "+f, v...) }
func (l *natsLogger) Debugf(f string, v ...any)  { log.Printf(l.name+" DBG "+f, v...) }
func (l *natsLogger) Tracef(f string, v ...any)  {}
