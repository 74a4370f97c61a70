package disk_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
)

// askedCtx is a context that closes asked the first time its Done is asked for: a call
// waiting on it has begun to wait.
type askedCtx struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func newAskedCtx(parent context.Context) *askedCtx {
	return &askedCtx{Context: parent, asked: make(chan struct{})}
}

func (c *askedCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// A catalogue change whose synced commit a slow or full disk holds up does not hold up the
// callers waiting for their turn behind it: one whose ctx ends returns with ctx's error, its
// change not made, and the changes that wait apply in the order they came once the commit
// ends.
func TestCatalogueWaiterGivesUpBehindAStalledCommit(t *testing.T) {
	ctx := t.Context()
	var stall atomic.Bool
	stalled, unstall := make(chan struct{}), make(chan struct{})
	fs := logFS{vfs.NewMem(), func(op string) error {
		if op == "sync" && stall.CompareAndSwap(true, false) {
			close(stalled)
			<-unstall
		}
		return nil
	}}
	s, err := disk.OpenFS("db", disk.Options{}, fs)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	stall.Store(true)
	first := make(chan error, 1)
	go func() { first <- s.PutTopic(ctx, "a", []byte("v1")) }()
	<-stalled // the first change's commit waits on the disk

	waiting := newAskedCtx(ctx)
	waitCtx, cancel := context.WithCancel(waiting)
	defer cancel()
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- s.PutTopic(waitCtx, "b", nil) }()
	<-waiting.asked
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("PutTopic waiting behind a stalled commit, its ctx cancelled = %v; want context.Canceled", err)
	}

	next := newAskedCtx(ctx)
	second := make(chan error, 1)
	go func() { second <- s.PutTopic(next, "a", []byte("v2")) }()
	<-next.asked
	close(unstall)
	if err := <-first; err != nil {
		t.Fatalf("the stalled PutTopic: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the PutTopic that waited its turn: %v", err)
	}
	defs, err := s.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 1 || defs[0].Name != "a" || string(defs[0].Spec) != "v2" {
		t.Fatalf("Topics = %+v; want only a, with the later change's spec v2", defs)
	}
}

// A delete waiting for its commit, its own on a slow or full disk or behind another change's
// that one holds up, gives up when its ctx ends, with ctx's error, as the other catalogue
// waiters do. The store finishes it all the same: once the disk goes on, the name is free
// again, and a later definition and a second delete of it both work.
func TestDeleteGivesUpBehindAStalledCommit(t *testing.T) {
	kinds := []struct {
		name string
		put  func(ctx context.Context, s *disk.Store) error
		del  func(ctx context.Context, s *disk.Store) error
	}{
		{
			name: "topic",
			put:  func(ctx context.Context, s *disk.Store) error { return s.PutTopic(ctx, "x", []byte("v")) },
			del:  func(ctx context.Context, s *disk.Store) error { return s.DeleteTopic(ctx, "x") },
		},
		{
			name: "subscription",
			put:  func(ctx context.Context, s *disk.Store) error { return s.PutSubscription(ctx, "x", "s", []byte("v")) },
			del:  func(ctx context.Context, s *disk.Store) error { return s.DeleteSubscription(ctx, "x", "s") },
		},
	}
	stalls := []struct {
		name string
		// behind is set when the commit that stalls is another change's, which the delete's
		// turn waits behind; else it is the delete's own.
		behind bool
	}{
		{name: "own commit"},
		{name: "behind another commit", behind: true},
	}
	for _, k := range kinds {
		for _, st := range stalls {
			t.Run(k.name+"/"+st.name, func(t *testing.T) {
				ctx := t.Context()
				var stall atomic.Bool
				stalled, unstall := make(chan struct{}), make(chan struct{})
				fs := logFS{vfs.NewMem(), func(op string) error {
					if op == "sync" && stall.CompareAndSwap(true, false) {
						close(stalled)
						<-unstall
					}
					return nil
				}}
				// The first delete to drain signals draining and waits for proceed.
				var first atomic.Bool
				draining, proceed := make(chan struct{}), make(chan struct{})
				var opts disk.Options
				disk.SetDeleteHooks(&opts, func(string, string) {
					if first.CompareAndSwap(false, true) {
						close(draining)
						<-proceed
					}
				}, nil)
				s, err := disk.OpenFS("db", opts, fs)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				unstalled := false
				defer func() {
					if !unstalled {
						close(unstall) // lets Close end when the test fails early
					}
				}()
				if err := s.PutTopic(ctx, "x", []byte("v")); err != nil {
					t.Fatal(err)
				}
				if err := k.put(ctx, s); err != nil {
					t.Fatal(err)
				}

				delCtx, cancel := context.WithCancel(ctx)
				defer cancel()
				if !st.behind {
					stall.Store(true)
				}
				deleted := make(chan error, 1)
				go func() { deleted <- k.del(delCtx, s) }()
				<-draining // the delete has taken the name out and marked it
				otherDone := make(chan error, 1)
				if st.behind {
					stall.Store(true)
					go func() { otherDone <- s.PutTopic(ctx, "other", nil) }()
				} else {
					otherDone <- nil
				}
				close(proceed)
				<-stalled
				cancel()
				select {
				case err := <-deleted:
					if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for its commit") {
						t.Fatalf("delete waiting for a stalled commit, its ctx cancelled = %v; want one waiting for its commit, wrapping context.Canceled", err)
					}
				case <-time.After(30 * time.Second): // bounds a hang; it takes microseconds
					t.Fatal("the delete still waits for the stalled commit after its ctx was cancelled")
				}

				unstalled = true
				close(unstall)
				if err := <-otherDone; err != nil {
					t.Fatalf("the stalled PutTopic: %v", err)
				}
				if err := k.put(ctx, s); err != nil {
					t.Fatalf("defining the name again after the delete gave up: %v", err)
				}
				if err := k.del(ctx, s); err != nil {
					t.Fatalf("deleting the name a second time: %v", err)
				}
				if err := k.del(ctx, s); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("deleting the name a third time = %v; want store.ErrNotFound", err)
				}
			})
		}
	}
}
