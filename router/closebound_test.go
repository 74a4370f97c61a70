package router_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// heldAppends holds every journal append that comes while holding is set until release is
// closed: a disk whose fsync stopped returning.
type heldAppends struct {
	store.Store
	holding atomic.Bool
	entered chan struct{} // a value per append held
	release chan struct{}
}

func (h *heldAppends) Append(ctx context.Context, topic string, at time.Time, evs []*schemas.Event) (uint64, error) {
	if h.holding.Load() {
		h.entered <- struct{}{}
		<-h.release
	}
	return h.Store.Append(ctx, topic, at, evs)
}

// holdingRouter returns a router with topic "orders" on a store that holds every append from
// now on until st.release is closed.
func holdingRouter(t *testing.T) (*router.Router, *heldAppends) {
	t.Helper()
	st := &heldAppends{Store: store.NewMemory(), entered: make(chan struct{}, 4), release: make(chan struct{})}
	r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	st.holding.Store(true)
	return r, st
}

// Close's context bounds it while a journal append hangs: it waited for the topic's
// committer, stuck in the store, whatever its context, and the caller's shutdown with it.
// The append queued before Close is still answered once the store returns.
func TestCloseIsBoundedWhileAJournalAppendHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r, st := holdingRouter(t)
		published := make(chan error, 1)
		go func() { published <- r.Publish(ctx, "orders", event("e1")) }()
		<-st.entered
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- r.Close(cctx) }()
		select {
		case err := <-closed:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Close while an append hangs = %v, want its context's deadline", err)
			}
			if waited := time.Since(start); waited != 10*time.Second {
				t.Errorf("Close returned after %v, want its context's 10s", waited)
			}
		case <-time.After(time.Minute):
			t.Errorf("Close did not return a minute after its context's 10s deadline, while a journal append hangs")
			close(st.release)
			<-closed
			<-published
			return
		}
		close(st.release)
		if err := <-published; err != nil {
			t.Errorf("the publish whose append was under way = %v, want it durable", err)
		}
		synctest.Wait() // the shutdown goes on in the background and ends
	})
}

// A publish made while Close waits for a topic's committer ends with its context, or is
// refused: a publisher that found the committer's queue full held the committer's lock while
// it waited for room (a broker source's publish waits without a deadline), Close waited for
// that lock, and every later publish waited behind Close, past its own deadline, for as long
// as the store held its append.
func TestPublishDuringCloseIsNotHeldByAFullCommitQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		r, st := holdingRouter(t)
		// One append held in the store, the queue behind it full (1024), one more waiting for
		// room with no deadline.
		const n = 1 + 1024 + 1
		published := make(chan error, n)
		go func() { published <- r.Publish(ctx, "orders", event("e0")) }()
		<-st.entered
		for i := 1; i < n; i++ {
			go func() { published <- r.Publish(ctx, "orders", event(fmt.Sprint("e", i))) }()
		}
		synctest.Wait()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		closed := make(chan error, 1)
		go func() { closed <- r.Close(cctx) }()
		synctest.Wait() // Close waits for the committer
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		late := make(chan error, 1)
		go func() { late <- r.Publish(pctx, "orders", event("late")) }()
		select {
		case err := <-late:
			if !errors.Is(err, router.ErrClosed) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a publish while Close waits = %v, want ErrClosed or its deadline", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("a publish made while Close waits for the committer did not return a minute after its 10s deadline")
			defer func() { <-late }()
		}
		close(st.release)
		<-closed
		refused := 0
		for range n {
			switch err := <-published; {
			case errors.Is(err, router.ErrClosed):
				refused++ // the one waiting for room: never queued
			case err != nil:
				t.Errorf("a publish queued before Close = %v, want it durable", err)
			}
		}
		if refused > 1 {
			t.Errorf("%d publishes refused, want at most the one that waited for room", refused)
		}
	})
}
