package router

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// In cluster mode a topic created on another node is known here once that node's notice
// arrives (run), a moment later; a publish (Go or HTTP), a pull call over HTTP
// ([Router.FindTopicName]), a topic read or a subscription call for a topic this node does not
// know looks it up in the store first (topicFresh), so that the topic can be used here at once. Anyone who can reach a node can send topic names — the data plane
// finds a topic before it checks the topic's keys, and an embedding application may publish
// names it was given — so what unknown names cost is bounded, not counted per name:
//
//   - one read of the whole topic catalogue ([store.Store.Topics], which a JetStream store
//     answers by listing its definitions) serves every miss: at most one is under way per
//     node, and one starts at most every lookupInterval;
//   - a miss waits for the first read that starts after it (one started before might predate
//     the topic), within its ctx: up to lookupInterval and the read, bounded by lookupTimeout;
//   - a name that read did not find answers not found at once, without waiting, for
//     lookupInterval (misses: at most maxMisses names, those older dropped at each read);
//   - a name no topic can have ([ValidateTopicName]) is not looked up at all.
//
// The read runs in a goroutine of its own (readCatalogue), never in an actor's Receive;
// close cancels it and waits for it. A store that cannot answer makes the misses waiting for
// that read [ErrUnavailable], to retry, and nothing is remembered of them.
const (
	// lookupInterval is the least time between two reads of the catalogue for misses, and
	// how long a name a read did not find answers not found without another.
	lookupInterval = time.Second
	// lookupTimeout bounds one read of the catalogue (the store's own timeout may be shorter).
	lookupTimeout = 5 * time.Second
	// maxMisses bounds the names remembered as not found; past it a miss waits for the next
	// read, which costs the store nothing more.
	maxMisses = 4096
)

// catalogueRead is one read of the topic catalogue, which the misses since the read before
// wait for. start and err are set before done is closed.
type catalogueRead struct {
	done  chan struct{}
	start time.Time
	err   error
}

// topicFresh is topic, but in cluster mode a topic this node does not know is looked up in
// the store first, so a topic created on another node a moment ago can be published to, read
// or given subscriptions here at once (the reads are shared and bounded: see lookupInterval).
// A store that cannot answer makes it [ErrUnavailable], to retry, not a topic not found; a
// ctx that ends while it waits for the read makes it ctx's error.
func (r *Router) topicFresh(ctx context.Context, name string) (*topicRuntime, error) {
	t, err := r.topic(name)
	if err == nil || r.cl == nil || !errors.Is(err, ErrTopicNotFound) || ValidateTopicName(name) != nil {
		return t, err
	}
	rd, werr := r.cl.lookUp(ctx, name)
	switch {
	case werr != nil:
		return nil, fmt.Errorf("topic %q: waiting for a read of the cluster's store: %w", name, werr)
	case rd == nil: // a read a moment ago did not find it
		return nil, err
	case errors.Is(rd.err, ErrClosed):
		return nil, rd.err
	case rd.err != nil:
		return nil, fmt.Errorf("topic %q: reading it from the cluster's store: %w: %w", name, ErrUnavailable, rd.err)
	}
	t, err = r.topic(name)
	if errors.Is(err, ErrTopicNotFound) {
		r.cl.missed(name, rd.start)
	}
	return t, err
}

// lookUp returns the first read of the topic catalogue that starts after the call, once it
// ended, starting readCatalogue when it does not run; or nil at once when a read that started
// less than lookupInterval ago did not find name. It fails with ctx's error when ctx ends
// first, and with [ErrClosed] once close began.
func (c *clusterRuntime) lookUp(ctx context.Context, name string) (*catalogueRead, error) {
	c.mu.Lock()
	if at, ok := c.misses[fold(name)]; ok && time.Since(at) < lookupInterval {
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
	if c.readerDone == nil {
		c.readerDone = make(chan struct{})
		go c.readCatalogue(c.readerDone)
	}
	c.mu.Unlock()
	select {
	case <-rd.done:
		return rd, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// missed remembers that name was not found by the read that started at start, unless
// maxMisses names are remembered already.
func (c *clusterRuntime) missed(name string, start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.misses == nil {
		c.misses = make(map[string]time.Time)
	}
	if len(c.misses) < maxMisses {
		c.misses[fold(name)] = start
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
		rd.err = c.r.syncNewTopics(ctx)
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

// syncNewTopics reads the topic catalogue and starts here, with their subscriptions, the
// topics in it this node does not know (syncTopicDef); the watch (run) keeps those it knows
// up to date. It returns the error of a store that could not list the topics.
func (r *Router) syncNewTopics(ctx context.Context) error {
	defs, err := r.store.Topics(ctx)
	if err != nil {
		return err
	}
	for i := range defs {
		if _, err := r.topic(defs[i].Name); errors.Is(err, ErrTopicNotFound) {
			r.syncTopicDef(ctx, defs[i].Name, &defs[i])
		}
	}
	return nil
}
