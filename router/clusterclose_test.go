package router

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/nats-io/nats.go"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit/brokertest"
)

// heldStateWrites holds every subscription state write that comes while holding is set,
// until release is closed: a store that stopped answering.
type heldStateWrites struct {
	store.Store
	holding atomic.Bool
	entered chan struct{} // a value per write held
	release chan struct{}
}

func newHeldStateWrites() *heldStateWrites {
	return &heldStateWrites{Store: store.NewMemory(), entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (h *heldStateWrites) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	if h.holding.Load() {
		h.entered <- struct{}{}
		<-h.release
	}
	return h.Store.UpdateSubscription(ctx, topic, sub, u)
}

// unplacedFixture is a router with topic orders and subscription billing, whose actor is
// not running (placed on no node yet), and a cluster runtime that knows billing.
func unplacedFixture(t *testing.T, st store.Store) (*Router, *clusterRuntime, *clusterSub, cluster.Key) {
	t.Helper()
	ctx := context.Background()
	r, err := New(Config{InsecureDev: true, SkipEndpointValidation: true}, Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "orders", TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	// An address: no name to resolve inside the bubble.
	spec := SubscriptionSpec{Destination: WebHook("https://203.0.113.10/events")}
	if err := r.CreateSubscription(ctx, "orders", "billing", spec); err != nil {
		t.Fatal(err)
	}
	top, err := r.topic("orders")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.system.Root.RequestFuture(top.pid, &actors.RemoveSubscription{Name: "billing"}, time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	sc, err := r.subscriptionConfig(top, "billing", &spec)
	if err != nil {
		t.Fatal(err)
	}
	k := cluster.Key{Topic: "orders", Subscription: "billing"}
	s := &clusterSub{cfg: sc}
	return r, &clusterRuntime{r: r, node: &cluster.Node{}, subs: map[cluster.Key]*clusterSub{k: s}, stopping: make(chan struct{})}, s, k
}

// requireClosed fails unless w refuses updates as closed.
func requireClosed(t *testing.T, w *actors.StateWriter, which string) {
	t.Helper()
	if err := w.Enqueue("billing", store.Update{}, nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("%s: Enqueue = %v, want it closed", which, err)
	}
}

// A start that replaces the actor of a subscription running here does not wait for the old
// actor's state writer, whose write hangs: the new actor runs already, and the start held
// the subscription's later stops (a hand-over's lease release among them) and the node's
// Close for as long as the write hung. The old writer closes once its write returns.
func TestClusterStartReplacingAnActorDoesNotWaitForItsOldWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHeldStateWrites()
		r, c, s, k := unplacedFixture(t, hs)
		old := actors.NewStateWriter(hs, "orders")
		hs.holding.Store(true)
		if err := old.Enqueue("billing", store.Update{Cursor: 1}, nil); err != nil {
			t.Fatal(err)
		}
		<-hs.entered // the old writer's write is under way, held
		hs.holding.Store(false)
		s.writer = old // the actor of an earlier start runs here

		done := make(chan error, 1)
		go func() { done <- c.start(k) }()
		synctest.Wait()
		var err error
		returned := false
		select {
		case err = <-done:
			returned = true
		default:
		}
		requireClosed(t, old, "the replaced actor's writer")

		close(hs.release) // the held write returns: the old writer closes
		if !returned {
			err = <-done
			t.Error("the start did not return while the replaced actor's state write was held")
		}
		if err != nil {
			t.Errorf("start: %v", err)
		}
		synctest.Wait()
		c.mu.Lock()
		w := s.writer
		c.mu.Unlock()
		if w == nil || w == old {
			t.Fatalf("after the start the subscription's writer is %p, want a new one (the old one was %p)", w, old)
		}
		c.stop(k)
		requireClosed(t, w, "the started actor's writer after the stop")
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// The placement's stop of a subscription whose writer's state write hangs returns once the
// writer had its grace: it held the subscription's next start (a new config) and the node's
// Close for as long as the write hung. The writer closes in the background once the write
// returns (the bubble ends only when its goroutine has).
func TestClusterStopDoesNotWaitForAHungStateWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHeldStateWrites()
		r, c, s, k := unplacedFixture(t, hs)
		if err := c.start(k); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		w := s.writer
		c.mu.Unlock()
		hs.holding.Store(true)
		if err := w.Enqueue("billing", store.Update{Cursor: 1}, nil); err != nil {
			t.Fatal(err)
		}
		<-hs.entered
		hs.holding.Store(false)

		stopped := make(chan struct{})
		go func() {
			c.stop(k)
			close(stopped)
		}()
		// Virtual time: the actor's stop grace and the writer's.
		<-time.After(actors.DefaultStopGrace + writerGrace + time.Second)
		returned := false
		select {
		case <-stopped:
			returned = true
		default:
		}
		close(hs.release)
		<-stopped
		if !returned {
			t.Error("the stop did not return while the actor's state write was held")
		}
		synctest.Wait()
		requireClosed(t, w, "the stopped actor's writer")
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A start whose topic actor did not answer in time stops the actor it may have started and
// closes its writer, whose write hangs: it returns once the writer had its grace, where it
// held the subscription's next start and the node's Close for as long as the write hung.
func TestClusterStartThatTimedOutDoesNotWaitForAHungStateWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHeldStateWrites()
		r, c, _, k := unplacedFixture(t, hs)
		top, err := r.topic("orders")
		if err != nil {
			t.Fatal(err)
		}
		// The topic actor stands in for one that takes the start (whose actor writes state)
		// but answers it too late, and answers the removal.
		writers := make(chan *actors.StateWriter, 1)
		late := r.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			switch msg := ctx.Message().(type) {
			case *actors.AddSubscription:
				writers <- msg.Config.Writer
			case *actors.RemoveSubscription:
				ctx.Respond(true)
			}
		}))
		topicPID := top.pid
		top.pid = late

		done := make(chan error, 1)
		go func() { done <- c.start(k) }()
		w := <-writers
		hs.holding.Store(true)
		if err := w.Enqueue("billing", store.Update{Cursor: 1}, nil); err != nil {
			t.Fatal(err)
		}
		<-hs.entered
		hs.holding.Store(false)
		// Virtual time: the start's wait for the topic actor, and the writer's grace.
		<-time.After(10*time.Second + writerGrace + time.Second)
		returned := false
		select {
		case err := <-done:
			returned = true
			done <- err
		default:
		}
		close(hs.release)
		if err := <-done; err == nil {
			t.Error("the start succeeded without an answer of the topic actor")
		}
		if !returned {
			t.Error("the start that timed out did not return while its writer's state write was held")
		}
		synctest.Wait()
		requireClosed(t, w, "the writer of the start that failed")
		top.pid = topicPID
		_ = r.system.Root.StopFuture(late).Wait()
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-time.After(time.Minute) // virtual time: the actor system's dead-letter throttle, which the timed-out request started, ends
	})
}

