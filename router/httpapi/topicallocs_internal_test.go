package httpapi

import (
	"context"
	"testing"

	"github.com/egridio/egrid/router"
)

// TestTopicLookupAllocs: on a single node, finding a publish's topic by name — which in
// cluster mode may read the cluster's store — allocates nothing, as the lookup in the node's
// memory alone did: the publish hot path pays nothing for the cluster's lookups.
func TestTopicLookupAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations; run without -race")
	}
	ctx := context.Background()
	r, err := router.New(router.Config{}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "Orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if name, err := r.FindTopicName(ctx, "orders"); err != nil || name != "Orders" {
			t.Fatalf("FindTopicName(orders) = %q, %v; want Orders", name, err)
		}
	})
	if allocs != 0 {
		t.Errorf("finding a known topic's name allocates %.0f times; want none, as TopicName", allocs)
	}
}
