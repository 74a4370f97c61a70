package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/egridio/egrid/schemas/clip"
)

// In cluster mode a topic or subscription created on another node is known here once that
// node's notice arrives (run), a moment later. A publish (Go or HTTP), a pull call over HTTP
// ([Router.FindTopicName]), a topic read or a subscription call for a topic this node does
// not know looks it up in the store first (topicFresh); a pull call, a subscription read, a
// status call or a deletion naming a subscription this node does not know, of a topic it
// knows, looks the subscription up likewise (subscriptionFresh), so that either can be used
// here at once. Anyone who can reach a node can send topic names — the data plane finds a
// topic before it checks the topic's keys, and an embedding application may publish names it
// was given — so what unknown names cost is bounded, not counted per name:
//
//   - one read of the topic catalogue ([store.Store.Topics], which a JetStream store answers
//     by listing its definitions), with the subscriptions of the known topics that misses
//     named ([store.Store.Subscriptions], one listing per such topic), serves every miss: at
//     most one is under way per node, and one starts at most every lookupInterval;
//   - a miss waits for the first read that starts after it (one started before might predate
//     the topic or subscription), within its ctx: up to lookupInterval and the read, bounded
//     by lookupTimeout;
//   - a name that read did not find answers not found at once, without waiting, for
//     lookupInterval (misses: at most maxMisses names, those older dropped at each read);
//   - a name no topic or subscription can have ([ValidateTopicName],
//     [ValidateSubscriptionName]) is not looked up at all.
//
// The read runs in a goroutine of its own (readCatalogue), never in an actor's Receive and
// never in a topic's turn (it takes the turns of the topics it applies, so a caller holding
// one must not wait for it); close cancels it and waits for it. A store that cannot answer
// makes the misses waiting for that read [ErrUnavailable], to retry (or [ErrStoreDamaged],
// when what it read is damaged: retrying does not help), and nothing is remembered of them.
const (
	// lookupInterval is the least time between two reads of the catalogue for misses, and
	// how long a name a read did not find answers not found without another.
	lookupInterval = time.Second
	// lookupTimeout bounds one read of the catalogue (the store's own timeout may be shorter).
	lookupTimeout = 5 * time.Second
	// maxMisses bounds the names remembered as not found; past it a miss waits for the next
	// read, which costs the store nothing more.
	maxMisses = 4096
	// maxSubscriptionListings bounds the topics whose subscriptions one read lists; the
	// misses of further topics wait for a later read.
	maxSubscriptionListings = 64
)

// catalogueRead is one read of the topic catalogue, which the misses since the read before
// wait for. start and err are set before done is closed.
type catalogueRead struct {
	done  chan struct{}
	start time.Time
	err   error
	// subsOf holds the topics whose subscriptions the read lists (names as created, by folded
	// name), set before it starts: those the misses waiting for it named, at most
	// maxSubscriptionListings. subsErr holds, set before done is closed, why a listing
	// failed.
	subsOf  map[string]string
	subsErr map[string]error
}

// topicFresh is topic, but in cluster mode a topic this node does not know is looked up in
// the store first, so a topic created on another node a moment ago can be published to, read
// or given subscriptions here at once (the reads are shared and bounded: see lookupInterval).
// A store that cannot answer makes it [ErrUnavailable], to retry, not a topic not found; one
// that finds the data damaged [ErrStoreDamaged] (retrying does not help); a ctx that ends
// while it waits for the read makes it ctx's error.
func (r *Router) topicFresh(ctx context.Context, name string) (*topicRuntime, error) {
	t, err := r.topic(name)
	if err == nil || r.cl == nil || !errors.Is(err, ErrTopicNotFound) || ValidateTopicName(name) != nil {
		return t, err
	}
	rd, werr := r.cl.lookUp(ctx, fold(name), "")
	switch {
	case werr != nil:
		return nil, fmt.Errorf("topic %q: waiting for a read of the cluster's store: %w", name, werr)
	case rd == nil: // a read a moment ago did not find it
		return nil, err
	case errors.Is(rd.err, ErrClosed):
		return nil, rd.err
	case rd.err != nil:
		return nil, storeFailure(fmt.Sprintf("topic %q: reading it from the cluster's store", name), rd.err)
	}
	t, err = r.topic(name)
	if errors.Is(err, ErrTopicNotFound) {
		r.cl.missed(fold(name), rd.start)
	}
	return t, err
}

// subscriptionFresh is lookup, but in cluster mode a subscription this node does not know is
// looked up in the store first, so a subscription created on another node a moment ago can
// be pulled from, read, asked for its status or deleted through this node at once (the reads
// are shared and bounded with topicFresh's: see lookupInterval); a topic this node does not
// know is looked up as topicFresh does, with its subscriptions. A store that cannot answer
// makes it [ErrUnavailable], to retry, and one that finds the data damaged [ErrStoreDamaged];
// a ctx that ends while it waits for the read makes it ctx's error. The caller must not hold
// a topic's turn: the read takes the turn of the topic it applies.
func (r *Router) subscriptionFresh(ctx context.Context, topic, name string) (*topicRuntime, *SubscriptionSpec, string, error) {
	t, spec, display, err := r.lookup(topic, name)
	if err == nil || r.cl == nil || ValidateSubscriptionName(name) != nil {
		return t, spec, display, err
	}
	if errors.Is(err, ErrTopicNotFound) {
		if _, err := r.topicFresh(ctx, topic); err != nil {
			return nil, nil, "", err
		}
		return r.lookup(topic, name) // the topic was read with its subscriptions
	}
	if !errors.Is(err, ErrSubscriptionNotFound) {
		return t, spec, display, err
	}
	key := fold(t.name) + "/" + fold(name) // names hold no '/'
	rd, werr := r.cl.lookUp(ctx, key, t.name)
	switch {
	case werr != nil:
		return nil, nil, "", fmt.Errorf("event subscription %q of topic %q: waiting for a read of the cluster's store: %w", clip.String(name), t.name, werr)
	case rd == nil: // a read a moment ago did not find it
		return t, nil, "", err
	case errors.Is(rd.err, ErrClosed):
		return nil, nil, "", rd.err
	case rd.err != nil:
		return nil, nil, "", storeFailure(fmt.Sprintf("event subscription %q of topic %q: reading it from the cluster's store", clip.String(name), t.name), rd.err)
	case rd.subsErr[fold(t.name)] != nil:
		return nil, nil, "", storeFailure(fmt.Sprintf("event subscription %q of topic %q: reading it from the cluster's store", clip.String(name), t.name), rd.subsErr[fold(t.name)])
	}
	t, spec, display, err = r.lookup(topic, name)
	if errors.Is(err, ErrSubscriptionNotFound) {
		r.cl.missed(key, rd.start)
	}
	return t, spec, display, err
}

