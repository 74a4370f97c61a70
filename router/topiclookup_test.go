package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/store"
)

// countedTopics is a store that counts its reads of the topic catalogue and, while away is
// set, fails them.
type countedTopics struct {
	store.Store
	reads    atomic.Int64
	listings atomic.Int64 // reads of a topic's subscriptions
	away     atomic.Bool
	// listingsAway fails the reads of a topic's subscriptions only.
	listingsAway atomic.Bool
	// damaged and listingsDamaged fail those reads as a store that finds the data damaged
	// does (an error matching store.ErrCorrupt).
	damaged, listingsDamaged atomic.Bool
}

// errDamagedRead is a read failed as the disk store fails one in a damaged table block.
var errDamagedRead = fmt.Errorf("%w: the definitions are in a damaged table block and cannot be read; restore the directory from a backup", store.CorruptSentinel("disk store: corrupt"))

func (s *countedTopics) Subscriptions(ctx context.Context, topic string) ([]store.Definition, error) {
	s.listings.Add(1)
	if s.away.Load() || s.listingsAway.Load() {
		return nil, errors.New("no responders available for request")
	}
	if s.damaged.Load() || s.listingsDamaged.Load() {
		return nil, errDamagedRead
	}
	return s.Store.Subscriptions(ctx, topic)
}

func (s *countedTopics) Topics(ctx context.Context) ([]store.Definition, error) {
	s.reads.Add(1)
	if s.away.Load() {
		return nil, errors.New("no responders available for request")
	}
	if s.damaged.Load() {
		return nil, errDamagedRead
	}
	return s.Store.Topics(ctx)
}

// lookupFixture is a router on a memory store with the cluster runtime's lookups in place
// (no cluster node: the tests publish only to names the router does not know, and read
// topics). stop ends the lookups and closes the router; call it inside the bubble.
func lookupFixture(t *testing.T) (r *Router, c *clusterRuntime, st *countedTopics, stop func()) {
	t.Helper()
	st = &countedTopics{Store: store.NewMemory()}
	r, err := New(Config{InsecureDev: true, SkipEndpointValidation: true}, Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	c = &clusterRuntime{r: r, node: &cluster.Node{}, subs: map[cluster.Key]*clusterSub{}, stopping: make(chan struct{})}
	c.life, c.endLife = context.WithCancel(context.Background())
	r.cl = c
	st.reads.Store(0)
	return r, c, st, func() {
		r.trim.close() // it reads r.cl, unset below (Close closes it again: idempotent)
		reader := c.stopReads()
		close(c.stopping)
		c.endLife()
		if reader != nil {
			<-reader
		}
		r.cl = nil
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}
}

// publishUnknown publishes to each name from its own goroutine, all at once, and returns the
// errors by name.
func publishUnknown(r *Router, names []string) map[string]error {
	var mu sync.Mutex
	errs := make(map[string]error, len(names))
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			err := r.Publish(context.Background(), name)
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs
}

func unknownNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return names
}

func requireNotFound(t *testing.T, errs map[string]error) {
	t.Helper()
	for name, err := range errs {
		if !errors.Is(err, ErrTopicNotFound) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("publish to unknown topic %q: %v; want topic not found", name, err)
		}
	}
}

// Publishes to many topic names this node does not know, at once, share one read of the
// topic catalogue: the store is read at most once a second however many names are tried.
func TestClusterUnknownTopicNamesShareTheStoreReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, st, stop := lookupFixture(t)
		defer stop()

		start := time.Now()
		requireNotFound(t, publishUnknown(r, unknownNames("burst", 500)))
		if n, took := st.reads.Load(), time.Since(start); n > 2 || took > lookupInterval {
			t.Errorf("500 unknown names at once: %d store reads in %v; want at most 2 (one under way, one for the names that came meanwhile) within %v", n, took, lookupInterval)
		}

		// 20 clients each trying 50 names one after the other: the reads stay one a second.
		st.reads.Store(0)
		start = time.Now()
		var wg sync.WaitGroup
		for w := range 20 {
			wg.Go(func() {
				for _, name := range unknownNames(fmt.Sprintf("client%d", w), 50) {
					if err := r.Publish(context.Background(), name); !errors.Is(err, ErrTopicNotFound) {
						t.Errorf("publish to unknown topic %q: %v; want topic not found", name, err)
					}
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		if n, most := st.reads.Load(), 1+int64(took/lookupInterval); n > most {
			t.Errorf("1000 unknown names from 20 clients: %d store reads in %v; want at most %d (one a second)", n, took, most)
		}
	})
}

// A name a read did not find a moment ago answers not found at once, without a read; and a
// name no topic can have is not looked up at all.
func TestClusterRepeatedAndInvalidUnknownNamesReadNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, st, stop := lookupFixture(t)
		defer stop()

		requireNotFound(t, publishUnknown(r, []string{"nope"}))
		st.reads.Store(0)
		start := time.Now()
		names := make([]string, 100)
		for i := range names {
			names[i] = "NOPE" // one name, in another case
		}
		if err := r.Publish(context.Background(), "nope"); !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("publish to unknown topic: %v; want topic not found", err)
		}
		requireNotFound(t, publishUnknown(r, names))
		if n, took := st.reads.Load(), time.Since(start); n != 0 || took != 0 {
			t.Errorf("a name not found a moment ago, tried again: %d store reads, answered after %v; want none, at once", n, took)
		}

		invalid := []string{"a", "has space", "under_score", string(make([]byte, 51)), "x" + string(rune(0x00e9)) + "x"}
		for i := range 100 {
			invalid = append(invalid, fmt.Sprintf("%s-%d", string(make([]byte, 60)), i))
		}
		requireNotFound(t, publishUnknown(r, invalid))
		if n := st.reads.Load(); n != 0 {
			t.Errorf("names no topic can have: %d store reads; want none", n)
		}
	})
}

