package router_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// stateGatedStore holds every subscription state write at its gate while the gate is closed.
type stateGatedStore struct {
	store.Store
	mu   sync.Mutex
	gate chan struct{} // nil: writes pass
}

func (s *stateGatedStore) closeGate() (open func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gate := make(chan struct{})
	s.gate = gate
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.gate = nil
			s.mu.Unlock()
			close(gate)
		})
	}
}

func (s *stateGatedStore) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return s.Store.UpdateSubscription(ctx, topic, sub, u)
}

// A settle call whose context's deadline has already passed returns at once with
// DeadlineExceeded. Before, the time left (negative) became the request's timeout, which
// protoactor takes for none: the call waited for the queue actor's answer for ever, and an
// acknowledgement whose write hung (or an actor restarted before answering) never answered.
// In cluster mode the owner's handler gets the caller's time left, so a settle that reached
// it late held a goroutine there for good.
func TestSettleWithDeadlinePastReturnsAtOnce(t *testing.T) {
	st := &stateGatedStore{Store: store.NewMemory()}
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		h.Publish(pullTopic, h.CloudEvent(testkit.ID("a")))
		evs := h.Receive(pullTopic, pullSub, 1)
		if len(evs) != 1 {
			t.Fatalf("received %d events, want 1", len(evs))
		}
		open := st.closeGate() // the acknowledgement's write would hang
		defer open()
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := h.Router().Acknowledge(ctx, pullTopic, pullSub, testkit.LockTokens(evs))
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acknowledge with a deadline past = %v, want DeadlineExceeded", err)
			}
		case <-time.After(10 * time.Minute):
			t.Fatal("Acknowledge with a deadline past still waits after 10 minutes")
		}
		open()
	}, testkit.WithStore(st))
}

// A status call whose context's deadline has already passed returns DeadlineExceeded without
// asking the actor, as a settle call does: the time left (negative) was the request's timeout,
// which protoactor takes for none.
func TestStatusWithDeadlinePastReturnsAtOnce(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		h.SubscribeQueue(pullTopic, pullSub, router.QueueInfo{})
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		if _, err := h.Router().Status(ctx, pullTopic, pullSub); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Status with a deadline past = %v, want DeadlineExceeded", err)
		}
	})
}
