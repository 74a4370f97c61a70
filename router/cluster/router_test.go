package cluster_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/internal/natstest"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// The tests run several routers in one process, each with its own NATS connection and
// JetStream store on one in-process nats-server (the version in go.mod), as cluster nodes
// sharing a prefix unique to the test. Nothing is installed or skipped. Time is real (the
// server is on a socket, which a synctest bubble cannot hold): waits are bounded polls.
var serverURL string

// leaseTTL is short so that failovers take a couple of seconds; EGRID_CLUSTER_TEST_LEASE_TTL
// sets another (5s, the default of serve, to measure its failover time).
var leaseTTL = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("EGRID_CLUSTER_TEST_LEASE_TTL")); err == nil {
		return d
	}
	return 2 * time.Second
}()

func TestMain(m *testing.M) { natstest.Main(m, "egrid-cluster-", &serverURL) }

var prefixes atomic.Int64

// delivery is one attempt a node's sink saw.
type delivery struct {
	node   string // the router whose sink was called
	sub    string
	header string // its aeg-egrid-node header
	ids    []string
	count  int // DeliveryCount: attempts made before this one
}

// recorder is a sink every node registers under "hook": it records every attempt and fails
// the events fail names.
type recorder struct {
	mu   sync.Mutex
	seen []delivery
	fail func(node, id string) bool
	// gate, when set, holds attempts of event "slow" until it is closed.
	gate chan struct{}
}

func (rc *recorder) sink(node string) sinks.Sink {
	return sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		if rc.gate != nil && len(b.Events) > 0 && b.Events[0].ID == "slow" {
			<-rc.gate
		}
		d := delivery{node: node, sub: b.Subscription, header: b.Headers[router.NodeHeader], count: b.DeliveryCount}
		failed := false
		for _, ev := range b.Events {
			d.ids = append(d.ids, ev.ID)
			if rc.fail != nil && rc.fail(node, ev.ID) {
				failed = true
			}
		}
		rc.mu.Lock()
		rc.seen = append(rc.seen, d)
		rc.mu.Unlock()
		if failed {
			return &sinks.DeliveryError{Outcome: schemas.Busy, StatusCode: 503, Err: errors.New("scripted 503")}
		}
		return nil
	})
}

func (rc *recorder) all() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivery(nil), rc.seen...)
}

// deliveredBy returns the nodes that delivered id (attempts that succeeded are those not
// failed; the recorder's fail decides, so callers know).
func (rc *recorder) attemptsOf(id string) []delivery {
	var out []delivery
	for _, d := range rc.all() {
		for _, x := range d.ids {
			if x == id {
				out = append(out, d)
			}
		}
	}
	return out
}

type node struct {
	name string
	r    *router.Router
	nc   *nats.Conn
	st   *jetstream.Store
}

type testCluster struct {
	t       *testing.T
	prefix  string
	rec     *recorder
	objects *testkit.ObjectStore // the dead-letter destination every node shares
	url     string               // the NATS server (default serverURL)
	files   bool                 // the store keeps its streams in files (survives a server restart)
	// urls, when set, are NATS servers of one cluster: node i connects to urls[i%len], and
	// the streams and buckets have replicas copies.
	urls     []string
	replicas int
	nodes    atomic.Int64 // nodes opened, for urls
	fenced   atomic.Int64 // log lines of actors that stopped on a fenced write
	// ttl, when set, is the nodes' lease TTL instead of leaseTTL (a node reads every
	// definition every two TTLs: a longer one keeps a node unaware of a topic only the store
	// holds).
	ttl time.Duration
	// configure, when set, changes a node's config and dependencies before it starts.
	configure func(name string, cfg *router.Config, deps *router.Deps)
	// onLog, when set, is given every line the nodes log.
	onLog func(line string)
}

func newCluster(t *testing.T) *testCluster {
	c := &testCluster{t: t, prefix: fmt.Sprintf("CL%d_%d", os.Getpid(), prefixes.Add(1)), rec: &recorder{}, objects: testkit.NewObjectStore()}
	t.Cleanup(func() { cleanup(c.prefix) })
	return c
}

