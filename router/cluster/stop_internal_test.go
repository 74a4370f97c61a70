package cluster

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/testkit/brokertest"
)

// A stop that blocks — an actor whose last state write waits for a reconnecting NATS client
// — must not hold the placement loop: while it lasts the node goes on renewing its other
// leases (no other actor outlives its lease because of it), does not start the stopping
// subscription again or take its lease, and releases the lease only once the stop returned.
func TestBlockedStopDelaysNoRenewal(t *testing.T) {
	nc := testNATS(t)

	a, b := Key{Topic: "orders", Subscription: "a"}, Key{Topic: "orders", Subscription: "b"}
	var mu sync.Mutex
	starts := map[Key]int{}
	started := make(chan Key, 16)
	stopping := make(chan struct{})
	release := make(chan struct{})
	hooks := Hooks{
		Start: func(k Key) error {
			mu.Lock()
			starts[k]++
			mu.Unlock()
			started <- k
			return nil
		},
		Stop: func(k Key) {
			if k == a {
				close(stopping)
				<-release // held until the test lets it go
			}
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n := joinTestNode(t, nc, "STOPTEST", hooks)
	n.Want(a, 1)
	n.Want(b, 1)
	for range 2 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the node did not start both subscriptions within a minute")
		}
	}

	n.Unwant(a) // its actor stops, and blocks there
	select {
	case <-stopping:
	case <-ctx.Done():
		t.Fatal("the node did not stop subscription a within a minute")
	}
	n.Want(a, 2) // wanted again while its stop is under way: not started until the stop is done
	// While a's stop blocks, b's lease is renewed round after round: its revision moves on
	// at least five times (each round is TTL/5, so a loop held by the stop would renew it
	// never). The lease of a is still there (released only after the stop), and a, wanted again,
	// was not started again in those rounds.
	watchRenewals(t, ctx, n, b)("a's stop was blocked")
	if holder, err := n.Holder(ctx, a); err != nil || holder != "n1" {
		t.Errorf("a's lease during its stop: held by %q (%v); want still n1's until the stop returns", holder, err)
	}
	mu.Lock()
	if starts[a] != 1 {
		t.Errorf("a was started %d times while its stop was under way; want only the first start", starts[a])
	}
	mu.Unlock()

	close(release)
	// Once the stop returned the lease is released, and since a is wanted again the node
	// takes it and starts a's actor once more.
	for {
		select {
		case k := <-started:
			if k == a {
				return
			}
		case <-ctx.Done():
			t.Fatal("a was not started again within a minute of its stop returning")
		}
	}
}

// A start that blocks — the topic actor's mailbox long under load — must not hold the
// placement loop either, and a stop issued meanwhile runs only after the start returned, so
// the actor is never started after the stop meant to end it.
func TestBlockedStartDelaysNoRenewal(t *testing.T) {
	nc := testNATS(t)
	a, b := Key{Topic: "orders", Subscription: "a"}, Key{Topic: "orders", Subscription: "b"}
	var mu sync.Mutex
	var calls []string
	started := make(chan Key, 16)
	blocked := make(chan struct{})
	release := make(chan struct{})
	stopped := make(chan struct{})
	hooks := Hooks{
		Start: func(k Key) error {
			if k == a {
				close(blocked)
				<-release
			}
			mu.Lock()
			calls = append(calls, "start "+k.Subscription)
			mu.Unlock()
			started <- k
			return nil
		},
		Stop: func(k Key) {
			mu.Lock()
			calls = append(calls, "stop "+k.Subscription)
			mu.Unlock()
			if k == a {
				close(stopped)
			}
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n := joinTestNode(t, nc, "STARTTEST", hooks)
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the node's Close: a failing run must not leave the start blocked
	n.Want(b, 1)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the node did not start subscription b within a minute")
	}
	n.Want(a, 1)
	select {
	case <-blocked:
	case <-ctx.Done():
		t.Fatal("the node did not start subscription a within a minute")
	}
	renewed := watchRenewals(t, ctx, n, b)
	n.Unwant(a) // its stop must wait for its start
	renewed("a's start was blocked")
	select {
	case <-stopped:
		t.Fatal("a's actor was stopped while its start was still under way")
	default:
	}
	letGo()
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("a's actor was not stopped within a minute of its start returning")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"start b", "start a", "stop a"}; !slices.Equal(calls, want) {
		t.Errorf("hook calls %v, want %v", calls, want)
	}
}

// watchRenewals watches the lease of k from now on and returns a wait for five renewals of
// it, within 20 lease TTLs (100 rounds), that fails the test naming while.
func watchRenewals(t *testing.T, ctx context.Context, n *Node, k Key) func(while string) {
	t.Helper()
	cur, err := n.leases.Get(ctx, k.leaseKey())
	if err != nil {
		t.Fatalf("reading the lease of %s: %v", k, err)
	}
	w, err := n.leases.Watch(ctx, k.leaseKey(), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	return func(while string) {
		t.Helper()
		waitRenewals(t, w, cur.Revision(), while)
	}
}

// waitRenewals waits until the lease watched by w was renewed five times past revision first.
func waitRenewals(t *testing.T, w jetstream.KeyWatcher, first uint64, while string) {
	t.Helper()
	renewals := 0
	bound := time.After(20 * ttl)
	for renewals < 5 {
		select {
		case e := <-w.Updates():
			if e != nil && e.Operation() == jetstream.KeyValuePut && e.Revision() > first {
				renewals++
			}
		case <-bound:
			t.Fatalf("the lease was renewed %d times in %v while %s; want it renewed every round (%v)", renewals, 20*ttl, while, ttl/5)
		}
	}
}

// ttl is the test nodes' lease TTL: a placement round every 200 ms.
const ttl = time.Second

// testNATS connects to an in-process NATS server with JetStream on 127.0.0.1.
func testNATS(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(brokertest.StartNATS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// joinTestNode joins node n1 with hooks; it is closed and released when the test ends.
func joinTestNode(t *testing.T, nc *nats.Conn, prefix string, hooks Hooks) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n, err := Join(ctx, nc, Options{NodeName: "n1", Prefix: prefix, LeaseTTL: ttl}, hooks, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Close(context.Background())
		n.Release(context.Background())
	})
	return n
}
