package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/schemas/clip"
)

// clusterFileConfig is server.cluster in the config file (README "Cluster mode").
type clusterFileConfig struct {
	// URLs are the NATS servers (nats://host:4222); setting them turns cluster mode on.
	URLs []string `yaml:"urls"`
	// Replicas is the JetStream replication of the store's streams and buckets (1; 3 in
	// production).
	Replicas int `yaml:"replicas"`
	// NodeName names this node, unique in the cluster (default host name and process id).
	NodeName string `yaml:"nodeName"`
	// Prefix starts every stream, bucket and subject name of the cluster (default EGRID).
	Prefix string `yaml:"prefix"`
	// LeaseTTL is how long a dead node keeps its subscriptions (default 5s).
	LeaseTTL time.Duration `yaml:"leaseTtl"`
}

// clusterSettings are the resolved cluster settings; cluster mode is on when URLs is set.
type clusterSettings struct {
	URLs     []string
	Replicas int
	Options  cluster.Options
}

func (s clusterSettings) enabled() bool { return len(s.URLs) > 0 }

// clusterFlags are serve's flags for cluster mode.
func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster", Usage: "run as one node of a cluster whose state is in NATS JetStream at these servers (nats://host:4222, comma-separated; give them max_payload: 4MB) instead of the embedded store (env EGRID_CLUSTER)"},
		&cli.IntFlag{Name: "cluster-replicas", Usage: "JetStream replicas of the cluster's streams and buckets when it creates them: 1, or 3 in production on three or more NATS servers (env EGRID_CLUSTER_REPLICAS)", Value: 1},
		&cli.StringFlag{Name: "node-name", Usage: "this node's name in the cluster, unique among its nodes; letters, digits, '-' and '_'; default: host name and process id (env EGRID_NODE_NAME)"},
		&cli.StringFlag{Name: "cluster-prefix", Usage: "prefix of the cluster's JetStream streams, buckets and subjects, the same on every node (env EGRID_CLUSTER_PREFIX)", Value: cluster.DefaultPrefix},
		&cli.DurationFlag{Name: "cluster-lease-ttl", Usage: "how long a node that stopped renewing keeps its subscriptions before others take them over (env EGRID_CLUSTER_LEASE_TTL)", Value: cluster.DefaultLeaseTTL},
	}
}