// cleanup deletes the streams and buckets of a prefix.
func cleanup(prefix string) {
	nc, err := nats.Connect(serverURL)
	if err != nil {
		return
	}
	defer nc.Close()
	js, _ := njs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name := range js.StreamNames(ctx).Name() {
		if strings.HasPrefix(name, prefix+"_") || strings.HasPrefix(name, "KV_"+prefix+"_") {
			_ = js.DeleteStream(ctx, name)
		}
	}
}

// start runs a router as node name.
func (c *testCluster) start(name string) *node {
	c.t.Helper()
	n, err := c.open(name)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// open is start returning its error (for other goroutines than the test's).
func (c *testCluster) open(name string) (*node, error) {
	t := c.t
	url := c.url
	if url == "" {
		url = serverURL
	}
	if len(c.urls) > 0 {
		url = c.urls[int(c.nodes.Add(1)-1)%len(c.urls)]
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	// Opening creates the store's streams: with three replicas each is a new raft group,
	// which a loaded machine can take longer to form than the 3 s every later call gets.
	openCtx, cancelOpen := context.WithTimeout(t.Context(), 30*time.Second)
	st, err := jetstream.Open(openCtx, nc, jetstream.Options{Prefix: c.prefix, Memory: !c.files, Timeout: 3 * time.Second, Replicas: c.replicas})
	cancelOpen()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("opening the store: %w", err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t, &c.fenced, c.onLog}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := router.Config{
		TimeScale: 10, NoJitter: true,
		Cluster:     cluster.Options{NodeName: name, Prefix: c.prefix, LeaseTTL: cmp.Or(c.ttl, leaseTTL)},
		DeadLetters: router.DeadLetterConfig{Delay: 40 * time.Second}, // 4 s at TimeScale 10
	}
	deps := router.Deps{Store: st, NATS: nc, DeadLetterStore: c.objects, Logger: log.With("node", name), Sinks: map[string]sinks.Sink{"hook": c.rec.sink(name)}}
	if c.configure != nil {
		c.configure(name, &cfg, &deps)
	}
	r, err := router.New(cfg, deps)
	if err != nil {
		_ = st.Close()
		nc.Close()
		return nil, fmt.Errorf("router.New (node %s): %w", name, err)
	}
	n := &node{name: name, r: r, nc: nc, st: st}
	t.Cleanup(func() { n.stop() })
	return n, nil
}

// stop closes the node cleanly (idempotent).
func (n *node) stop() {
	_ = n.r.Close(context.Background())
	_ = n.st.Close()
	n.nc.Close()
}

type testWriter struct {
	t      *testing.T
	fenced *atomic.Int64
	onLog  func(line string)
}

func (w testWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "was fenced") {
		w.fenced.Add(1)
	}
	if w.onLog != nil {
		w.onLog(string(p))
	}
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// eventually polls cond every 20 ms until it holds, failing the test after limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		<-time.After(20 * time.Millisecond)
	}
	return time.Since(start)
}

func publish(t *testing.T, r *router.Router, topic string, ids ...string) error {
	t.Helper()
	var evs []any
	for _, id := range ids {
		evs = append(evs, json.RawMessage(fmt.Sprintf(
			`{"id":%q,"subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{"n":1},"dataVersion":"1.0"}`, id)))
	}
	return r.Publish(t.Context(), topic, evs...)
}

// runners returns the nodes that run subscription sub of topic.
func runners(topic, sub string, nodes ...*node) []string {
	var names []string
	for _, n := range nodes {
		if n.r.RunsSubscription(topic, sub) {
			names = append(names, n.name)
		}
	}
	return names
}