// requireOpen fails if w refuses updates: the writer of an actor that may still run, whose
// state it writes as it stops.
func requireOpen(t *testing.T, w *actors.StateWriter, which string) {
	t.Helper()
	if err := w.Enqueue("billing", store.Update{}, nil); err != nil {
		t.Errorf("%s: Enqueue = %v, want it open", which, err)
	}
}

// A start waiting for a topic actor that does not answer (its mailbox held) stops waiting
// once the router begins to close: it held the node's Close, and the router's, for up to
// the 10 s the request has and the 30 s of the removal after it, whatever Close's context.
// The writer it made stays open for release, which closes it after the topic actors (and
// the actor the start may yet make) stopped and wrote their state.
func TestClusterStartStopsWaitingWhenTheRouterCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, c, _, k := unplacedFixture(t, store.NewMemory())
		top, err := r.topic("orders")
		if err != nil {
			t.Fatal(err)
		}
		proc, _ := r.system.ProcessRegistry.Get(top.pid)
		proc.SendSystemMessage(top.pid, &actor.SuspendMailbox{})
		done := make(chan error, 1)
		go func() { done <- c.start(k) }()
		synctest.Wait()
		close(c.stopping) // the router's Close begins
		synctest.Wait()
		select {
		case err := <-done:
			if err == nil {
				t.Error("the start succeeded without an answer of the topic actor")
			}
		default:
			t.Fatal("the start still waits for the topic actor after the router began to close")
		}
		c.mu.Lock()
		left := slices.Clone(c.left)
		c.mu.Unlock()
		if len(left) != 1 {
			t.Fatalf("%d writers left for release, want the start's one", len(left))
		}
		requireOpen(t, left[0], "the writer of the start the router's Close cut short")

		proc.SendSystemMessage(top.pid, &actor.ResumeMailbox{})
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		_ = left[0].Close()       // release's part (the fixture's router has no cluster runtime)
		<-time.After(time.Minute) // virtual time: the abandoned requests time out
	})
}

