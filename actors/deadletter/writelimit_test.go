package deadletter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// heldStore holds every Put until released, counting the Puts under way.
type heldStore struct {
	sinks.ObjectStore
	release chan struct{}

	mu                sync.Mutex
	inFlight, maxSeen int
}

func (s *heldStore) Put(ctx context.Context, bucket, key string, body []byte, opts sinks.PutOptions) (sinks.ObjectInfo, error) {
	s.mu.Lock()
	s.inFlight++
	s.maxSeen = max(s.maxSeen, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	select {
	case <-s.release:
	case <-ctx.Done():
		return sinks.ObjectInfo{}, ctx.Err()
	}
	return s.ObjectStore.Put(ctx, bucket, key, body, opts)
}

func (s *heldStore) counts() (inFlight, maxSeen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight, s.maxSeen
}

// Objects that come due together are written at most MaxConcurrentWrites at a time: the
// others wait, counted as writing, and start as earlier writes end, until all are written.
// Before, every object due started its write (and built its body) at once.
func TestObjectWritesAreLimited(t *testing.T) {
	const subscriptions = 3*deadletter.MaxConcurrentWrites + 1
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		mem := testkit.NewObjectStore()
		store := &heldStore{ObjectStore: mem, release: make(chan struct{})}
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: store}))
		root, at := h.System().Root, time.Now()
		for i := range subscriptions {
			sub := fmt.Sprintf("sub-%d", i)
			root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, sub, "e1", at), Target: dlTarget(sub, false)})
		}
		h.Advance(6 * time.Minute) // all due together
		if in, _ := store.counts(); in != deadletter.MaxConcurrentWrites {
			t.Errorf("%d writes under way, want %d", in, deadletter.MaxConcurrentWrites)
		}
		if st := dlStatus(t, h, pid); st.Writing != subscriptions {
			t.Errorf("status %+v, want all %d records writing (under way or waiting their turn)", st, subscriptions)
		}
		for range subscriptions {
			store.release <- struct{}{} // one write ends; the next waiting one starts
			h.Settle()
			if in, _ := store.counts(); in > deadletter.MaxConcurrentWrites {
				t.Errorf("%d writes under way, want at most %d", in, deadletter.MaxConcurrentWrites)
				close(store.release) // let every write end
				return
			}
		}
		if _, most := store.counts(); most != deadletter.MaxConcurrentWrites {
			t.Errorf("at most %d writes at once, want %d", most, deadletter.MaxConcurrentWrites)
		}
		if n := len(mem.Objects("deadletters")); n != subscriptions {
			t.Errorf("%d objects written, want %d", n, subscriptions)
		}
		if st := dlStatus(t, h, pid); st.Pending() != 0 || st.ObjectsWritten != subscriptions {
			t.Errorf("status %+v, want every object written", st)
		}
	})
}