// A topic or subscription created, updated (key rotation) or deleted on one node takes effect
// on the others.
func TestDefinitionsPropagate(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	ctx := t.Context()
	spec, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{})
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	eventually(t, 20*time.Second, "topic on b", func() bool {
		got, err := b.r.Topic("orders")
		return err == nil && got.Key1 == spec.Key1
	})
	rotated, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{Key1: "rotated-key-1-abcdefghijklmnopqrstuvwxyz0123456789AB"})
	if err != nil {
		t.Fatalf("rotating key1: %v", err)
	}
	eventually(t, 20*time.Second, "rotated key on b", func() bool {
		got, err := b.r.Topic("orders")
		return err == nil && got.Key1 == rotated.Key1
	})
	if err := b.r.CreateSubscription(ctx, "orders", "billing", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
		t.Fatalf("CreateSubscription on b: %v", err)
	}
	eventually(t, 20*time.Second, "subscription on a", func() bool {
		_, err := a.r.Subscription("orders", "billing")
		return err == nil
	})
	if err := a.r.DeleteSubscription(ctx, "orders", "billing"); err != nil {
		t.Fatalf("DeleteSubscription on a: %v", err)
	}
	eventually(t, 20*time.Second, "subscription gone from b", func() bool {
		_, err := b.r.Subscription("orders", "billing")
		return errors.Is(err, router.ErrSubscriptionNotFound)
	})
	if err := b.r.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatalf("DeleteTopic on b: %v", err)
	}
	eventually(t, 20*time.Second, "topic gone from a", func() bool {
		_, err := a.r.Topic("orders")
		return errors.Is(err, router.ErrTopicNotFound)
	})
}

// A node that has not heard of a topic yet (stored by another node whose notice it has not
// had) accepts a subscription to it at once: it reads the topic from the store first.
func TestSubscriptionToATopicOnlyTheStoreKnows(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	ctx := t.Context()
	spec, err := json.Marshal(router.TopicSpec{})
	if err != nil {
		t.Fatal(err)
	}
	// Straight into the store: no node sends a notice, so b learns of it only from the
	// store.
	if err := a.st.PutTopic(ctx, "orders", spec); err != nil {
		t.Fatalf("PutTopic: %v", err)
	}
	if err := b.r.CreateSubscription(ctx, "orders", "billing", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
		t.Fatalf("CreateSubscription on a node that has not heard of the topic: %v", err)
	}
	eventually(t, 20*time.Second, "subscription placed", func() bool {
		return len(runners("orders", "billing", a, b)) == 1
	})
	if err := publish(t, a.r, "orders", "e1"); err != nil {
		t.Fatalf("publish: %v", err)
	}
	eventually(t, 20*time.Second, "e1 delivered", func() bool { return len(c.rec.attemptsOf("e1")) > 0 })
}

// setup creates topic orders with subscriptions s0..s(n-1) on a and waits until each runs on
// exactly one of nodes.
func setup(t *testing.T, n int, nodes ...*node) {
	t.Helper()
	ctx := t.Context()
	if _, err := nodes[0].r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	for i := range n {
		if err := nodes[0].r.CreateSubscription(ctx, "orders", fmt.Sprintf("sub%d", i), router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
			t.Fatalf("CreateSubscription: %v", err)
		}
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.name)
	}
	eventually(t, 30*time.Second, "every subscription placed on its preferred node alone", func() bool {
		for i := range n {
			sub := fmt.Sprintf("sub%d", i)
			run := runners("orders", sub, nodes...)
			if len(run) != 1 || run[0] != cluster.Owner(names, cluster.Key{Topic: "orders", Subscription: sub}) {
				return false
			}
		}
		return true
	})
}

