package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
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
