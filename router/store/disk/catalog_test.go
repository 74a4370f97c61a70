package disk_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

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