// The names remembered as not found are bounded in number and forgotten after a second: an
// unknown name costs no memory for good.
func TestClusterMissesStayBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, c, _, stop := lookupFixture(t)
		defer stop()
		misses := func() int {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.misses)
		}

		requireNotFound(t, publishUnknown(r, unknownNames("many", maxMisses+1000)))
		if n := misses(); n > maxMisses {
			t.Errorf("%d unknown names: %d remembered; want at most %d", maxMisses+1000, n, maxMisses)
		}
		<-time.After(time.Minute) // virtual time
		requireNotFound(t, publishUnknown(r, []string{"one-more"}))
		if n := misses(); n != 1 {
			t.Errorf("a minute later, one more unknown name: %d names remembered; want 1 (the older ones forgotten)", n)
		}
	})
}

// A topic created on another node a moment ago — here straight in the store, so no notice
// tells this node — is found while unknown names keep the reads busy, within a read.
func TestClusterTopicOnlyTheStoreKnowsIsFoundAmidUnknownNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, st, stop := lookupFixture(t)
		defer stop()

		var wg sync.WaitGroup
		for w := range 10 {
			wg.Go(func() { // each name waits for a read of its own: ten seconds of unknown names
				for i := range 10 {
					_ = r.Publish(context.Background(), fmt.Sprintf("flood%d-%d", w, i))
				}
			})
		}
		<-time.After(2500 * time.Millisecond) // virtual time: mid-way between two reads
		if err := st.PutTopic(context.Background(), "orders", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		spec, err := r.Topic("Orders")
		if err != nil {
			t.Fatalf("a topic only the store knows, amid unknown names: %v", err)
		}
		if took := time.Since(start); took > lookupInterval {
			t.Errorf("a topic only the store knows was found after %v; want within %v", took, lookupInterval)
		}
		if spec.schema().String() == "" {
			t.Errorf("the topic found has no schema: %+v", spec)
		}
		wg.Wait()
	})
}

// A store that cannot answer makes the misses waiting for its read unavailable, to retry, and
// nothing of them is remembered: the next try reads again. A router closing ends the misses
// waiting for a read.
func TestClusterLookupFailuresAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, st, stop := lookupFixture(t)

		st.away.Store(true)
		for name, err := range publishUnknown(r, unknownNames("away", 10)) {
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTopicNotFound) {
				t.Errorf("publish to %q with the store away: %v; want unavailable, not topic not found", name, err)
			}
		}
		st.away.Store(false)
		st.reads.Store(0)
		requireNotFound(t, publishUnknown(r, []string{"away-00000"}))
		if n := st.reads.Load(); n != 1 {
			t.Errorf("a name whose read failed, tried again: %d store reads; want 1", n)
		}

		// One name read a moment ago; another waits for the next read, a second later.
		ctx, cancel := context.WithCancel(context.Background())
		waiting := make(chan error, 2)
		go func() { waiting <- r.Publish(ctx, "waits-for-cancel") }()
		go func() { waiting <- r.Publish(context.Background(), "waits-for-close") }()
		synctest.Wait()
		cancel()
		if err := <-waiting; !errors.Is(err, context.Canceled) {
			t.Errorf("a miss whose ctx ended while it waited: %v; want context.Canceled", err)
		}
		stop()
		if err := <-waiting; !errors.Is(err, ErrClosed) {
			t.Errorf("a miss waiting for a read as the router closed: %v; want ErrClosed", err)
		}
	})
}

// knownTopics puts topics straight into the store and has r read them (as another node's
// creates, whose notices this fixture never gets), then zeroes the store's counters.
func knownTopics(t *testing.T, r *Router, st *countedTopics, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := st.PutTopic(context.Background(), name, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		if _, err := r.Topic(name); err != nil {
			t.Fatalf("topic %s: %v", name, err)
		}
	}
	st.reads.Store(0)
	st.listings.Store(0)
}

// findUnknown looks each subscription name of topic up from its own goroutine, all at once,
// and fails the test unless each is not found.
func findUnknown(t *testing.T, r *Router, topic string, names []string) {
	t.Helper()
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			if _, err := r.FindSubscription(context.Background(), topic, name); !errors.Is(err, ErrSubscriptionNotFound) || errors.Is(err, ErrUnavailable) {
				t.Errorf("subscription %q of topic %q nobody created: %v; want subscription not found", name, topic, err)
			}
		})
	}
	wg.Wait()
}