// lookUp returns the first read of the topic catalogue that starts after the call and, when
// subsOf names a topic, lists its subscriptions, once it ended, starting readCatalogue when it
// does not run; or nil at once when a read that started less than lookupInterval ago did not
// find key (a folded topic name, or "topic/subscription" folded). It fails with ctx's error
// when ctx ends first, and with [ErrClosed] once close began.
func (c *clusterRuntime) lookUp(ctx context.Context, key, subsOf string) (*catalogueRead, error) {
	for {
		c.mu.Lock()
		if at, ok := c.misses[key]; ok && time.Since(at) < lookupInterval {
			c.mu.Unlock()
			return nil, nil
		}
		if c.noReads {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		rd := c.nextRead
		if rd == nil {
			rd = &catalogueRead{done: make(chan struct{})}
			c.nextRead = rd
		}
		listed := true
		if subsOf != "" {
			if _, ok := rd.subsOf[fold(subsOf)]; !ok {
				if listed = len(rd.subsOf) < maxSubscriptionListings; listed {
					if rd.subsOf == nil {
						rd.subsOf = make(map[string]string)
					}
					rd.subsOf[fold(subsOf)] = subsOf
				}
			}
		}
		if c.readerDone == nil {
			c.readerDone = make(chan struct{})
			go c.readCatalogue(c.readerDone)
		}
		c.mu.Unlock()
		select {
		case <-rd.done:
			if listed || rd.err != nil {
				return rd, nil
			}
			// That read listed the subscriptions of other topics only: wait for the next.
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// missed remembers that key (see lookUp) was not found by the read that started at start,
// unless maxMisses keys are remembered already.
func (c *clusterRuntime) missed(key string, start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.misses == nil {
		c.misses = make(map[string]time.Time)
	}
	if len(c.misses) < maxMisses {
		c.misses[key] = start
	}
}

// readCatalogue reads the topic catalogue for the misses waiting (nextRead), one read at a
// time and at most one every lookupInterval, until none waits; then it closes done. Close
// ends it: a read under way is cancelled (c.life), and the misses waiting for the next one
// get [ErrClosed].
func (c *clusterRuntime) readCatalogue(done chan struct{}) {
	defer close(done)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.mu.Lock()
		rd := c.nextRead
		if rd == nil || c.noReads {
			c.nextRead, c.readerDone = nil, nil
			c.mu.Unlock()
			if rd != nil {
				rd.err = ErrClosed
				close(rd.done)
			}
			return
		}
		now := time.Now()
		if wait := c.lastRead.Add(lookupInterval).Sub(now); wait > 0 {
			c.mu.Unlock()
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-c.stopping:
			}
			continue
		}
		c.nextRead, c.lastRead, rd.start = nil, now, now
		for f, at := range c.misses {
			if now.Sub(at) >= lookupInterval {
				delete(c.misses, f)
			}
		}
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(c.life, lookupTimeout)
		rd.subsErr, rd.err = c.r.syncCatalogue(ctx, rd.subsOf)
		cancel()
		close(rd.done)
	}
}

// stopReads makes lookUp start no read any more and returns the done channel of the
// readCatalogue under way (nil if none): it ends once c.stopping is closed, after the read it
// may be making, which c.life bounds.
func (c *clusterRuntime) stopReads() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noReads = true
	return c.readerDone
}

// syncCatalogue reads the topic catalogue and starts here, with their subscriptions, the
// topics in it this node does not know, and applies the stored subscriptions of the topics
// in subsOf this node knows (syncTopicDef); the watch (run) keeps the rest up to date. It
// returns by folded topic name the errors of those in subsOf whose subscriptions it could not
// list, and the error of a store that could not list the topics.
func (r *Router) syncCatalogue(ctx context.Context, subsOf map[string]string) (map[string]error, error) {
	defs, err := r.store.Topics(ctx)
	if err != nil {
		return nil, err
	}
	var subsErr map[string]error
	for i := range defs {
		_, err := r.topic(defs[i].Name)
		_, listed := subsOf[fold(defs[i].Name)]
		if !errors.Is(err, ErrTopicNotFound) && !listed {
			continue
		}
		if err := r.syncTopicDef(ctx, defs[i].Name, &defs[i]); err != nil && listed {
			if subsErr == nil {
				subsErr = make(map[string]error)
			}
			subsErr[fold(defs[i].Name)] = err
		}
	}
	return subsErr, nil
}
