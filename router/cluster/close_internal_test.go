package cluster

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// loopless is a node whose placement loop and membership watch have ended: Close waits
// only for its starts and stops.
func loopless() *Node {
	finished := make(chan struct{})
	close(finished)
	n := &Node{
		log: slog.New(slog.DiscardHandler), poke: make(chan struct{}, 1),
		quit: make(chan struct{}), done: finished, viewDone: finished,
		busy: make(map[Key]*keyOps),
	}
	n.life, n.endLife = context.WithCancel(context.Background())
	return n
}

// Close waits for the actor starts and stops under way only until its context ends: a Stop
// hook waiting for a topic actor that does not answer (its request times out only after 30
// s) held the router's Close, whatever its context, for as long. The operation left goes on
// in the background.
func TestCloseStopsWaitingForOperationsWhenItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := loopless()
		release, stopped := make(chan struct{}), make(chan struct{})
		n.async(Key{Topic: "orders", Subscription: "billing"}, func() {
			<-release // a Stop hook stuck waiting for its topic actor
			close(stopped)
		})

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		closed := make(chan struct{})
		go func() {
			n.Close(ctx)
			close(closed)
		}()
		<-time.After(2 * time.Second) // virtual time: past Close's context
		select {
		case <-closed:
		default:
			t.Error("Close did not return once its context ended while a stop was under way")
		}
		close(release)
		<-closed
		<-stopped
	})
}

// Close with a context that does not end waits for the starts and stops under way.
func TestCloseWaitsForOperationsWithinItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := loopless()
		release, stopped := make(chan struct{}), make(chan struct{})
		n.async(Key{Topic: "orders", Subscription: "billing"}, func() {
			<-release
			close(stopped)
		})
		closed := make(chan struct{})
		go func() {
			n.Close(context.Background())
			close(closed)
		}()
		<-time.After(time.Minute) // virtual time
		select {
		case <-closed:
			t.Fatal("Close returned while a stop was under way")
		default:
		}
		close(release)
		<-closed
		select {
		case <-stopped:
		default:
			t.Error("Close returned before the stop under way finished")
		}
	})
}

// A lease handed over is not released after a Stop hook that returned while the node was
// closing: the hook may have stopped waiting for its actor, which still runs until the
// router stops its topics, and the next owner must not start from the state before it.
// The lease lapses instead.
func TestStopCutShortByCloseReleasesNoLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := loopless()
		release := make(chan struct{})
		n.hooks.Stop = func(Key) { <-release }
		released := false
		n.stopThen(Key{Topic: "orders", Subscription: "billing"}, &lease{running: true}, func() { released = true })
		closed := make(chan struct{})
		go func() {
			n.Close(context.Background())
			close(closed)
		}()
		synctest.Wait()
		close(release) // the hook returns once the node is closing
		<-closed
		if released {
			t.Error("the lease was released after a stop that returned while the node was closing")
		}
	})
}

// stalledKV is a bucket on a NATS server that stopped answering: every call waits until its
// context ends. With late set the write was applied all the same, and its answer crossed
// the cancel: the call then succeeds.
type stalledKV struct {
	jetstream.KeyValue // the calls the node makes are below; any other panics
	late               bool
	calls              chan string // one value per call, as it begins
}

func newStalledKV(late bool) *stalledKV { return &stalledKV{late: late, calls: make(chan string, 64)} }

func (s *stalledKV) wait(ctx context.Context, call string) error {
	s.calls <- call
	<-ctx.Done()
	if s.late {
		return nil
	}
	return ctx.Err()
}

func (s *stalledKV) Put(ctx context.Context, key string, _ []byte) (uint64, error) {
	return 1, s.wait(ctx, "put "+key)
}

func (s *stalledKV) Create(ctx context.Context, key string, _ []byte) (uint64, error) {
	return 1, s.wait(ctx, "create "+key)
}

func (s *stalledKV) Update(ctx context.Context, key string, _ []byte, _ uint64) (uint64, error) {
	return 2, s.wait(ctx, "update "+key)
}

func (s *stalledKV) Delete(ctx context.Context, key string, _ ...jetstream.KVDeleteOpt) error {
	return s.wait(ctx, "delete "+key)
}

func (s *stalledKV) WatchAll(ctx context.Context, _ ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return nil, s.wait(ctx, "watch")
}

