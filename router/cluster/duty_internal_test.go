package cluster

import (
	"context"
	"testing"
	"time"
)

// The cluster's duty is held by one live node at a time: the one the rendezvous hash prefers
// once both nodes are live, and the other once that one leaves.
func TestDutyHeldByOneNode(t *testing.T) {
	nc := testNATS(t)
	join := func(name string) *Node {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		n, err := Join(ctx, nc, Options{NodeName: name, Prefix: "DUTYTEST", LeaseTTL: ttl}, Hooks{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			n.Close(context.Background())
			n.Release(context.Background())
		})
		return n
	}
	nodes := map[string]*Node{"n1": join("n1"), "n2": join("n2")}
	holders := func() []string {
		var out []string
		for name, n := range nodes {
			if n.Duty() {
				out = append(out, name)
			}
		}
		return out
	}
	// until waits, within 20 TTLs, for the duty to be held by want alone, failing the test if
	// it is ever held by two nodes at once.
	until := func(want, while string) {
		t.Helper()
		bound := time.After(20 * ttl)
		for {
			h := holders()
			if len(h) > 1 {
				t.Fatalf("the duty is held by %v at once %s", h, while)
			}
			if len(h) == 1 && h[0] == want {
				return
			}
			select {
			case <-bound:
				t.Fatalf("the duty is held by %v %s after %v; want %s alone", h, while, 20*ttl, want)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	preferred := Owner([]string{"n1", "n2"}, dutyOwner)
	until(preferred, "with both nodes live")

	nodes[preferred].Close(context.Background())
	nodes[preferred].Release(context.Background())
	if nodes[preferred].Duty() {
		t.Error("a released node still holds the duty")
	}
	delete(nodes, preferred)
	other := "n1"
	if preferred == "n1" {
		other = "n2"
	}
	until(other, "once the preferred node left")
}
