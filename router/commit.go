package router

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/logattr"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// maxCommitEvents bounds the events one journal append gathers.
const maxCommitEvents = 20000

// committer appends a topic's publishes to its journal: one goroutine per topic gathers every
// request waiting at that moment into one store append (one sync for all of them), then tells
// the topic actor and answers the requests. Appends of one topic are therefore sequential, so
// the topic actor sees its journal in order: each batch's entries, or, past handOffBound, only
// where the journal ends.
type committer struct {
	r    *Router
	t    *topicRuntime
	reqs chan *appendReq
	mu   sync.RWMutex // guards closed against sends on reqs
	shut bool
	// quit is closed by close before it takes mu: a publisher waiting for room in reqs (the
	// store holding the append under way) holds mu's read lock, and gives it up then instead
	// of holding close, and every publish behind close, for as long as the store does.
	quit     chan struct{}
	quitOnce sync.Once
	done     chan struct{}
	// handed counts the bytes of acknowledged events sent to the topic actor in
	// actors.Appended messages that it has not fanned out yet (see handOffBound); bound is
	// handOffBound as the committer was made.
	handed atomic.Int64
	bound  int64
}

// handOffBound bounds the bytes of acknowledged events (their JSON) a topic's committer has
// handed to its topic actor and the actor has not yet handed on to its subscriptions. The
// committer hands a committed batch's events over in memory while they fit under it; past it,
// it sends only where the journal now ends (actors.JournalAt), and the subscriptions read those
// events from the journal themselves, as they do when they fall behind. Publishing is not held
// up: the events are durable already. Without the bound a topic actor slower than its
// publishers (its subscriptions' advanced filters each scanning every event, with big events
// and many subscriptions) held every acknowledged event in its mailbox, growing without limit
// for as long as publishing went on. A variable for tests.
var handOffBound int64 = 64 << 20

type appendReq struct {
	ctx    context.Context
	events []*schemas.Event
	err    chan error
}

func newCommitter(r *Router, t *topicRuntime) *committer {
	c := &committer{r: r, t: t, reqs: make(chan *appendReq, 1024), quit: make(chan struct{}), done: make(chan struct{}), bound: handOffBound}
	go c.run()
	return c
}

// append makes events durable; it returns ErrClosed after close.
func (c *committer) append(ctx context.Context, events []*schemas.Event) error {
	req := &appendReq{ctx: ctx, events: events, err: make(chan error, 1)}
	c.mu.RLock()
	if c.shut {
		c.mu.RUnlock()
		return ErrClosed
	}
	select {
	case c.reqs <- req:
		c.mu.RUnlock()
	case <-ctx.Done():
		c.mu.RUnlock()
		return ctx.Err()
	case <-c.quit: // not queued: refused like a publish after close
		c.mu.RUnlock()
		return ErrClosed
	}
	// Once queued the append is not abandoned: the answer must say whether it is durable.
	return <-req.err
}

// close stops accepting requests, finishes the queued ones and waits for the goroutine.
func (c *committer) close() {
	c.quitOnce.Do(func() { close(c.quit) })
	c.mu.Lock()
	if !c.shut {
		c.shut = true
		close(c.reqs)
	}
	c.mu.Unlock()
	<-c.done
}

func (c *committer) run() {
	defer close(c.done)
	var batch []*appendReq
	for req := range c.reqs {
		batch = append(batch[:0], req)
		n := len(req.events)
	gather:
		for n < maxCommitEvents {
			select {
			case more, ok := <-c.reqs:
				if !ok {
					break gather
				}
				batch = append(batch, more)
				n += len(more.events)
			default:
				break gather
			}
		}
		c.commit(batch, n)
	}
}

func (c *committer) commit(batch []*appendReq, n int) {
	events := make([]*schemas.Event, 0, n)
	for _, req := range batch {
		events = append(events, req.events...)
	}
	now := c.r.deps.Now().UTC()
	last, err := c.r.store.Append(context.Background(), c.t.name, now, events)
	if err != nil {
		// A journal the store finds damaged (its end in a damaged table block) is
		// ErrStoreDamaged, which retrying does not help; any other failure ErrUnavailable.
		err = storeFailure(fmt.Sprintf("appending to the journal of topic %q", c.t.name), err)
		c.r.log.Error("publish failed", logattr.Topic, c.t.name, "events", n, "err", err)
		for _, req := range batch {
			req.err <- err
		}
		return
	}
	c.handOff(events, last, now)
	if c.r.cl != nil {
		c.r.cl.node.Appended(c.t.name, last) // the subscription actors on other nodes
	}
	for _, req := range batch {
		req.err <- nil
	}
	c.r.trim.appended(c.t.name, len(events))
}

// handOff tells the topic actor of events, appended to the journal up to last at now: the
// entries themselves while the bytes handed over and not yet fanned out stay under c.bound,
// else where the journal ends, for the subscriptions to read them there (see handOffBound).
func (c *committer) handOff(events []*schemas.Event, last uint64, now time.Time) {
	var size int64
	for _, ev := range events {
		size += int64(ev.Size())
	}
	if c.handed.Load()+size > c.bound {
		c.r.system.Root.Send(c.t.pid, &actors.JournalAt{Last: last})
		return
	}
	c.handed.Add(size) // only the topic actor takes off, so the count stays under the bound
	entries := make([]store.Entry, len(events))
	first := last - uint64(len(events)) + 1
	for i, ev := range events {
		entries[i] = store.Entry{Seq: first + uint64(i), PublishTime: now, Event: ev}
	}
	c.r.system.Root.Send(c.t.pid, &actors.Appended{Entries: entries, Held: &c.handed, Bytes: size})
}
