package deadletter_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/testkit"
)

// pausedOutbox is an outbox kept in memory (not a *MemoryOutbox: the actor counts nothing lost
// when it stops) whose next Put fails once fail is set, and whose Puts wait, whatever their
// context, while hold is set, until it is closed. It counts its Loads and notes the records
// of each Put that lands, in order.
type pausedOutbox struct {
	*deadletter.MemoryOutbox
	fail  atomic.Bool
	loads atomic.Int32

	mu   sync.Mutex
	hold chan struct{}
	puts [][]string // the event ids of each Put that landed
}

func newPausedOutbox() *pausedOutbox {
	return &pausedOutbox{MemoryOutbox: deadletter.NewMemoryOutbox()}
}

func (o *pausedOutbox) holdPuts() chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.hold = make(chan struct{})
	return o.hold
}

func (o *pausedOutbox) Put(ctx context.Context, recs []deadletter.Record) error {
	if o.fail.CompareAndSwap(true, false) {
		return errors.New("disk full")
	}
	o.mu.Lock()
	hold := o.hold
	o.mu.Unlock()
	if hold != nil {
		<-hold
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.EventID
	}
	o.mu.Lock()
	o.puts = append(o.puts, ids)
	o.mu.Unlock()
	return o.MemoryOutbox.Put(ctx, recs)
}

func (o *pausedOutbox) Load(ctx context.Context) ([]deadletter.Record, error) {
	o.loads.Add(1)
	return o.MemoryOutbox.Load(ctx)
}

func (o *pausedOutbox) landed() [][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([][]string(nil), o.puts...)
}

// A dead-letter actor that restarts after a failed outbox save does not wait for its last
// save inside its mailbox: while that save is held, the next incarnation answers a status
// request (still loading), and it reads the outbox only once the save is in, so it loads the
// record the failed save was about.
func TestRestartSavesTheLastChangesOffTheMailbox(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		outbox := newPausedOutbox()
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: testkit.NewObjectStore(), Outbox: outbox}))
		root := h.System().Root
		h.Settle()
		release := outbox.holdPuts() // the restart's last save, which writes the failed change again
		outbox.fail.Store(true)
		root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Settle() // its save failed, the actor restarted, and its last save is held
		res, err := root.RequestFuture(pid, &deadletter.GetStatus{}, time.Second).Result()
		if err != nil {
			t.Fatalf("status request while the restart's last outbox save is held: %v; want an answer at once", err)
		}
		if st := res.(*deadletter.Status); !st.Loading {
			t.Errorf("status while the restart's last save is held = %+v, want the next incarnation loading", st)
		}
		if n := outbox.loads.Load(); n != 1 {
			t.Errorf("the outbox was read %d times while the restart's last save is held, want 1 (the first incarnation's)", n)
		}
		close(release)
		h.Settle()
		if n := outbox.loads.Load(); n != 2 {
			t.Errorf("the outbox was read %d times once the last save is in, want 2", n)
		}
		if st := dlStatus(t, h, pid); st.Loading || st.Waiting != 1 {
			t.Errorf("status once the last save is in = %+v, want e1 loaded and waiting", st)
		}
	})
}

// The next incarnation does not wait for ever for a last save that never returns: it reads
// the outbox once the save had its WriteTimeout.
func TestRestartLoadsAfterTheWriteTimeoutOfAStuckLastSave(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		outbox := newPausedOutbox()
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: testkit.NewObjectStore(), Outbox: outbox}))
		root := h.System().Root
		h.Settle()
		release := outbox.holdPuts()
		defer close(release)
		outbox.fail.Store(true)
		root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Advance(deadletter.DefaultWriteTimeout - time.Second)
		if n := outbox.loads.Load(); n != 1 {
			t.Errorf("the outbox was read %d times before the last save's WriteTimeout, want 1", n)
		}
		if st := dlStatus(t, h, pid); !st.Loading {
			t.Errorf("status before the last save's WriteTimeout = %+v, want loading", st)
		}
		h.Advance(time.Second)
		if n := outbox.loads.Load(); n != 2 {
			t.Errorf("the outbox was read %d times once the last save had its WriteTimeout, want 2", n)
		}
		if st := dlStatus(t, h, pid); st.Loading {
			t.Errorf("status once the last save had its WriteTimeout = %+v, want loaded", st)
		}
	})
}

// A stopping dead-letter actor terminates at once while an outbox save is held; its last
// save, of the changes queued behind the held one, lands after it, and Stops.Wait returns
// only then.
func TestStopTerminatesAtOnceAndSavesAfterTheSaveInFlight(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		outbox := newPausedOutbox()
		stops := new(deadletter.Stops)
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: testkit.NewObjectStore(), Outbox: outbox, Stops: stops}))
		root := h.System().Root
		h.Settle()
		release := outbox.holdPuts()
		root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e1", time.Now()), Target: dlTarget("sub-a", false)})
		h.Settle() // e1's save is held
		root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "e2", time.Now()), Target: dlTarget("sub-a", false)})
		h.Settle() // e2 queued behind it
		if err := root.StopFuture(pid).Wait(); err != nil {
			t.Fatalf("stopping the dead-letter actor with an outbox save held: %v; want it terminated at once", err)
		}
		waited := make(chan error, 1)
		go func() { waited <- stops.Wait(context.Background()) }()
		h.Settle()
		select {
		case err := <-waited:
			t.Fatalf("Stops.Wait returned (%v) with the outbox save held", err)
		default:
		}
		close(release)
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		got := outbox.landed()
		if len(got) != 2 || len(got[0]) != 1 || got[0][0] != "e1" || len(got[1]) != 1 || got[1][0] != "e2" {
			t.Errorf("outbox Puts landed %q, want e1's then the last save's, e2's", got)
		}
	})
}