// Subscription names this node does not know, of a topic it knows, share the reads of the
// store with the topic names: one listing of the topic's subscriptions serves every name
// that waited for it, a name not found a moment ago reads nothing, a name no subscription can
// have is not looked up, and one read lists the subscriptions of at most
// maxSubscriptionListings topics.
func TestClusterUnknownSubscriptionNamesShareTheStoreReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, st, stop := lookupFixture(t)
		defer stop()
		knownTopics(t, r, st, "orders")

		start := time.Now()
		findUnknown(t, r, "orders", unknownNames("burst", 300))
		if n, took := st.listings.Load(), time.Since(start); n > 2 || took > lookupInterval {
			t.Errorf("300 unknown subscription names at once: %d listings in %v; want at most 2 within %v", n, took, lookupInterval)
		}
		st.listings.Store(0)
		findUnknown(t, r, "ORDERS", unknownNames("BURST", 300)) // the same names, in capitals
		for _, name := range []string{"a b", "x", "has/slash"} {
			if _, err := r.FindSubscription(context.Background(), "orders", name); !errors.Is(err, ErrSubscriptionNotFound) {
				t.Errorf("subscription name %q: %v; want not found", name, err)
			}
		}
		if n := st.listings.Load(); n != 0 {
			t.Errorf("names not found a moment ago and invalid names: %d listings; want none", n)
		}

		// 100 topics, an unknown name of each at once: at most 64 topics' subscriptions per read.
		topics := unknownNames("t", 100)
		knownTopics(t, r, st, topics...)
		<-time.After(lookupInterval)
		var wg sync.WaitGroup
		for _, topic := range topics {
			wg.Go(func() { findUnknown(t, r, topic, []string{"nobody"}) })
		}
		wg.Wait()
		if n, reads := st.listings.Load(), st.reads.Load(); n != 100 || reads < 2 || n > reads*maxSubscriptionListings {
			t.Errorf("an unknown subscription of each of 100 topics: %d listings in %d reads; want 100 listings, at most %d per read", n, reads, maxSubscriptionListings)
		}
	})
}

// A store that cannot list a topic's subscriptions makes the subscription lookups waiting for
// that read unavailable, to retry, not not found; nothing is remembered of them.
func TestClusterSubscriptionLookupWhileTheStoreIsAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, st, stop := lookupFixture(t)
		defer stop()
		knownTopics(t, r, st, "orders")
		for _, away := range []*atomic.Bool{&st.away, &st.listingsAway} { // the catalogue, the listing
			away.Store(true)
			if _, err := r.FindSubscription(context.Background(), "orders", "workers"); !errors.Is(err, ErrUnavailable) {
				t.Errorf("lookup while the store is away: %v; want ErrUnavailable", err)
			}
			away.Store(false)
			<-time.After(lookupInterval)
		}
		if _, err := r.FindSubscription(context.Background(), "orders", "workers"); !errors.Is(err, ErrSubscriptionNotFound) {
			t.Errorf("lookup once the store is back: %v; want ErrSubscriptionNotFound", err)
		}
		if n := st.reads.Load(); n != 3 {
			t.Errorf("%d reads; want 3 (the failures were not remembered as misses)", n)
		}
	})
}

// A lookup whose read of the cluster's store finds the data damaged (the catalogue, or the
// topic's subscriptions) fails with ErrStoreDamaged, wrapping the store's error (which
// matches store.ErrCorrupt and says what to do), not ErrUnavailable: retrying never helps.
// A store that is away stays ErrUnavailable. Before, both were ErrUnavailable, which the
// HTTP planes answer 503 "retry later".
func TestClusterLookupOfDamagedDataSaysDamaged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, st, stop := lookupFixture(t)
		defer stop()
		knownTopics(t, r, st, "orders")
		damaged := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ErrStoreDamaged) || !errors.Is(err, store.ErrCorrupt) || errors.Is(err, ErrUnavailable) ||
				!strings.Contains(err.Error(), "restore the directory from a backup") || !strings.Contains(err.Error(), "retrying does not help") {
				t.Errorf("%s: %v; want ErrStoreDamaged wrapping the store's damage, saying what to do, not ErrUnavailable", what, err)
			}
		}
		st.damaged.Store(true)
		damaged("publish to a topic this node does not know", r.Publish(context.Background(), "fresh"))
		<-time.After(lookupInterval)
		_, err := r.FindSubscription(context.Background(), "orders", "workers")
		damaged("a subscription lookup, the catalogue damaged", err)
		st.damaged.Store(false)
		st.listingsDamaged.Store(true)
		<-time.After(lookupInterval)
		_, err = r.FindSubscription(context.Background(), "orders", "workers")
		damaged("a subscription lookup, the topic's subscriptions damaged", err)
		st.listingsDamaged.Store(false)

		st.away.Store(true)
		<-time.After(lookupInterval)
		if err := r.Publish(context.Background(), "fresh"); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrStoreDamaged) {
			t.Errorf("publish with the store away: %v; want ErrUnavailable", err)
		}
		st.away.Store(false)
	})
}
