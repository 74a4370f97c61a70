package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/testkit"
)

// A node looks a topic it does not know up in the cluster's store (created on another node a
// moment ago). When the store cannot answer — NATS is away — the publish is refused as
// unavailable, which publishers retry, not as a topic that does not exist.
func TestPublishToAnUnknownTopicWhileTheStoreIsAwayIsUnavailable(t *testing.T) {
	nc := testkit.StartNATSCluster(t, 1)
	c := testkit.StartCluster(t, testkit.ClusterConfig{Nodes: 1, NATS: nc, Config: router.Config{InsecureDev: true}})
	nc.Kill(0)
	defer nc.Restart(0) // the node's Close finds NATS again

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ev := map[string]any{"id": "1", "subject": "/s", "eventType": "T", "eventTime": "2026-01-01T00:00:00Z", "data": map[string]any{}, "dataVersion": "1"}
	err := c.Router(0).Publish(ctx, "orders", ev)
	if !errors.Is(err, router.ErrUnavailable) || errors.Is(err, router.ErrTopicNotFound) {
		t.Errorf("publish to a topic the node does not know, with the store away: %v; want unavailable, not topic not found", err)
	}
	if _, err := c.Router(0).Topic("orders"); !errors.Is(err, router.ErrUnavailable) {
		t.Errorf("the topic's definition, with the store away: %v; want unavailable", err)
	}
}
