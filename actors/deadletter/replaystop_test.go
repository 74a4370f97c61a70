package deadletter_test

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/testkit"
)

// heldParts is a replay's Read whose parts are given by parts (io.EOF past them); the first
// read of part hold waits until release is closed, whatever its context (a store that ignores
// cancellation). It notes the parts asked for, in order.
type heldParts struct {
	parts   [][]*schemas.Event
	hold    int
	release chan struct{}

	mu    sync.Mutex
	asked []int
	held  bool
}

func newHeldParts(hold int, parts ...[]*schemas.Event) *heldParts {
	return &heldParts{parts: parts, hold: hold, release: make(chan struct{})}
}

func (p *heldParts) read(_ context.Context, part int) ([]*schemas.Event, error) {
	p.mu.Lock()
	p.asked = append(p.asked, part)
	wait := part == p.hold && !p.held
	p.held = p.held || wait
	p.mu.Unlock()
	if wait {
		<-p.release
	}
	if part >= len(p.parts) {
		return nil, io.EOF
	}
	return p.parts[part], nil
}

func (p *heldParts) reads() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.asked)
}

func replayStopSub(sink *replaySink) *actors.SubscriptionConfig {
	return &actors.SubscriptionConfig{
		SubscriptionShared: &actors.SubscriptionShared{Topic: "orders", TopicID: dlTopicID, InputSchema: schemas.EventGrid, Metrics: new(metrics.Set)},
		Name:               "sub-a", DeliverySchema: schemas.EventGrid,
		Policy: &retry.Policy{Profile: retry.EventGrid(), DeadLetter: true, NoJitter: true}, Sink: sink,
	}
}

// A replay stopped while its part read hangs (ignoring its context) terminates at once and
// reports that it stopped; the wait for the read runs in its stop work, which ends when the
// read returns.
func TestStoppingReplayDoesNotWaitForItsPartRead(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		parts := newHeldParts(0, replayEvents(t, "e1"))
		defer close(parts.release)
		stops := new(deadletter.ReplayStops)
		done := make(chan deadletter.ReplayResult, 1)
		pid := h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{
			Subscription: replayStopSub(&replaySink{}), Total: 1, Read: parts.read, PublishTime: time.Now(), Stops: stops,
			OnDone: func(r deadletter.ReplayResult) { done <- r },
		}))
		h.Settle() // part 0's read is held
		stopped := make(chan error, 1)
		go func() { stopped <- h.System().Root.StopFuture(pid).Wait() }()
		h.Settle() // no time passes
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("the replay actor did not terminate while its part read hangs: its Stopping turn waits for the read")
		}
		select {
		case res := <-done:
			if !res.Stopped || res.Total != 1 || res.Delivered != 0 {
				t.Errorf("result %+v, want 1 event, none delivered, stopped", res)
			}
		default:
			t.Error("the stopped replay reported no result")
		}
		waited := make(chan error, 1)
		go func() { waited <- stops.Wait(context.Background()) }()
		h.Settle()
		select {
		case err := <-waited:
			t.Fatalf("ReplayStops.Wait returned (%v) while the part read hangs", err)
		default:
		}
		parts.release <- struct{}{} // the held read returns
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
	})
}

// A replay that restarts while its part read hangs answers at once, and its next incarnation
// reads part 0 again only once the read of the one before has returned.
func TestRestartedReplayReadsAfterTheReadBeforeReturned(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		parts := newHeldParts(1, replayEvents(t, "e1")) // part 1 (io.EOF) hangs the first time
		defer close(parts.release)
		done := make(chan deadletter.ReplayResult, 1)
		var once sync.Once
		pid := h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{
			Subscription: replayStopSub(&replaySink{}), Total: 1, Read: parts.read, PublishTime: time.Now(),
			// e1 delivered while part 1 is read: a bug in the progress hook restarts the actor.
			OnProgress: func(int, int) { once.Do(func() { panic("progress hook bug") }) },
			OnDone:     func(r deadletter.ReplayResult) { done <- r },
		}))
		h.Settle()
		if got := parts.reads(); !slices.Equal(got, []int{0, 1}) {
			t.Errorf("parts read while the first incarnation's read hangs: %v, want [0 1] (none by the next)", got)
		}
		if _, err := h.System().Root.RequestFuture(pid, &actors.GetStatus{}, time.Second).Result(); err != nil {
			t.Errorf("status request to the restarted replay while the read before hangs: %v; want an answer at once", err)
		}
		parts.release <- struct{}{}
		h.Settle()
		if got := parts.reads(); !slices.Equal(got, []int{0, 1, 0, 1}) {
			t.Errorf("parts read once the read before returned: %v, want [0 1 0 1]", got)
		}
		select {
		case res := <-done:
			if res != (deadletter.ReplayResult{Total: 1, Delivered: 1}) {
				t.Errorf("result %+v, want e1 delivered", res)
			}
		default:
			t.Error("the restarted replay did not finish")
		}
	})
}

// The next incarnation does not wait for ever for a read that never returns: it reads once
// the read had 5 s after its context was cancelled (and was abandoned).
func TestRestartedReplayReadsOnceAStuckReadIsAbandoned(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		parts := newHeldParts(1, replayEvents(t, "e1"))
		defer close(parts.release)
		var once sync.Once
		h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{
			Subscription: replayStopSub(&replaySink{}), Total: 1, Read: parts.read, PublishTime: time.Now(),
			OnProgress: func(int, int) { once.Do(func() { panic("progress hook bug") }) },
		}))
		h.Advance(5*time.Second - time.Millisecond)
		if got := parts.reads(); !slices.Equal(got, []int{0, 1}) {
			t.Errorf("parts read before the stuck read had its 5 s: %v, want [0 1]", got)
		}
		h.Advance(time.Millisecond)
		if got := parts.reads(); !slices.Equal(got, []int{0, 1, 0, 1}) {
			t.Errorf("parts read once the stuck read was abandoned: %v, want [0 1 0 1]", got)
		}
	})
}

// A new replay of the same key reads its first part only once the read of a stopped replay
// of that key has returned: the two would walk one source.
func TestNewReplayOfAKeyReadsAfterTheStoppedOnesRead(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		stops := new(deadletter.ReplayStops)
		first := newHeldParts(0, replayEvents(t, "e1"))
		defer close(first.release)
		pid := h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{
			Subscription: replayStopSub(&replaySink{}), Total: 1, Read: first.read, PublishTime: time.Now(), Stops: stops, StopKey: "orders/sub-a",
		}))
		h.Settle()
		if err := h.System().Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		second := newHeldParts(-1, replayEvents(t, "e1"))
		done := make(chan deadletter.ReplayResult, 1)
		h.Spawn(deadletter.ReplayProps(&deadletter.ReplayConfig{
			Subscription: replayStopSub(&replaySink{}), Total: 1, Read: second.read, PublishTime: time.Now(), Stops: stops, StopKey: "orders/sub-a",
			OnDone: func(r deadletter.ReplayResult) { done <- r },
		}))
		h.Settle()
		if got := second.reads(); len(got) != 0 {
			t.Errorf("the new replay read parts %v while the stopped one's read hangs, want none", got)
		}
		first.release <- struct{}{}
		h.Settle()
		if got := second.reads(); !slices.Equal(got, []int{0, 1}) {
			t.Errorf("the new replay read parts %v once the stopped one's read returned, want [0 1]", got)
		}
		if res := <-done; res != (deadletter.ReplayResult{Total: 1, Delivered: 1}) {
			t.Errorf("result %+v, want e1 delivered", res)
		}
	})
}