// An event published on any node is delivered by the node that runs the subscription, with
// that node's name in aeg-egrid-node; every subscription runs on exactly one node, and the
// subscriptions spread over the nodes.
func TestPublishAnywhereDeliveredByOwner(t *testing.T) {
	c := newCluster(t)
	a, b, d := c.start("a"), c.start("b"), c.start("c")
	nodes := []*node{a, b, d}
	setup(t, 6, nodes...)
	used := map[string]bool{}
	for i := range 6 {
		used[runners("orders", fmt.Sprintf("sub%d", i), nodes...)[0]] = true
	}
	if len(used) < 2 {
		t.Errorf("6 subscriptions all run on %v: placement does not spread them", used)
	}
	for i, n := range nodes {
		if err := publish(t, n.r, "orders", fmt.Sprintf("e%d", i)); err != nil {
			t.Fatalf("Publish on %s: %v", n.name, err)
		}
	}
	eventually(t, 30*time.Second, "every event delivered to all 6 subscriptions", func() bool {
		return len(c.rec.all()) >= 18
	})
	for _, d := range c.rec.all() {
		if d.header != d.node {
			t.Errorf("attempt by node %s carried %s: %q", d.node, router.NodeHeader, d.header)
		}
	}
	for i := range 3 {
		if got := len(c.rec.attemptsOf(fmt.Sprintf("e%d", i))); got != 6 {
			t.Errorf("event e%d attempted %d times, want 6 (once per subscription)", i, got)
		}
	}
	// Status of a subscription running elsewhere is answered by its owner.
	for i := range 6 {
		sub := fmt.Sprintf("sub%d", i)
		var st *router.Status
		eventually(t, 30*time.Second, "status of "+sub+" on a", func() bool {
			var err error
			st, err = a.r.Status(t.Context(), "orders", sub)
			if err != nil && !errors.Is(err, router.ErrNotPlaced) {
				t.Fatalf("Status of %s on a: %v", sub, err)
			}
			return err == nil // ErrNotPlaced: moving (a loaded machine can let a lease lapse)
		})
		if st.Cursor < 3 && st.Backlog != 0 {
			t.Errorf("status of %s = %+v: want every event settled", sub, st)
		}
	}
}

// A node cut off from NATS refuses publishes (ErrUnavailable), stops its actors before its
// leases lapse, and its subscriptions resume on the others from the stored state: parked
// retries keep their attempt counts.
func TestFailoverWhenANodeIsCutOff(t *testing.T) {
	c := newCluster(t)
	// Node a fails every attempt of "p1": it stays parked there, with attempts, until a is
	// cut off; the other nodes deliver it.
	c.rec.fail = func(node, id string) bool { return node == "a" && id == "p1" }
	a, b := c.start("a"), c.start("b")
	setup(t, 4, a, b)
	var onA string
	for i := range 4 {
		if sub := fmt.Sprintf("sub%d", i); runners("orders", sub, a, b)[0] == "a" {
			onA = sub
		}
	}
	if onA == "" {
		t.Skip("placement put no subscription on a") // rendezvous over fixed names: does not happen
	}
	if err := publish(t, b.r, "orders", "p1"); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	eventually(t, 30*time.Second, "p1 attempted twice on a", func() bool {
		n := 0
		for _, d := range c.rec.attemptsOf("p1") {
			if d.node == "a" && d.sub == onA {
				n++
			}
		}
		return n >= 2
	})
	cut := time.Now()
	a.nc.Close() // a is cut off: it can neither renew nor write
	if err := publish(t, a.r, "orders", "refused"); !errors.Is(err, router.ErrUnavailable) {
		t.Errorf("publish on a cut-off node = %v, want ErrUnavailable", err)
	}
	stopped := eventually(t, 10*time.Second, "a stops its actors", func() bool { return !a.r.RunsSubscription("orders", onA) })
	eventually(t, 30*time.Second, onA+" runs on b", func() bool { return b.r.RunsSubscription("orders", onA) })
	t.Logf("cut off: a stopped its actors after %v, %s ran on b %v after the cut (lease TTL %v)", stopped.Round(10*time.Millisecond), onA, time.Since(cut).Round(10*time.Millisecond), leaseTTL)
	eventually(t, 30*time.Second, "p1 of "+onA+" delivered by b", func() bool {
		for _, d := range c.rec.attemptsOf("p1") {
			if d.node == "b" && d.sub == onA {
				return true
			}
		}
		return false
	})
	// a's first attempt was stored with p1's parking (a later one may have been cut off with
	// a): b's attempt counts at least it.
	for _, d := range c.rec.attemptsOf("p1") {
		if d.node == "b" && d.sub == onA && d.count < 1 {
			t.Errorf("b's attempt of p1 did not carry a's attempt count: %+v", c.rec.attemptsOf("p1"))
		}
	}
	if err := publish(t, b.r, "orders", "after"); err != nil {
		t.Fatalf("Publish on b: %v", err)
	}
	eventually(t, 30*time.Second, "the event published after the cut delivered to all 4", func() bool {
		return len(c.rec.attemptsOf("after")) >= 4
	})
	for _, d := range c.rec.attemptsOf("after") {
		if d.node == "a" {
			t.Errorf("a, cut off, delivered %v", d.ids)
		}
	}
}