// resolveCluster resolves the cluster settings: flag > environment > file > default.
func resolveCluster(c *cli.Context, getenv func(string) string, fs serverConfig) (clusterSettings, []error) {
	var errs []error
	f := fs.Cluster
	s := clusterSettings{URLs: f.URLs, Replicas: f.Replicas, Options: cluster.Options{NodeName: f.NodeName, Prefix: f.Prefix, LeaseTTL: f.LeaseTTL}}
	switch {
	case c.IsSet("cluster"):
		s.URLs = splitURLs(c.String("cluster"))
	case getenv("EGRID_CLUSTER") != "":
		s.URLs = splitURLs(getenv("EGRID_CLUSTER"))
	}
	switch {
	case c.IsSet("cluster-replicas"):
		s.Replicas = c.Int("cluster-replicas")
	case getenv("EGRID_CLUSTER_REPLICAS") != "":
		v, err := strconv.Atoi(getenv("EGRID_CLUSTER_REPLICAS"))
		if err != nil {
			errs = append(errs, fmt.Errorf("EGRID_CLUSTER_REPLICAS=%q: use 1, 3 or 5", clip.String(getenv("EGRID_CLUSTER_REPLICAS"))))
		}
		s.Replicas = v
	}
	if s.Replicas == 0 {
		s.Replicas = 1
	}
	switch {
	case c.IsSet("node-name"):
		s.Options.NodeName = c.String("node-name")
	case getenv("EGRID_NODE_NAME") != "":
		s.Options.NodeName = getenv("EGRID_NODE_NAME")
	}
	switch {
	case c.IsSet("cluster-prefix"):
		s.Options.Prefix = c.String("cluster-prefix")
	case getenv("EGRID_CLUSTER_PREFIX") != "":
		s.Options.Prefix = getenv("EGRID_CLUSTER_PREFIX")
	}
	switch {
	case c.IsSet("cluster-lease-ttl"):
		s.Options.LeaseTTL = c.Duration("cluster-lease-ttl")
	case getenv("EGRID_CLUSTER_LEASE_TTL") != "":
		v, err := time.ParseDuration(getenv("EGRID_CLUSTER_LEASE_TTL"))
		if err != nil {
			errs = append(errs, fmt.Errorf("EGRID_CLUSTER_LEASE_TTL=%q: use a duration such as 5s", clip.String(getenv("EGRID_CLUSTER_LEASE_TTL"))))
		}
		s.Options.LeaseTTL = v
	}
	for _, u := range s.URLs {
		// Only redacted: a cluster URL may carry credentials (nats://user:password@host:4222).
		shown := clip.String(jetstream.RedactURLs(u))
		if !strings.Contains(u, "://") {
			errs = append(errs, fmt.Errorf("cluster URL %q: use nats://host:4222 (or tls://host:4222)", shown))
		} else if _, err := url.Parse(u); err != nil {
			errs = append(errs, fmt.Errorf("cluster URL %q is not a valid URL: use nats://host:4222, with any of : / ? # @ %% in the user name or password percent-encoded", shown))
		}
	}
	if s.Replicas < 1 || s.Replicas > 5 {
		errs = append(errs, fmt.Errorf("cluster replicas %d: use 1 to 5 (3 in production)", s.Replicas))
	}
	if err := s.Options.Validate(); err != nil {
		errs = append(errs, err)
	}
	s.Options.Replicas = s.Replicas
	s.Options = s.Options.WithDefaults()
	return s, errs
}

func splitURLs(v string) []string {
	var urls []string
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return urls
}

// openCluster connects to the cluster's NATS servers (reconnecting forever) and opens the
// JetStream store on them. Close the store, then the connection. Its errors name the servers
// without the credentials their URLs may carry ([jetstream.RedactURLs]). The damage the store
// finds is counted in m (metrics.StoreCorruptionCount), as the embedded store's is.
func openCluster(ctx context.Context, s clusterSettings, log *slog.Logger, m *metrics.Set) (*nats.Conn, *jetstream.Store, error) {
	nc, err := nats.Connect(strings.Join(s.URLs, ","),
		nats.Name("egrid "+s.Options.NodeName), nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond),
		// No buffering while disconnected: a publish answered 503 must not be stored later.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("disconnected from NATS: publishes are refused (503) and this node stops delivering until it reconnects", "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", "server", c.ConnectedUrlRedacted()) }))
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to NATS at %s: %w (is the server running? check --cluster)", jetstream.RedactURLs(strings.Join(s.URLs, ",")), jetstream.RedactError(err))
	}
	st, err := jetstream.Open(ctx, nc, jetstream.Options{
		Prefix: s.Options.Prefix, Replicas: s.Replicas, Logger: log,
		OnCorruption: func(kind string) { m.Add(metrics.Key{Name: metrics.StoreCorruptionCount, Dim: kind}, 1) },
	})
	if err != nil {
		nc.Close()
		// Only when that is the cause: the store waits for buckets that have no leader yet
		// (nodes and servers starting together), and its timeouts mean something else.
		if errors.Is(err, njs.ErrJetStreamNotEnabled) || errors.Is(err, njs.ErrJetStreamNotEnabledForAccount) {
			return nil, nil, fmt.Errorf("opening the JetStream store: %w (enable JetStream on the NATS servers, and for the account of egrid's NATS user: jetstream {} in their configuration, or nats-server -js)", err)
		}
		return nil, nil, fmt.Errorf("opening the JetStream store: %w", err)
	}
	return nc, st, nil
}
