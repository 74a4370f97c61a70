package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/sinks"
)

// ClusterScenarios is the bench of cluster mode (`egrid bench --cluster`): each scenario
// starts, in this process and on 127.0.0.1, three NATS servers with JetStream clustered and
// three egrid routers as nodes of one cluster on them, with every stream and bucket
// replicated three times. The baseline is raw JetStream in the same run: the same event
// bodies published as one message each to a stream with three replicas, pipelined, every
// publish acknowledged — what the journal append does beneath egrid's publish path.
var ClusterScenarios = []Scenario{
	{Name: "cluster-publish", Description: "durable publish, 100 × 1 KB per request, spread over 3 nodes and all to one (R3)", Run: clusterPublish},
	{Name: "cluster-e2e", Description: "publish to delivery on 3 nodes (R3), 10 subscriptions, maxEventsPerBatch 100", Run: clusterEndToEnd},
	{Name: "cluster-failover", Description: "kill the node running a third of 30 subscriptions; time until each delivers again (default lease TTL)", Run: clusterFailover},
}

// ClusterNames returns the names of [ClusterScenarios], in order.
func ClusterNames() []string {
	names := make([]string, len(ClusterScenarios))
	for i, s := range ClusterScenarios {
		names[i] = s.Name
	}
	return names
}

// clusterReplicas is the replication of the bench cluster's streams and buckets.
const clusterReplicas = 3

// natsCluster is three in-process NATS servers with JetStream clustered.
type natsCluster struct {
	servers []*natsserver.Server
	urls    []string
}