// A node that joins takes some subscriptions over (rebalance) and nothing is lost: every event
// published meanwhile is delivered to every subscription.
func TestRebalanceOnJoin(t *testing.T) {
	c := newCluster(t)
	a := c.start("a")
	setup(t, 8, a)
	for i := range 20 {
		if err := publish(t, a.r, "orders", fmt.Sprintf("before%d", i)); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	b := c.start("b")
	eventually(t, 30*time.Second, "b runs some subscriptions", func() bool {
		for i := range 8 {
			if b.r.RunsSubscription("orders", fmt.Sprintf("sub%d", i)) {
				return true
			}
		}
		return false
	})
	for i := range 20 {
		if err := publish(t, b.r, "orders", fmt.Sprintf("after%d", i)); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	eventually(t, 30*time.Second, "every event delivered to all 8 subscriptions", func() bool {
		for _, p := range []string{"before", "after"} {
			for i := range 20 {
				if len(c.rec.attemptsOf(fmt.Sprintf("%s%d", p, i))) < 8 {
					return false
				}
			}
		}
		return true
	})
	eventually(t, 30*time.Second, "each subscription on exactly one node", func() bool {
		for i := range 8 {
			if len(runners("orders", fmt.Sprintf("sub%d", i), a, b)) != 1 {
				return false
			}
		}
		return true
	})
}

// A write of a subscription's state by another writer fences the actor that loaded it before:
// its next state write fails with store.ErrFenced, the actor stops instead of overwriting,
// and (its node still holding the lease) it is started again on the new state.
func TestFencedActorStops(t *testing.T) {
	c := newCluster(t)
	a := c.start("a")
	setup(t, 1, a)
	other, err := jetstream.Open(t.Context(), a.nc, jetstream.Options{Prefix: c.prefix, Memory: true})
	if err != nil {
		t.Fatalf("opening a second store: %v", err)
	}
	st, err := other.LoadSubscription(t.Context(), "orders", "sub0")
	if err != nil {
		t.Fatalf("LoadSubscription: %v", err)
	}
	// The other writer moves the cursor on: as a new owner would after delivering.
	if err := other.UpdateSubscription(t.Context(), "orders", "sub0", store.Update{Cursor: st.Cursor}); err != nil {
		t.Fatalf("UpdateSubscription by the other writer: %v", err)
	}
	if err := publish(t, a.r, "orders", "x1"); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	// a's actor delivers x1, its cursor write is fenced, it stops; a restarts it (a holds the
	// lease), and the new actor delivers what a publish brings next.
	eventually(t, 30*time.Second, "x1 attempted", func() bool { return len(c.rec.attemptsOf("x1")) >= 1 })
	if err := publish(t, a.r, "orders", "x2"); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	eventually(t, 30*time.Second, "the fenced write reported", func() bool { return c.fenced.Load() > 0 })
	eventually(t, 30*time.Second, "sub0 running again on a", func() bool { return a.r.RunsSubscription("orders", "sub0") })
	if err := publish(t, a.r, "orders", "x3"); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	eventually(t, 30*time.Second, "x3 attempted after the restart", func() bool { return len(c.rec.attemptsOf("x3")) >= 1 })
	// The stored cursor is past x3: the restarted actor writes on the new revision.
	eventually(t, 30*time.Second, "cursor past x3", func() bool {
		st, err := other.LoadSubscription(t.Context(), "orders", "sub0")
		return err == nil && st.Cursor >= 3
	})
}

// A dead letter waiting in the outbox of a node that is cut off is written by the node the
// subscription moves to, once, at its due time.
func TestDeadLetterOfACutOffNodeWrittenByTheNewOwner(t *testing.T) {
	c := newCluster(t)
	c.rec.fail = func(node, id string) bool { return id == "dl1" }
	a, b := c.start("a"), c.start("b")
	ctx := t.Context()
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	// A subscription placed on a: try names until the placement puts one there.
	var sub string
	for i := 0; sub == ""; i++ {
		name := fmt.Sprintf("dead%d", i)
		if cluster.Owner([]string{"a", "b"}, cluster.Key{Topic: "orders", Subscription: name}) == "a" {
			sub = name
		}
	}
	spec := router.SubscriptionSpec{Destination: router.SinkDestination("hook")}
	spec.RetryPolicy.MaxDeliveryAttempts = 1
	spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
	spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
	if err := a.r.CreateSubscription(ctx, "orders", sub, spec); err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	eventually(t, 30*time.Second, sub+" runs on a", func() bool { return a.r.RunsSubscription("orders", sub) })
	if err := publish(t, b.r, "orders", "dl1"); err != nil { // b reads the new topic from the store
		t.Fatalf("Publish: %v", err)
	}
	eventually(t, 30*time.Second, "the dead letter in the outbox", func() bool {
		recs, err := b.st.DeadLetters(ctx)
		return err == nil && len(recs) == 1
	})
	a.nc.Close()
	eventually(t, 30*time.Second, "the dead letter written", func() bool { return len(c.objects.Objects("deadletters")) > 0 })
	eventually(t, 30*time.Second, "the outbox empty", func() bool {
		recs, err := b.st.DeadLetters(ctx)
		return err == nil && len(recs) == 0
	})
	objs := c.objects.Objects("deadletters")
	if len(objs) != 1 {
		t.Fatalf("%d dead-letter objects, want 1: %+v", len(objs), objs)
	}
	recs := c.objects.Records(t, "deadletters", "", schemas.EventGrid, a.r.TopicID("orders"))
	if len(recs) != 1 || recs[0].Event.ID != "dl1" {
		t.Errorf("dead-letter records %+v, want dl1 once", recs)
	}
}

// When the NATS server goes away every node refuses publishes and stops its actors; when it
// comes back the nodes resume by themselves: each subscription runs on one node again and
// what is published next is delivered.
func TestNodesResumeWhenNATSReturns(t *testing.T) {
	dir := t.TempDir()
	opts := &natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		MaxPayload: jetstream.MinMaxPayload,
	}
	startServer := func() *natsserver.Server {
		t.Helper()
		srv, err := natsserver.NewServer(opts)
		if err != nil {
			t.Fatalf("starting a NATS server: %v", err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("the NATS server did not accept connections within 10s")
		}
		return srv
	}
	srv := startServer()
	opts.Port = srv.Addr().(*net.TCPAddr).Port // the same port again
	defer func() { srv.Shutdown() }()
	c := newCluster(t)
	c.url, c.files = srv.ClientURL(), true
	// The lines about one subscription's lease carry its topic and its name, as every line
	// about a subscription does; they carried "subscription=orders/sub0".
	var (
		leaseMu    sync.Mutex
		leaseLines []string
	)
	c.onLog = func(line string) {
		if strings.Contains(line, "lease of a subscription") {
			leaseMu.Lock()
			leaseLines = append(leaseLines, line)
			leaseMu.Unlock()
		}
	}
	a, b := c.start("a"), c.start("b")
	setup(t, 2, a, b)
	if err := publish(t, a.r, "orders", "before"); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	eventually(t, 30*time.Second, "delivered before the outage", func() bool { return len(c.rec.attemptsOf("before")) == 2 })

	srv.Shutdown()
	srv.WaitForShutdown()
	if err := publish(t, a.r, "orders", "refused"); !errors.Is(err, router.ErrUnavailable) {
		t.Errorf("publish while NATS is down = %v, want ErrUnavailable", err)
	}
	if !notReady(t, a.r) {
		t.Error("a node cut off from NATS is ready")
	}
	if h := a.r.Health(); h.State != router.Failed || !strings.Contains(h.Reason, "not connected to NATS") {
		t.Errorf("Health of a node cut off from NATS = %+v, want Failed saying it is not connected", h)
	}
	eventually(t, 30*time.Second, "every actor stopped", func() bool {
		return len(runners("orders", "sub0", a, b))+len(runners("orders", "sub1", a, b)) == 0
	})
	leaseMu.Lock()
	if len(leaseLines) == 0 {
		t.Error("no node logged that it could not renew a subscription's lease")
	}
	for _, line := range leaseLines {
		if !strings.Contains(line, "topic=orders ") || !strings.Contains(line, "subscription=sub0 ") && !strings.Contains(line, "subscription=sub1 ") {
			t.Errorf("a line about a subscription's lease without its topic and name apart: %s", line)
		}
	}
	leaseMu.Unlock()

	srv = startServer()
	eventually(t, 60*time.Second, "each subscription running on one node again", func() bool {
		return len(runners("orders", "sub0", a, b)) == 1 && len(runners("orders", "sub1", a, b)) == 1
	})
	eventually(t, 30*time.Second, "publishes accepted again", func() bool { return publish(t, b.r, "orders", "after") == nil })
	if notReady(t, b.r) {
		t.Error("a node connected again is not ready")
	}
	if h := b.r.Health(); h.State != router.Healthy {
		t.Errorf("Health of a node connected again = %+v, want Healthy", h)
	}
	eventually(t, 30*time.Second, "delivered after the outage", func() bool { return len(c.rec.attemptsOf("after")) >= 2 })
	if n := len(c.rec.attemptsOf("refused")); n != 0 {
		t.Errorf("the refused publish was delivered %d times", n)
	}
}

// Nodes started at the same moment all come up: they share the dead-letter notification
// topic that each creates when it is missing.
func TestNodesStartTogether(t *testing.T) {
	c := newCluster(t)
	nodes, errs := make([]*node, 3), make([]error, 3)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() { nodes[i], errs[i] = c.open(fmt.Sprintf("n%d", i)) })
	}
	wg.Wait()
	for i, n := range nodes {
		if errs[i] != nil {
			t.Fatalf("node n%d did not start: %v", i, errs[i])
		}
		if _, err := n.r.Topic(router.DefaultDeadLetterTopic); err != nil {
			t.Errorf("node %s: %v", n.name, err)
		}
	}
}

