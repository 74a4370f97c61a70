package router

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit/brokertest"
)

// watchedLoop is a store that reports the journal polls (LastSeq) and the reads of the
// dead-letter outbox (ScanDeadLetters) of a cluster node's rounds (and the reads of a
// starting subscription actor, before), and whose topic listing
// waits, while stall is set, until release is closed: a definitions sync stuck (in a store,
// a topic's turn, a topic's stop) for longer than the test lasts.
type watchedLoop struct {
	store.Store
	stall   atomic.Bool
	entered chan struct{} // a value per listing stalled
	release chan struct{}
	polled  chan struct{} // (buffer 1) a journal end was read
	scanned chan struct{} // (buffer 1) the dead-letter outbox was read
}

func (s *watchedLoop) Topics(ctx context.Context) ([]store.Definition, error) {
	if s.stall.Load() {
		s.entered <- struct{}{}
		<-s.release
	}
	return s.Store.Topics(ctx)
}

func (s *watchedLoop) LastSeq(ctx context.Context, topic string) (uint64, error) {
	if _, ok := ctx.Deadline(); ok { // a round's poll, not the trimmer's read (no deadline)
		signal(s.polled)
	}
	return s.Store.LastSeq(ctx, topic)
}

func (s *watchedLoop) ScanDeadLetters(ctx context.Context, fn func(store.DeadLetterRecord) error) error {
	signal(s.scanned)
	return s.Store.ScanDeadLetters(ctx, fn)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// noObjects is a dead-letter store for a test that writes no dead letter: it only gives the
// router a dead-letter actor and outbox (package testkit, which has a working one, imports
// router).
type noObjects struct{ sinks.ObjectStore }

// A node's rounds poll the journal ends of the topics it delivers from, and adopt the dead
// letters of the subscriptions placed on it, while a sync of the definitions another node
// changed is stuck: the two waited behind every sync, which may wait for a store, a topic's
// turn, or a topic deleted elsewhere to stop, and with them the deliveries whose append
// notices were lost.
func TestClusterRoundsGoOnWhileADefinitionsSyncIsStuck(t *testing.T) {
	nc, err := nats.Connect(brokertest.StartNATS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st := &watchedLoop{Store: store.NewMemory(), entered: make(chan struct{}, 1), release: make(chan struct{}),
		polled: make(chan struct{}, 1), scanned: make(chan struct{}, 1)}
	r, err := New(Config{InsecureDev: true, SkipEndpointValidation: true,
		Cluster: cluster.Options{NodeName: "n1", Prefix: "LOOPTEST", LeaseTTL: time.Second}},
		Deps{Store: st, NATS: nc, DeadLetterStore: noObjects{}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(context.Background()) }()
	// Before Close, which waits for the sync.
	defer close(st.release)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a failure guard
	defer cancel()
	if _, err := r.CreateTopic(ctx, "orders", TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	// An address: nothing to resolve; no event is published, so none is attempted.
	if err := r.CreateSubscription(ctx, "orders", "billing", SubscriptionSpec{Destination: WebHook("https://203.0.113.10/events")}); err != nil {
		t.Fatal(err)
	}
	wait := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: not within %v", what, time.Minute)
		}
	}
	wait(st.polled, "the node placed subscription billing and polled the end of its journal")

	st.stall.Store(true)
	r.cl.onChanged("orders", "") // another node changed topic orders: the node reads it again
	wait(st.entered, "the node's sync of topic orders read the store")
	drain(st.polled)
	drain(st.scanned)
	r.cl.mu.Lock()
	r.cl.adopt = map[cluster.Key]bool{{Topic: "orders", Subscription: "billing"}: true} // placed here once more
	r.cl.mu.Unlock()
	wait(st.polled, "a journal poll while the sync is stuck")
	wait(st.scanned, "an adoption of dead letters while the sync is stuck")
}

// Dropping a topic another node deleted stops waiting for it once the cluster runtime's life
// ends (close): a last state write of the topic that hangs held the sync, and close with it,
// as long as the store held the write. The stop ends in the background, and release waits for
// it.
func TestClusterDropOfADeletedTopicStopsWaitingAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hs := newHeldStateWrites()
		r, c, _, k := unplacedFixture(t, hs)
		r.cl = c // the fixture's router is not in cluster mode: the drop reaches c
		defer func() { r.cl = nil }()
		if err := c.start(k); err != nil {
			t.Fatal(err)
		}
		top, err := r.topic("orders")
		if err != nil {
			t.Fatal(err)
		}
		hs.holding.Store(true)
		if err := top.writer.Enqueue("billing", store.Update{Cursor: 1}, nil); err != nil {
			t.Fatal(err)
		}
		<-hs.entered // the topic's state write hangs: its writer's close waits for it
		hs.holding.Store(false)
		life, end := context.WithCancel(context.Background())
		end() // the router is closing
		dropped := make(chan struct{})
		go func() {
			r.dropTopicLocally(life, top)
			close(dropped)
		}()
		synctest.Wait()
		returned := false
		select {
		case <-dropped:
			returned = true
		default:
		}
		if _, err := r.topic("orders"); err == nil {
			t.Error("topic orders is still known after its drop")
		}
		close(hs.release) // the write returns: the stop ends
		<-dropped
		if !returned {
			t.Error("the drop of a deleted topic still waited for its stop after the cluster runtime's life ended")
		}
		c.closing.Wait() // what release waits for: the stop, now ended
		requireClosed(t, top.writer, "the dropped topic's writer")
		r.cl = nil
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A topic created again here while the stop of its deleted namesake outlasted the drop keeps
// its counters and its publish histogram when that stop ends: the namesake's metrics were
// forgotten by name, and a new topic without subscriptions has no actor the metrics set's
// guard sees.
func TestClusterDropLeavesTheMetricsOfATopicCreatedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		hs := newHeldStateWrites()
		r, c, _, k := unplacedFixture(t, hs)
		r.cl = c
		if err := c.start(k); err != nil {
			t.Fatal(err)
		}
		top, err := r.topic("orders")
		if err != nil {
			t.Fatal(err)
		}
		hs.holding.Store(true)
		if err := top.writer.Enqueue("billing", store.Update{Cursor: 1}, nil); err != nil {
			t.Fatal(err)
		}
		<-hs.entered // the stop will hang on this write
		hs.holding.Store(false)
		life, end := context.WithCancel(ctx)
		end() // the drop stops waiting at once
		r.dropTopicLocally(life, top)
		r.cl = nil // the topic comes back through the plain path: no placement needed here
		if err := r.startTopic(r.newTopicRuntime("orders", TopicSpec{}), nil); err != nil {
			t.Fatal(err)
		}
		ev := map[string]any{"id": "e1", "subject": "/s", "eventType": "T", "eventTime": "2026-01-01T00:00:00Z", "data": map[string]any{}}
		if err := r.Publish(ctx, "orders", ev); err != nil {
			t.Fatal(err)
		}
		close(hs.release) // the namesake's stop ends
		c.closing.Wait()
		if got := r.metrics.Snapshot().Sum(metrics.PublishSuccessCount, "orders"); got != 1 {
			t.Errorf("PublishSuccessCount of the topic created again = %d after its namesake's stop ended, want 1", got)
		}
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
