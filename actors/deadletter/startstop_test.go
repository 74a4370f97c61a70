package deadletter_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/testkit"
)

// heldOutbox is an outbox whose Load waits for load (or its context) and whose Put, when
// stuck is set, does not return until stuck is closed, whatever its context.
type heldOutbox struct {
	deadletter.Outbox
	load  chan struct{}
	stuck chan struct{} // Put blocks while this is open and non-nil
}

func (o *heldOutbox) Load(ctx context.Context) ([]deadletter.Record, error) {
	select {
	case <-o.load:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return o.Outbox.Load(ctx)
}

func (o *heldOutbox) Put(ctx context.Context, recs []deadletter.Record) error {
	if o.stuck != nil {
		<-o.stuck
	}
	return o.Outbox.Put(ctx, recs)
}

// The dead-letter actor reads its outbox off its mailbox: while the read is held up it stops
// when asked, a dead letter that arrives meanwhile is put in the outbox at once and waits its
// delay once the outbox is in (TestWhatArrivesWhileTheOutboxLoadsIsBounded), and a
// status request is answered at once, saying the outbox is loading and since when
// (TestDeadLetterStatusWhileLoadingIsAnsweredAtOnce); after the load the status is the real
// one.
func TestDeadLetterOutboxLoadsOffTheMailbox(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		mem := deadletter.NewMemoryOutbox()
		outbox := &heldOutbox{Outbox: durableOutbox{mem}, load: make(chan struct{})}
		cfg := &deadletter.Config{Store: testkit.NewObjectStore(), Outbox: outbox}

		pid := h.Spawn(deadletter.Props(cfg))
		h.Settle()
		if err := h.System().Root.StopFuture(pid).Wait(); err != nil {
			t.Fatalf("stopping while the outbox load is held up: %v", err)
		}

		started := time.Now()
		pid = h.Spawn(deadletter.Props(cfg))
		h.Settle()
		h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "early", time.Now()), Target: dlTarget("sub-a", false)})
		if st := dlStatus(t, h, pid); *st != (deadletter.Status{Loading: true, LoadingSince: started}) {
			t.Errorf("status asked while loading = %+v, want loading since the actor started, no counts", st)
		}
		h.Settle() // the put runs off the mailbox
		if recs, _ := mem.Load(context.Background()); len(recs) != 1 || recs[0].Letter.Event.ID != "early" {
			t.Errorf("outbox before the load finished: %+v, want the early dead letter, put at once", recs)
		}
		close(outbox.load)
		h.Settle()
		if st := dlStatus(t, h, pid); st.Loading || st.Waiting != 1 {
			t.Errorf("status after the load = %+v, want the dead letter that arrived while loading waiting", st)
		}
		if recs, _ := mem.Load(context.Background()); len(recs) != 1 || recs[0].Letter.Event.ID != "early" {
			t.Errorf("outbox after the load: %+v, want the early dead letter", recs)
		}
	})
}

// Status requests that reach the dead-letter actor while its outbox load hangs are answered
// at once, each, saying it is loading; they were kept with the messages for after the load, so
// `egrid deadletter status` waited for a store that had stopped answering, and each poll grew
// the list.
func TestDeadLetterStatusWhileLoadingIsAnsweredAtOnce(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		outbox := &heldOutbox{Outbox: durableOutbox{deadletter.NewMemoryOutbox()}, load: make(chan struct{})}
		defer close(outbox.load)
		started := time.Now()
		pid := h.Spawn(deadletter.Props(&deadletter.Config{Store: testkit.NewObjectStore(), Outbox: outbox}))
		h.Settle()
		const n = 1000
		futures := make([]*actor.Future, n)
		for i := range futures {
			futures[i] = h.System().Root.RequestFuture(pid, &deadletter.GetStatus{}, time.Minute)
		}
		h.Settle()
		for i, f := range futures {
			res, err := f.Result()
			if err != nil {
				t.Fatalf("status request %d of %d while the outbox load hangs: %v; want an answer at once", i, n, err)
			}
			if st := res.(*deadletter.Status); !st.Loading || !st.LoadingSince.Equal(started) {
				t.Fatalf("status while loading = %+v, want loading since %v", st, started)
			}
		}
		if waited := time.Since(started); waited != 0 {
			t.Errorf("the answers came %v after the requests, want at once", waited)
		}
	})
}

// A stopping dead-letter actor terminates at once while its outbox save is stuck, and its
// stop work waits for that save at most WriteTimeout: an outbox that never answers cannot
// hold the router's shutdown, which waits for the stop work (Stops.Wait).
func TestDeadLetterStopBoundsTheOutboxSave(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		load := make(chan struct{})
		close(load)
		outbox := &heldOutbox{Outbox: durableOutbox{deadletter.NewMemoryOutbox()}, load: load, stuck: make(chan struct{})}
		stops := new(deadletter.Stops)
		cfg := &deadletter.Config{Store: testkit.NewObjectStore(), Outbox: outbox, WriteTimeout: 10 * time.Second, Stops: stops}
		pid := h.Spawn(deadletter.Props(cfg))
		h.System().Root.Send(pid, &deadletter.Enqueue{Letter: dlLetter(t, "sub-a", "stuck", time.Now()), Target: dlTarget("sub-a", false)})
		h.Settle() // its save is stuck
		start := time.Now()
		if err := h.System().Root.StopFuture(pid).Wait(); err != nil {
			t.Fatalf("stopping with the outbox save stuck: %v; want the actor terminated at once", err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("the actor terminated %v after the stop, want at once", waited)
		}
		stopped := make(chan struct{})
		go func() {
			_ = stops.Wait(context.Background())
			close(stopped)
		}()
		h.Advance(10*time.Second - time.Millisecond)
		select {
		case <-stopped:
			t.Fatal("the stop work ended before WriteTimeout while the save was stuck")
		default:
		}
		h.Advance(time.Millisecond)
		select {
		case <-stopped:
		default:
			t.Fatal("the stop work still waits for the stuck outbox save after WriteTimeout")
		}
		if waited := time.Since(start); waited != 10*time.Second {
			t.Errorf("the stop work waited %v, want WriteTimeout (10 s)", waited)
		}
		close(outbox.stuck) // the abandoned save ends; its result is not sent to the stopped actor
	})
}
