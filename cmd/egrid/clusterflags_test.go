package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store/jetstream"

	"github.com/egridio/egrid/testkit"
)

func resolveClusterWith(t *testing.T, args []string, env map[string]string, fs serverConfig) (clusterSettings, error) {
	t.Helper()
	var got clusterSettings
	var errs []error
	app := &cli.App{
		Flags: clusterFlags(),
		Action: func(c *cli.Context) error {
			got, errs = resolveCluster(c, func(k string) string { return env[k] }, fs)
			return nil
		},
	}
	if err := app.Run(append([]string{"egrid"}, args...)); err != nil {
		t.Fatal(err)
	}
	return got, errors.Join(errs...)
}

// Flag beats environment beats file beats default, for every cluster setting; without URLs
// cluster mode is off; bad values are refused with what to do.
func TestResolveCluster(t *testing.T) {
	file := serverConfig{Cluster: clusterFileConfig{URLs: []string{"nats://file:4222"}, Replicas: 3, NodeName: "file-node", Prefix: "FILE", LeaseTTL: 7 * time.Second}}
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		file     serverConfig
		urls     []string
		replicas int
		node     string
		prefix   string
		ttl      time.Duration
		bad      string
	}{
		{name: "default: off", replicas: 1, prefix: "EGRID", ttl: 5 * time.Second},
		{name: "file", file: file, urls: []string{"nats://file:4222"}, replicas: 3, node: "file-node", prefix: "FILE", ttl: 7 * time.Second},
		{name: "env beats file", file: file,
			env:  map[string]string{"EGRID_CLUSTER": "nats://e1:4222, nats://e2:4222", "EGRID_CLUSTER_REPLICAS": "5", "EGRID_NODE_NAME": "env-node", "EGRID_CLUSTER_PREFIX": "ENV", "EGRID_CLUSTER_LEASE_TTL": "9s"},
			urls: []string{"nats://e1:4222", "nats://e2:4222"}, replicas: 5, node: "env-node", prefix: "ENV", ttl: 9 * time.Second},
		{name: "flag beats env", file: file,
			args: []string{"--cluster", "nats://f:4222", "--cluster-replicas", "1", "--node-name", "flag-node", "--cluster-prefix", "FLAG", "--cluster-lease-ttl", "3s"},
			env:  map[string]string{"EGRID_CLUSTER": "nats://e1:4222", "EGRID_NODE_NAME": "env-node"},
			urls: []string{"nats://f:4222"}, replicas: 1, node: "flag-node", prefix: "FLAG", ttl: 3 * time.Second},
		{name: "bad node name", args: []string{"--cluster", "nats://f:4222", "--node-name", "a.b"}, bad: "node name"},
		{name: "bad url", args: []string{"--cluster", "f:4222"}, bad: "nats://host:4222"},
		{name: "bad replicas", args: []string{"--cluster", "nats://f:4222", "--cluster-replicas", "7"}, bad: "replicas"},
		{name: "short lease", args: []string{"--cluster", "nats://f:4222", "--cluster-lease-ttl", "100ms"}, bad: "at least 1s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveClusterWith(t, tc.args, tc.env, tc.file)
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("error %v, want one saying %q", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.URLs, tc.urls) || got.enabled() != (len(tc.urls) > 0) || got.Replicas != tc.replicas || got.Options.Replicas != tc.replicas ||
				got.Options.Prefix != tc.prefix || got.Options.LeaseTTL != tc.ttl {
				t.Errorf("resolved %+v; want urls %v replicas %d prefix %s ttl %v", got, tc.urls, tc.replicas, tc.prefix, tc.ttl)
			}
			if tc.node != "" && got.Options.NodeName != tc.node {
				t.Errorf("node name %q, want %q", got.Options.NodeName, tc.node)
			}
			if tc.node == "" && got.Options.NodeName == "" {
				t.Error("no default node name")
			}
		})
	}
}

// clusterPassword is the password of the cluster URLs below; no output may hold it.
const clusterPassword = "s3cret-pass"

