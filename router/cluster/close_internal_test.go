package cluster

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"
)

// loopless is a node whose placement loop and membership watch have ended: Close waits
// only for its starts and stops.
func loopless() *Node {
	finished := make(chan struct{})
	close(finished)
	return &Node{
		log: slog.New(slog.DiscardHandler), poke: make(chan struct{}, 1),
		quit: make(chan struct{}), done: finished, viewDone: finished,
		busy: make(map[Key]*keyOps),
	}
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
