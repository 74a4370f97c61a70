package router

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/schemas"
)

// heldIDOutbox is an outbox in memory (not a *MemoryOutbox: the actor counts nothing lost when
// it stops) whose NewID, which the dead-letter actor calls in its turn, waits while hold is
// set until release is closed, telling entered first.
type heldIDOutbox struct {
	*deadletter.MemoryOutbox
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (o *heldIDOutbox) NewID() uint64 {
	if o.hold.CompareAndSwap(true, false) {
		close(o.entered)
		<-o.release
	}
	return o.MemoryOutbox.NewID()
}

// A dead-letter actor whose turn holds its mailbox past protoactor's 10 s StopFuture is still
// waited for: stopDeadLetterActor returns only once the actor's stop work has saved its last
// outbox changes — here the record of the Enqueue whose turn was held — not when the
// StopFuture gives up, which found no stop work begun and let the store close under it.
func TestStopDeadLetterActorWaitsForATurnHeldPastTheStopFuture(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(slog.DiscardHandler)
		}))
		defer sys.Shutdown()
		r := &Router{system: sys, log: slog.New(slog.DiscardHandler)}
		outbox := &heldIDOutbox{MemoryOutbox: deadletter.NewMemoryOutbox(), entered: make(chan struct{}), release: make(chan struct{})}
		d := &deadLetterRuntime{}
		d.pid = sys.Root.Spawn(deadletter.Props(&deadletter.Config{Store: noObjects{}, Outbox: outbox, Stops: &d.stops}))
		synctest.Wait() // the outbox is loaded

		outbox.hold.Store(true)
		sys.Root.Send(d.pid, &deadletter.Enqueue{Letter: testLetter(t, "e1"), Target: deadletter.Target{Bucket: "deadletters", Prefix: deadletter.Prefix("", "orders", "s")}})
		<-outbox.entered // the Enqueue's turn holds the mailbox

		stopped := make(chan struct{})
		go func() {
			r.stopDeadLetterActor(d)
			close(stopped)
		}()
		<-time.After(time.Minute) // virtual time: well past the StopFuture's 10 s
		synctest.Wait()
		select {
		case <-stopped:
			t.Error("stopDeadLetterActor returned while a turn of the actor still held its mailbox: its stop work had not begun")
			// The actor's late messages then reach protoactor's dead letters: let the log
			// throttle, a ticker, end before the bubble does.
			defer func() { <-time.After(time.Minute) }()
		default:
		}
		close(outbox.release)
		<-stopped
		synctest.Wait() // on a stop that returned early, the stop work runs after it
		recs, _ := outbox.Load(context.Background())
		if len(recs) != 1 || recs[0].EventID != "e1" {
			t.Errorf("outbox once stopDeadLetterActor returned = %+v, want e1, which the held turn enqueued and the stop work saved", recs)
		}
	})
}

// A dead-letter actor stopped by stopDeadLetterActor first handles what was sent to it before:
// a replay's subscription actor hands it the dead letters its last state write settled (which
// it is to put in the outbox) just before the router stops it. A stop (a system message) went
// ahead of them, and the actor stopped without them. Here the second of two Enqueues waits in
// the mailbox behind the first's held turn when the stop is asked for.
func TestStopDeadLetterActorHandlesWhatWasSentBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(slog.DiscardHandler)
		}))
		defer sys.Shutdown()
		r := &Router{system: sys, log: slog.New(slog.DiscardHandler)}
		outbox := &heldIDOutbox{MemoryOutbox: deadletter.NewMemoryOutbox(), entered: make(chan struct{}), release: make(chan struct{})}
		d := &deadLetterRuntime{}
		d.pid = sys.Root.Spawn(deadletter.Props(&deadletter.Config{Store: noObjects{}, Outbox: outbox, Stops: &d.stops}))
		synctest.Wait() // the outbox is loaded

		outbox.hold.Store(true)
		for _, id := range []string{"e1", "e2"} {
			sys.Root.Send(d.pid, &deadletter.Enqueue{Letter: testLetter(t, id), Target: deadletter.Target{Bucket: "deadletters", Prefix: deadletter.Prefix("", "orders", "s")}})
		}
		<-outbox.entered // e1's turn holds the mailbox; e2 waits behind it
		stopped := make(chan struct{})
		go func() {
			r.stopDeadLetterActor(d)
			close(stopped)
		}()
		synctest.Wait() // the stop is asked for
		close(outbox.release)
		<-stopped
		recs, _ := outbox.Load(context.Background())
		var ids []string
		for _, rec := range recs {
			ids = append(ids, rec.EventID)
		}
		if len(ids) != 2 {
			t.Errorf("outbox once stopDeadLetterActor returned holds %q, want e1 and e2: both were sent before the stop", ids)
		}
		synctest.Wait()
	})
}

// testLetter is a dead letter of event id of orders/s.
func testLetter(t *testing.T, id string) *actors.DeadLetter {
	t.Helper()
	evs, err := schemas.DecodeEventGrid([]byte(`[{"id":"`+id+`","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}]`), "/topics/orders", schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	return &actors.DeadLetter{Topic: "orders", Subscription: "s", Event: evs[0], Reason: schemas.MaxDeliveryAttemptsExceeded, LastAttemptTime: time.Now()}
}