// A --cluster URL may carry credentials (nats://user:password@host:4222, or a token as the
// user): they are kept out of every error and log line, which show the URLs without them.
func TestClusterURLCredentialsAreNotPrinted(t *testing.T) {
	t.Run("refused settings", func(t *testing.T) {
		for _, u := range []string{
			"egrid:" + clusterPassword + "@n1:4222",           // no scheme
			"nats://egrid:" + clusterPassword + "%zz@n1:4222", // a bad escape
			"nats://egrid:" + clusterPassword + "/x@n1:4222",  // an unescaped '/'
		} {
			_, err := resolveClusterWith(t, []string{"--cluster", u}, nil, serverConfig{})
			if err == nil || strings.Contains(err.Error(), clusterPassword) || !strings.Contains(err.Error(), "n1:4222") {
				t.Errorf("--cluster %s: error %v; want one naming n1:4222 without the password", u, err)
			}
		}
	})
	t.Run("unreachable server", func(t *testing.T) {
		code, out := cliRun(t, "serve", "--listen", "127.0.0.1:0", "--insecure-dev",
			"--cluster", "nats://egrid:"+clusterPassword+"@127.0.0.1:1,nats://"+clusterPassword+"@127.0.0.1:2")
		if code == 0 || strings.Contains(out, clusterPassword) || !strings.Contains(out, "nats://127.0.0.1:1,nats://127.0.0.1:2") {
			t.Errorf("serve exited %d with %q; want an error naming nats://127.0.0.1:1,nats://127.0.0.1:2 without the password", code, out)
		}
	})
	t.Run("cluster mode log", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a NATS server and the binary; skipped with -short")
		}
		nc := testkit.StartNATSCluster(t, 1) // no authorization: any credentials are accepted
		url := strings.Replace(nc.ClientURL(0), "nats://", "nats://egrid:"+clusterPassword+"@", 1)
		lines := make(chan string, 1)
		srv := startLogged(t, lines, "cluster mode", "--insecure-dev", "--cluster", url, "--cluster-prefix", "REDACT")
		line := <-lines // logged before "egrid serving", which startLogged waited for
		if strings.Contains(line, clusterPassword) || !strings.Contains(line, nc.ClientURL(0)) {
			t.Errorf("logged %q; want the URL %s without the password", line, nc.ClientURL(0))
		}
		srv.stop(t)
		if strings.Contains(srv.log(), clusterPassword) {
			t.Errorf("the log holds the password:\n%s", srv.log())
		}
	})
}

// The hint to enable JetStream comes when JetStream is not enabled, and only then: a store
// that did not open for another reason (here the caller's deadline passed) says nothing of it.
func TestOpenClusterJetStreamHint(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		name      string
		jetStream bool
		hint      bool
	}{{"without JetStream", false, true}, {"deadline passed", true, false}} {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := natsserver.NewServer(&natsserver.Options{
				Host: "127.0.0.1", Port: -1, JetStream: tt.jetStream, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
				MaxPayload: jetstream.MinMaxPayload,
			})
			if err != nil {
				t.Fatal(err)
			}
			go srv.Start()
			t.Cleanup(srv.Shutdown)
			if !srv.ReadyForConnections(10 * time.Second) {
				t.Fatal("in-process server not ready within 10s")
			}
			ctx := context.Background()
			if tt.jetStream {
				c, cancel := context.WithDeadline(ctx, time.Unix(0, 0))
				defer cancel()
				ctx = c
			}
			s := clusterSettings{URLs: []string{srv.ClientURL()}, Replicas: 1, Options: cluster.Options{NodeName: "n1", Prefix: "HINT"}}
			nc, st, err := openCluster(ctx, s, log, new(metrics.Set))
			if err == nil {
				_ = st.Close()
				nc.Close()
				t.Fatal("openCluster succeeded")
			}
			msg := err.Error()
			if got := strings.Contains(msg, "enable JetStream") || strings.Contains(msg, "JetStream enabled"); got != tt.hint {
				t.Errorf("openCluster: %v; hint to enable JetStream: %v, want %v", err, got, tt.hint)
			}
		})
	}
}