// notReady reports whether r's cluster readiness check fails.
func notReady(t *testing.T, r *router.Router) bool {
	for _, c := range r.ReadinessChecks() {
		if c.Name == router.CheckCluster {
			return c.Run(t.Context()) != nil
		}
	}
	t.Fatal("no cluster readiness check")
	return false
}

// A state write that fails in a NATS outage shorter than the lease restarts the actor with a
// new writer once NATS is back (a writer keeps its first error): the subscription's cursor
// moves on again.
func TestShortOutageRestartsTheActor(t *testing.T) {
	dir := t.TempDir()
	opts := &natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		MaxPayload: jetstream.MinMaxPayload,
	}
	startServer := func() *natsserver.Server {
		t.Helper()
		srv, err := natsserver.NewServer(opts)
		if err != nil {
			t.Fatalf("starting a NATS server: %v", err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("the NATS server did not accept connections within 10s")
		}
		return srv
	}
	srv := startServer()
	opts.Port = srv.Addr().(*net.TCPAddr).Port
	defer func() { srv.Shutdown() }()
	c := newCluster(t)
	c.url, c.files = srv.ClientURL(), true
	c.rec.gate = make(chan struct{})
	a := c.start("a")
	setup(t, 1, a)
	if err := publish(t, a.r, "orders", "slow"); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	// The attempt of "slow" is in the sink; NATS goes away; the attempt succeeds, and the
	// cursor write that follows fails.
	eventually(t, 30*time.Second, "slow in flight", func() bool {
		st, err := a.r.Status(t.Context(), "orders", "sub0")
		return err == nil && st.InFlight == 1
	})
	srv.Shutdown()
	srv.WaitForShutdown()
	close(c.rec.gate)
	eventually(t, 30*time.Second, "slow attempted", func() bool { return len(c.rec.attemptsOf("slow")) >= 1 })
	srv = startServer() // well within the lease: a keeps it
	eventually(t, 30*time.Second, "publishes accepted again", func() bool { return publish(t, a.r, "orders", "after") == nil })
	eventually(t, 30*time.Second, "after delivered", func() bool { return len(c.rec.attemptsOf("after")) >= 1 })
	check, err := jetstream.Open(t.Context(), a.nc, jetstream.Options{Prefix: c.prefix, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatalf("opening a store: %v", err)
	}
	eventually(t, 30*time.Second, "the stored cursor past after", func() bool {
		last, err := check.LastSeq(t.Context(), "orders")
		if err != nil {
			return false
		}
		st, err := check.LoadSubscription(t.Context(), "orders", "sub0")
		return err == nil && st.Cursor >= last
	})
}

// While nodes join and leave, no subscription ever runs on two nodes at once (sampled every
// few milliseconds), and every event published meanwhile is delivered to every subscription.
func TestPlacementExclusiveWhileNodesComeAndGo(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	const subs = 8
	setup(t, subs, a, b)
	var mu sync.Mutex
	nodes := []*node{a, b}
	stop := make(chan struct{})
	var violations []string
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			mu.Lock()
			ns := slices.Clone(nodes)
			mu.Unlock()
			for i := range subs {
				sub := fmt.Sprintf("sub%d", i)
				if run := runners("orders", sub, ns...); len(run) > 1 {
					violations = append(violations, fmt.Sprintf("%s on %v", sub, run))
				}
			}
		}
	})
	published := 0
	pub := func(n *node) {
		t.Helper()
		for range 5 {
			if err := publish(t, n.r, "orders", fmt.Sprintf("ev%d", published)); err != nil {
				t.Fatalf("Publish on %s: %v", n.name, err)
			}
			published++
		}
	}
	pub(a)
	d := c.start("c") // joins: takes its share
	mu.Lock()
	nodes = append(nodes, d)
	mu.Unlock()
	eventually(t, 30*time.Second, "c runs some subscriptions", func() bool {
		for i := range subs {
			if d.r.RunsSubscription("orders", fmt.Sprintf("sub%d", i)) {
				return true
			}
		}
		return false
	})
	pub(d)
	b.stop() // leaves cleanly: hands its subscriptions over at once
	pub(a)
	eventually(t, 30*time.Second, "every subscription on a or c", func() bool {
		for i := range subs {
			if len(runners("orders", fmt.Sprintf("sub%d", i), a, d)) != 1 {
				return false
			}
		}
		return true
	})
	eventually(t, 30*time.Second, "every event delivered to every subscription", func() bool {
		for i := range published {
			seen := map[string]bool{}
			for _, at := range c.rec.attemptsOf(fmt.Sprintf("ev%d", i)) {
				seen[at.sub] = true
			}
			if len(seen) < subs {
				return false
			}
		}
		return true
	})
	close(stop)
	sampler.Wait()
	if len(violations) > 0 {
		t.Errorf("subscriptions ran on two nodes at once: %v", violations[:min(5, len(violations))])
	}
}