// A stop waiting for a topic actor that does not answer stops waiting once the router
// begins to close, and leaves the actor's writer open: the actor stops with its topic and
// writes its state then, and release closes the writer after.
func TestClusterStopStopsWaitingWhenTheRouterCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, c, s, k := unplacedFixture(t, store.NewMemory())
		if err := c.start(k); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		w := s.writer
		c.mu.Unlock()
		top, err := r.topic("orders")
		if err != nil {
			t.Fatal(err)
		}
		proc, _ := r.system.ProcessRegistry.Get(top.pid)
		proc.SendSystemMessage(top.pid, &actor.SuspendMailbox{})
		stopped := make(chan struct{})
		go func() {
			c.stop(k)
			close(stopped)
		}()
		synctest.Wait()
		close(c.stopping)
		synctest.Wait()
		select {
		case <-stopped:
		default:
			t.Fatal("the stop still waits for the topic actor after the router began to close")
		}
		c.mu.Lock()
		kept := s.writer
		c.mu.Unlock()
		if kept != w {
			t.Fatalf("the stop cut short left writer %p, want the running actor's %p for release", kept, w)
		}
		requireOpen(t, w, "the writer of the actor whose stop the router's Close cut short")

		proc.SendSystemMessage(top.pid, &actor.ResumeMailbox{})
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		<-time.After(time.Minute) // virtual time: the abandoned request times out
	})
}

// stalledTopics is a store whose topic listing waits, while stall is set, until its context
// ends: a NATS server that stopped answering.
type stalledTopics struct {
	store.Store
	stall   atomic.Bool
	entered chan struct{} // a value per listing stalled
}

func (s *stalledTopics) Topics(ctx context.Context) ([]store.Definition, error) {
	if s.stall.Load() {
		s.entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.Topics(ctx)
}

// The cluster runtime's close does not wait for a definitions read of its watch on a store
// that stopped answering: the read had 30 s, and close waited for it whatever the router's
// Close context. Close cancels it, so the watch ends at once.
func TestClusterCloseCancelsAStalledDefinitionsRead(t *testing.T) {
	nc, err := nats.Connect(brokertest.StartNATS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st := &stalledTopics{Store: store.NewMemory(), entered: make(chan struct{}, 1)}
	r, err := New(Config{InsecureDev: true}, Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node, err := cluster.Join(ctx, nc, cluster.Options{NodeName: "n1", Prefix: "STALLTEST", LeaseTTL: time.Minute}, cluster.Hooks{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Release(context.Background())
	c := newClusterRuntime(r)
	c.node = node
	c.watch()
	st.stall.Store(true)
	c.onChanged("orders", "") // another node changed topic orders: the watch reads the definitions
	select {
	case <-st.entered:
	case <-ctx.Done():
		t.Fatal("the watch did not read the definitions of the changed topic")
	}

	c.close(ctx)
	if ctx.Err() != nil {
		t.Fatalf("close took its whole context (%v) while the watch's read of the definitions was stalled; want it cancelled at once", ctx.Err())
	}
	select {
	case <-c.done:
	default:
		t.Error("close returned before the watch ended")
	}
}
