package cluster

import (
	"fmt"
	"testing"
)

// Rendezvous hashing: every node gets a share, and a node that joins takes subscriptions only
// for itself: none moves between the nodes that were there.
func TestOwnerSpreadsAndMovesOnlyTheJoinersShare(t *testing.T) {
	three := []string{"egrid-1", "egrid-2", "egrid-3"}
	four := append([]string{"egrid-4"}, three...)
	count := map[string]int{}
	moved := 0
	const n = 3000
	for i := range n {
		k := Key{Topic: "orders", Subscription: fmt.Sprintf("sub-%d", i)}
		before, after := Owner(three, k), Owner(four, k)
		count[before]++
		if before != after {
			moved++
			if after != "egrid-4" {
				t.Fatalf("%s moved from %s to %s when egrid-4 joined", k, before, after)
			}
		}
	}
	for _, m := range three {
		if count[m] < n/3*8/10 || count[m] > n/3*12/10 {
			t.Errorf("%s owns %d of %d subscriptions, want about a third: %v", m, count[m], n, count)
		}
	}
	if moved < n/4*8/10 || moved > n/4*12/10 {
		t.Errorf("%d of %d subscriptions moved to the fourth node, want about a quarter", moved, n)
	}
	if Owner(nil, Key{Topic: "t", Subscription: "s"}) != "" {
		t.Error("an owner without members")
	}
}
