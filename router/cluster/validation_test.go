package cluster_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
)

// A subscription whose manual validation failed (its Failed record written by whichever node
// closed the window) and which an update on another node validates again starts afresh, as
// in Event Grid: it gets the events published from then on, none of those published while it
// was Failed, which its cursor, left where it failed, still held in the journal.
func TestRevalidatedSubscriptionStartsAfreshOnAnyNode(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	ctx := t.Context()
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	// The record a node writes when the window closes, straight into the store: the nodes
	// learn of it from their reads of the store.
	failed, err := json.Marshal(struct {
		router.SubscriptionSpec
		Egrid map[string]string `json:"egrid"`
	}{router.SubscriptionSpec{Destination: router.SinkDestination("hook")}, map[string]string{"provisioningState": router.StateFailed, "message": "validation failed"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.st.PutSubscription(ctx, "orders", "sub", failed); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the Failed subscription known on both nodes", func() bool {
		for _, n := range []*node{a, b} {
			if p, err := n.r.Provisioning("orders", "sub"); err != nil || p.State != router.StateFailed {
				return false
			}
		}
		return true
	})
	if err := publish(t, a.r, "orders", "while-failed-1", "while-failed-2"); err != nil {
		t.Fatal(err)
	}
	if err := b.r.CreateSubscription(ctx, "orders", "sub", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
		t.Fatalf("updating the Failed subscription on b: %v", err)
	}
	if err := publish(t, a.r, "orders", "after-1", "after-2", "after-3"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the events published after the update delivered", func() bool {
		for _, id := range []string{"after-1", "after-2", "after-3"} {
			if len(c.rec.attemptsOf(id)) == 0 {
				return false
			}
		}
		return true
	})
	var got []string
	for _, d := range c.rec.all() {
		got = append(got, d.ids...)
	}
	if slices.Contains(got, "while-failed-1") || slices.Contains(got, "while-failed-2") {
		t.Errorf("attempted %v; want only the events published after the update validated the subscription again", got)
	}
}