// answeringKV is a bucket whose writes succeed at once.
type answeringKV struct{ jetstream.KeyValue }

func (answeringKV) Put(context.Context, string, []byte) (uint64, error) { return 1, nil }

func (answeringKV) Delete(context.Context, string, ...jetstream.KVDeleteOpt) error { return nil }

// stalledNode is node n1 with a lease TTL of a minute (a placement round and a membership
// listing may wait on NATS 18 s each) on buckets members and leases, connected to NATS by
// nc (made outside the bubble: only its state is read), its loops not started yet.
func stalledNode(nc *nats.Conn, members, leases jetstream.KeyValue, hooks Hooks) *Node {
	n := &Node{
		nc: nc, opts: Options{NodeName: "n1", LeaseTTL: time.Minute}.WithDefaults(), log: slog.New(slog.DiscardHandler),
		hooks: hooks, members: members, leases: leases,
		poke: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}), viewDone: make(chan struct{}),
		want: make(map[Key]uint64), lost: make(map[Key]bool),
		held: make(map[Key]*lease), seen: make(map[string]int), busy: make(map[Key]*keyOps),
	}
	n.life, n.endLife = context.WithCancel(context.Background())
	return n
}

// Close's context bounds its wait for the placement round and the membership listing under
// way: on a NATS server that stopped answering each waits up to 3/10 of the lease TTL (18 s
// here), and Close waited for both whatever its context, so the router's Close outlived its
// own. Once the context ends their NATS calls are cancelled, so both loops end at once, and
// Release, finding the loop ended, goes on.
func TestCloseStopsWaitingForAStalledRoundWhenItsContextEnds(t *testing.T) {
	nc := testNATS(t)
	synctest.Test(t, func(t *testing.T) {
		members := newStalledKV(false)
		n := stalledNode(nc, members, newStalledKV(false), Hooks{})
		go n.watchMembers()
		go n.loop()
		synctest.Wait()
		if got := len(members.calls); got != 2 { // the round's membership renewal, the watch's listing
			t.Fatalf("%d calls waiting on the members bucket, want 2", got)
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		n.Close(ctx)
		if took := time.Since(start); took != time.Second { // virtual time: exact
			t.Errorf("Close returned after %v, want at its context's deadline (1s)", took)
		}
		synctest.Wait()
		for what, ch := range map[string]chan struct{}{"the placement loop": n.done, "the membership watch": n.viewDone} {
			select {
			case <-ch:
			default:
				t.Errorf("%s still runs after Close returned", what)
			}
		}
		n.Release(ctx)
		if n.Duty() || n.Running(Key{Topic: "orders", Subscription: "billing"}) {
			t.Error("the node reports a duty or an actor after Release")
		}
	})
}

// A placement round Close stopped waiting for starts no actor: a lease it took as Close
// cancelled its calls (the write landed, the answer crossed the cancel) stays unused and
// lapses, where the Start hook would run after the router's Close had returned.
func TestRoundLeftByCloseStartsNoActor(t *testing.T) {
	nc := testNATS(t)
	synctest.Test(t, func(t *testing.T) {
		leases := newStalledKV(true)
		var starts []Key
		n := stalledNode(nc, answeringKV{}, leases, Hooks{
			Start: func(k Key) error { starts = append(starts, k); return nil },
			Stop:  func(Key) {},
		})
		close(n.viewDone) // no watch: the membership listed a moment ago
		n.view, n.viewAt = []string{"n1"}, time.Now()
		k := Key{Topic: "orders", Subscription: "billing"}
		n.Want(k, 1)
		go n.loop()
		synctest.Wait()
		if call := <-leases.calls; call != "create "+dutyKey {
			t.Fatalf("the round waits on %q, want the duty lease's create", call)
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n.Close(ctx)
		synctest.Wait()
		select {
		case <-n.done:
		default:
			t.Fatal("the placement loop still runs after Close returned")
		}
		if call := <-leases.calls; call != "create "+k.leaseKey() {
			t.Fatalf("after Close the round made %q, want the create of billing's lease", call)
		}
		if len(starts) != 0 || n.Running(k) {
			t.Errorf("the round left by Close started %v (running: %v); want no actor started", starts, n.Running(k))
		}
		n.Release(ctx)
		if n.Duty() {
			t.Error("the node holds the duty after Release")
		}
	})
}
