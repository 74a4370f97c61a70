package router

import (
	"context"
	"strings"
	"sync"
)

// turns serialises the admin operations of one topic — creating, updating and deleting it and
// its subscriptions, completing or failing a manual validation — without a lock held across
// their I/O: an operation takes its topic's turn, does its store writes and waits on actors,
// then gives the turn back. Operations on other topics, and every publish, go on meanwhile:
// the router's own mutex guards only its maps and is never held across I/O or across waiting
// on an actor. Names are compared case-insensitively, as Event Grid does.
type turns struct {
	mu sync.Mutex
	m  map[string]*turn
	// spare is the last turn nobody held or waited for, kept for the next acquire: a run of
	// creates then allocates no turn each (garbage that costs resident memory, README
	// "Benchmarks" row 7). Its channel is empty.
	spare *turn
}

type turn struct {
	ch   chan struct{} // holds a token while the turn is taken
	refs int           // operations holding or waiting for the turn
}

// acquire waits for the turn of topic, or for ctx. The returned function gives it back.
func (ts *turns) acquire(ctx context.Context, topic string) (release func(), err error) {
	key := strings.ToLower(topic)
	ts.mu.Lock()
	if ts.m == nil {
		ts.m = make(map[string]*turn)
	}
	t := ts.m[key]
	if t == nil {
		if t = ts.spare; t != nil {
			ts.spare = nil
		} else {
			t = &turn{ch: make(chan struct{}, 1)}
		}
		ts.m[key] = t
	}
	t.refs++
	ts.mu.Unlock()
	done := func() {
		ts.mu.Lock()
		if t.refs--; t.refs == 0 {
			delete(ts.m, key)
			ts.spare = t
		}
		ts.mu.Unlock()
	}
	select {
	case t.ch <- struct{}{}:
		return func() { <-t.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}