// startNATS starts n clustered servers under dir, one after the other (each routed to those
// before it and to itself), and waits until their JetStream meta group has every server;
// nats-server 2.10 now and then leaves a server out of a group formed under load, so a start
// that does not form within 15 s is tried again (three times).
func startNATS(dir string, n int) (*natsCluster, error) {
	var err error
	for try := range 3 {
		var c *natsCluster
		if c, err = tryStartNATS(filepath.Join(dir, fmt.Sprintf("nats-%d", try)), n); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func tryStartNATS(dir string, n int) (*natsCluster, error) {
	c := &natsCluster{}
	var routes []*url.URL
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.close()
			return nil, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		self := &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", port)}
		srv, err := natsserver.NewServer(&natsserver.Options{
			ServerName: fmt.Sprintf("bench-%d", i), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprint(i)), MaxPayload: jetstream.MinMaxPayload,
			NoLog: true, NoSigs: true,
			Cluster: natsserver.ClusterOpts{Name: "egrid-bench", Host: "127.0.0.1", Port: port},
			Routes:  append(slices.Clone(routes), self),
		})
		if err != nil {
			c.close()
			return nil, err
		}
		go srv.Start()
		c.servers = append(c.servers, srv)
		if !srv.ReadyForConnections(15 * time.Second) {
			c.close()
			return nil, fmt.Errorf("NATS server %d did not listen within 15 s", i)
		}
		c.urls = append(c.urls, srv.ClientURL())
		routes = append(routes, self)
		if err := c.waitMeta(15 * time.Second); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// waitMeta waits until the meta group's leader counts every running server as current.
func (c *natsCluster) waitMeta(bound time.Duration) error {
	if len(c.servers) < 2 {
		return nil
	}
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		for _, s := range c.servers {
			if !s.JetStreamIsLeader() {
				continue
			}
			info, err := s.Jsz(&natsserver.JSzOptions{})
			if err != nil || info.Meta == nil {
				continue
			}
			current := 1
			for _, p := range info.Meta.Replicas {
				if p.Current && !p.Offline {
					current++
				}
			}
			// Placement takes only servers whose statistics the leader has.
			if current == len(c.servers) && len(s.JetStreamClusterPeers()) == len(c.servers) {
				return nil
			}
		}
		<-time.After(10 * time.Millisecond)
	}
	return fmt.Errorf("the JetStream meta group of %d NATS servers did not form within %v", len(c.servers), bound)
}

func (c *natsCluster) url() string { return c.urls[0] + "," + c.urls[len(c.urls)-1] }

func (c *natsCluster) close() {
	for _, s := range c.servers {
		s.Shutdown()
	}
	for _, s := range c.servers {
		s.WaitForShutdown()
	}
}

// clusterNode is one egrid router of the bench cluster, served on 127.0.0.1.
type clusterNode struct {
	name string
	r    *router.Router
	nc   *nats.Conn
	st   *jetstream.Store
	srv  *http.Server
	url  string
}

// benchCluster is the NATS cluster and the egrid nodes on it.
type benchCluster struct {
	nats  *natsCluster
	nodes []*clusterNode
}

// startCluster starts the NATS cluster and n routers with cfg; sinks, when set, gives each
// node its Go sinks.
func (b *Runner) startCluster(ctx context.Context, n int, cfg router.Config, sinksOf func(node string) map[string]sinks.Sink) (*benchCluster, error) {
	b.runs++
	nc, err := startNATS(filepath.Join(b.opt.Dir, fmt.Sprintf("cluster-%d", b.runs)), 3)
	if err != nil {
		return nil, err
	}
	c := &benchCluster{nats: nc}
	for i := range n {
		node, err := startClusterNode(ctx, nc.url(), fmt.Sprintf("node-%d", i), cfg, sinksOf)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("starting cluster node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, node)
	}
	return c, nil
}

func startClusterNode(ctx context.Context, natsURL, name string, cfg router.Config, sinksOf func(node string) map[string]sinks.Sink) (*clusterNode, error) {
	var err error
	for range 3 { // a new R3 bucket may have no leader yet and the first reads time out
		var n *clusterNode
		if n, err = tryClusterNode(ctx, natsURL, name, cfg, sinksOf); err == nil {
			return n, nil
		}
	}
	return nil, err
}

func tryClusterNode(ctx context.Context, natsURL, name string, cfg router.Config, sinksOf func(node string) map[string]sinks.Sink) (*clusterNode, error) {
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectBufSize(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	st, err := jetstream.Open(ctx, nc, jetstream.Options{Replicas: clusterReplicas, Timeout: 10 * time.Second})
	if err != nil {
		nc.Close()
		return nil, err
	}
	cfg.InsecureDev = true
	cfg.SkipEndpointValidation = true
	cfg.Cluster = cluster.Options{NodeName: name, Replicas: clusterReplicas}
	deps := router.Deps{Store: st, NATS: nc, Logger: slog.New(slog.DiscardHandler)}
	if sinksOf != nil {
		deps.Sinks = sinksOf(name)
	}
	r, err := router.New(cfg, deps)
	if err != nil {
		_ = st.Close()
		nc.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = r.Close(ctx)
		_ = st.Close()
		nc.Close()
		return nil, err
	}
	n := &clusterNode{name: name, r: r, nc: nc, st: st, url: "http://" + ln.Addr().String()}
	n.srv = &http.Server{Handler: httpapi.New(r)}
	go n.srv.Serve(ln)
	return n, nil
}

// kill takes the node away as a crash would: its NATS connection first (it can neither renew
// nor hand over its leases), then the rest.
func (n *clusterNode) kill() {
	n.nc.Close()
	n.close()
}

func (n *clusterNode) close() {
	_ = n.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = n.r.Close(ctx)
	_ = n.st.Close()
	n.nc.Close()
}

func (c *benchCluster) close() {
	for _, n := range c.nodes {
		if n != nil {
			n.close()
		}
	}
	c.nats.close()
}

// publishURLs are the topic's publish endpoints on every node.
func (c *benchCluster) publishURLs(topic string) []string {
	var urls []string
	for _, n := range c.nodes {
		urls = append(urls, n.url+"/topics/"+topic+"/api/events")
	}
	return urls
}

// createTopic creates topic on the first node and waits (bounded) until every node accepts
// publishes to it.
func (c *benchCluster) createTopic(ctx context.Context, topic string) error {
	if _, err := c.nodes[0].r.CreateTopic(ctx, topic, router.TopicSpec{}); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.nodes {
		for {
			if _, err := n.r.Topic(topic); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("node %s does not know topic %s after 30 s", n.name, topic)
			}
			<-time.After(10 * time.Millisecond)
		}
	}
	return nil
}

// loadSpread is [Runner.load] with the connections spread over urls (connection i posts to
// urls[i % len(urls)]).
func (b *Runner) loadSpread(ctx context.Context, label string, urls []string, body []byte, d time.Duration) (float64, error) {
	client := loadClient(b.opt.Concurrency)
	defer client.CloseIdleConnections()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	stop := b.progress(label, func() string { return fmt.Sprintf("%d requests", ok.Load()) })
	for i := range b.opt.Concurrency {
		wg.Go(func() {
			url := urls[i%len(urls)]
			for ctx.Err() == nil && time.Now().Before(deadline) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	stop()
	if ok.Load() == 0 {
		return 0, fmt.Errorf("%s: no request succeeded (%d failed)", label, failed.Load())
	}
	return float64(ok.Load()) / time.Since(start).Seconds(), nil
}

// rawJetStream is the cluster baseline: Concurrency publishers, spread over the NATS servers,
// each publishing the events of body as one message each to an R3 stream, pipelined, and
// waiting for every acknowledgement before the next batch. It returns acknowledged
// events/s.
func (b *Runner) rawJetStream(ctx context.Context, c *natsCluster, body []byte, d time.Duration) (float64, error) {
	var events []json.RawMessage
	if err := json.Unmarshal(body, &events); err != nil {
		return 0, err
	}
	conns := make([]*nats.Conn, len(c.urls))
	for i, u := range c.urls {
		nc, err := nats.Connect(u)
		if err != nil {
			return 0, err
		}
		defer nc.Close()
		conns[i] = nc
	}
	js0, err := njs.New(conns[0])
	if err != nil {
		return 0, err
	}
	if _, err := js0.CreateStream(ctx, njs.StreamConfig{Name: "RAW", Subjects: []string{"raw"}, Replicas: clusterReplicas, Storage: njs.FileStorage}); err != nil {
		return 0, fmt.Errorf("creating the baseline stream: %w", err)
	}
	defer func() { _ = js0.DeleteStream(context.Background(), "RAW") }()
	var acked, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	stop := b.progress("baseline raw JetStream R3", func() string { return fmt.Sprintf("%d events", acked.Load()) })
	for i := range b.opt.Concurrency {
		js, err := njs.New(conns[i%len(conns)], njs.WithPublishAsyncMaxPending(1<<16))
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				futures := make([]njs.PubAckFuture, 0, len(events))
				for _, e := range events {
					f, err := js.PublishAsync("raw", e)
					if err != nil {
						failed.Add(1)
						continue
					}
					futures = append(futures, f)
				}
				for _, f := range futures {
					select {
					case <-f.Ok():
						acked.Add(1)
					case <-f.Err():
						failed.Add(1)
					case <-ctx.Done():
						return
					}
				}
			}
		})
	}
	wg.Wait()
	stop()
	if acked.Load() == 0 {
		return 0, fmt.Errorf("baseline raw JetStream: nothing acknowledged (%d failed)", failed.Load())
	}
	return float64(acked.Load()) / time.Since(start).Seconds(), nil
}

// clusterPublish measures durable publish over the three nodes against raw JetStream.
func clusterPublish(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	c, err := b.startCluster(ctx, 3, router.Config{}, nil)
	if err != nil {
		return nil, err
	}
	defer c.close()
	body := eventBody(100, "c", "/bench")
	base, err := b.rawJetStream(ctx, c.nats, body, b.opt.Duration)
	if err != nil {
		return nil, err
	}
	if err := c.createTopic(ctx, "bench"); err != nil {
		return nil, err
	}
	rps, err := b.loadSpread(ctx, "egrid publish, 3 nodes", c.publishURLs("bench"), body, b.opt.Duration)
	if err != nil {
		return nil, err
	}
	// The same load on one node: a topic's appends from several nodes contend for the
	// journal's end (each append expects the last sequence it saw), one node's do not.
	one, err := b.loadSpread(ctx, "egrid publish, 1 node", c.publishURLs("bench")[:1], body, b.opt.Duration)
	if err != nil {
		return nil, err
	}
	v, v1 := rps*100, one*100
	return []Result{
		{Scenario: s.Name, Metric: "durable publish (R3), spread over 3 nodes", Value: v, Unit: "events/s", Baseline: base, Ratio: v / base, Target: s.Target},
		{Scenario: s.Name, Metric: "durable publish (R3), all to 1 node", Value: v1, Unit: "events/s", Baseline: base, Ratio: v1 / base},
	}, nil
}

// clusterEndToEnd publishes over the three nodes to ten subscriptions (placed over the nodes)
// delivering in batches of 100 to the counting sink, and reports delivered events/s from the
// first publish to the last delivery against raw JetStream.
func clusterEndToEnd(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	sink, err := startSink()
	if err != nil {
		return nil, err
	}
	defer sink.close()
	c, err := b.startCluster(ctx, 3, router.Config{MaxInFlight: 64}, nil)
	if err != nil {
		return nil, err
	}
	defer c.close()
	body := eventBody(100, "e", "/bench")
	base, err := b.rawJetStream(ctx, c.nats, body, b.opt.Duration)
	if err != nil {
		return nil, err
	}
	if err := c.createTopic(ctx, "bench"); err != nil {
		return nil, err
	}
	const subs = 10
	for i := range subs {
		spec := router.SubscriptionSpec{Destination: router.WebHook(fmt.Sprintf("%s/hook/%d", sink.url, i))}
		spec.Destination.Properties.MaxEventsPerBatch = 100
		if err := c.nodes[0].r.CreateSubscription(ctx, "bench", fmt.Sprintf("sub-%d", i), spec); err != nil {
			return nil, err
		}
	}
	if err := c.waitPlaced(ctx, "bench", subs, 60*time.Second); err != nil {
		return nil, err
	}
	start := time.Now()
	rps, err := b.loadSpread(ctx, "egrid publish, 3 nodes", c.publishURLs("bench"), body, b.opt.Duration)
	if err != nil {
		return nil, err
	}
	var published int64
	for _, n := range c.nodes {
		published += n.r.Metrics().Snapshot().Sum("PublishSuccessCount", "bench")
	}
	if published == 0 {
		published = int64(rps * b.opt.Duration.Seconds() * 100)
	}
	want := published * subs
	last := b.drain(ctx, "delivering to 10", sink.events.Load, want, 60*time.Second)
	delivered := sink.events.Load()
	rate := float64(delivered) / last.Sub(start).Seconds()
	res := Result{Scenario: s.Name, Metric: "end-to-end deliveries (R3, 10 subscriptions)", Value: rate, Unit: "events/s", Baseline: base, Ratio: rate / base, Target: s.Target}
	if delivered < want {
		res.Note = fmt.Sprintf("only %d of %d delivered within the bound", delivered, want)
	}
	return []Result{res}, nil
}

// waitPlaced waits until each of topic's subscriptions sub-0..sub-(n-1) runs on one node.
func (c *benchCluster) waitPlaced(ctx context.Context, topic string, n int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		placed := 0
		for i := range n {
			for _, node := range c.nodes {
				if node != nil && node.r.RunsSubscription(topic, fmt.Sprintf("sub-%d", i)) {
					placed++
					break
				}
			}
		}
		if placed == n {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("only %d of %d subscriptions placed on a node within %v", placed, n, bound)
		}
		<-time.After(10 * time.Millisecond)
	}
}

// clusterFailover runs 30 subscriptions (Go sinks that note which node delivered) on three
// nodes with the default lease TTL while a publisher sends 200 events/s, kills the node
// running the most of them, and reports, for those subscriptions, the time from the kill to
// their first delivery by another node (the slowest; the median in the note).
func clusterFailover(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	const subs = 30
	type seen struct {
		node string
		at   time.Time
	}
	var mu sync.Mutex
	deliveries := map[string][]seen{} // subscription → deliveries
	sinksOf := func(node string) map[string]sinks.Sink {
		return map[string]sinks.Sink{"hook": sinks.Func(func(_ context.Context, batch *sinks.Batch) error {
			mu.Lock()
			deliveries[batch.Subscription] = append(deliveries[batch.Subscription], seen{node, time.Now()})
			mu.Unlock()
			return nil
		})}
	}
	c, err := b.startCluster(ctx, 3, router.Config{}, sinksOf)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.createTopic(ctx, "bench"); err != nil {
		return nil, err
	}
	for i := range subs {
		if err := c.nodes[0].r.CreateSubscription(ctx, "bench", fmt.Sprintf("sub-%d", i), router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
			return nil, err
		}
	}
	if err := c.waitPlaced(ctx, "bench", subs, 60*time.Second); err != nil {
		return nil, err
	}
	// The victim: the node running the most subscriptions.
	victim, most := 0, -1
	var victimSubs []string
	for i, n := range c.nodes {
		var names []string
		for j := range subs {
			if name := fmt.Sprintf("sub-%d", j); n.r.RunsSubscription("bench", name) {
				names = append(names, name)
			}
		}
		if len(names) > most {
			victim, most, victimSubs = i, len(names), names
		}
	}
	// A steady publisher on the other nodes: 10 events every 50 ms.
	survivors := slices.Delete(c.publishURLs("bench"), victim, victim+1)
	pubCtx, stopPub := context.WithCancel(ctx)
	var pub sync.WaitGroup
	pub.Go(func() {
		client := loadClient(1)
		body := eventBody(10, "f", "/bench")
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-pubCtx.Done():
				return
			case <-tick.C:
			}
			req, _ := http.NewRequestWithContext(pubCtx, http.MethodPost, survivors[i%len(survivors)], bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	})
	defer func() { stopPub(); pub.Wait() }()
	// Every victim subscription is delivering before the kill.
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		ready := 0
		for _, name := range victimSubs {
			if len(deliveries[name]) > 0 {
				ready++
			}
		}
		mu.Unlock()
		if ready == len(victimSubs) {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the victim node's subscriptions did not deliver within 60 s")
		}
		<-time.After(10 * time.Millisecond)
	}
	victimName := c.nodes[victim].name
	fmt.Fprintf(b.opt.Progress, "   killing %s, which runs %d of %d subscriptions\n", victimName, len(victimSubs), subs)
	killed := time.Now()
	c.nodes[victim].kill()
	c.nodes[victim] = nil
	c.nodes = slices.Delete(c.nodes, victim, victim+1)
	var gaps []time.Duration
	stopProgress := b.progress("failover", func() string { return fmt.Sprintf("%d/%d resumed", len(gaps), len(victimSubs)) })
	pending := slices.Clone(victimSubs)
	deadline = time.Now().Add(120 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		mu.Lock()
		pending = slices.DeleteFunc(pending, func(name string) bool {
			for _, d := range deliveries[name] {
				if d.at.After(killed) && d.node != victimName {
					gaps = append(gaps, d.at.Sub(killed))
					return true
				}
			}
			return false
		})
		mu.Unlock()
		<-time.After(5 * time.Millisecond)
	}
	stopProgress()
	if len(gaps) == 0 {
		return nil, fmt.Errorf("none of the %d subscriptions of the killed node resumed within 120 s", len(victimSubs))
	}
	slices.Sort(gaps)
	res := Result{Scenario: s.Name, Metric: fmt.Sprintf("failover, slowest of %d subscriptions", len(victimSubs)),
		Value: float64(gaps[len(gaps)-1].Microseconds()) / 1000, Unit: "ms", Target: s.Target,
		Note: fmt.Sprintf("median %.0f ms; lease TTL %v", float64(gaps[len(gaps)/2].Microseconds())/1000, cluster.DefaultLeaseTTL)}
	if len(pending) > 0 {
		res.Note += fmt.Sprintf("; %d never resumed within 120 s", len(pending))
	}
	return []Result{res}, nil
}
