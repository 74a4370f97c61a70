package actors

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// hungWrites is a store whose subscription state writes do not return until the test
// releases them, as on a disk that stopped answering. It records when each write landed and
// when each load of the subscription's state read it.
type hungWrites struct {
	store.Store
	entered chan struct{} // closed at the first write
	release chan struct{}

	mu     sync.Mutex
	first  bool
	events []stored // writes landed and loads, in order
}

type stored struct {
	what string // "write" or "load"
	at   time.Time
}

func newHungWrites(st store.Store) *hungWrites {
	return &hungWrites{Store: st, entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *hungWrites) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	h.mu.Lock()
	if !h.first {
		h.first = true
		close(h.entered)
	}
	h.mu.Unlock()
	<-h.release
	err := h.Store.UpdateSubscription(ctx, topic, sub, u)
	h.record("write")
	return err
}

func (h *hungWrites) LoadSubscriptionIndex(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	h.record("load")
	return h.Store.LoadSubscriptionIndex(ctx, topic, sub)
}

func (h *hungWrites) LoadSubscription(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	h.record("load")
	return h.Store.LoadSubscription(ctx, topic, sub)
}

func (h *hungWrites) record(what string) {
	h.mu.Lock()
	h.events = append(h.events, stored{what, time.Now()})
	h.mu.Unlock()
}

func (h *hungWrites) seen() []stored {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]stored(nil), h.events...)
}

// A stopping subscription actor terminates at once, its last state write still held in the
// store: the waits for its sink calls and its last write run off its mailbox. Its Stopping
// turn waited for the write (up to its stop grace) inside Receive, holding the actor's
// mailbox and everyone waiting for its Terminated. The write, once it lands, is still
// written, and the stop work ends then. A queue subscription (pull delivery), whose receipts
// are state writes, stops the same way.
func TestStopDoesNotWaitForAHungStateWrite(t *testing.T) {
	for _, tt := range []struct {
		name  string
		queue bool
		write func(root *actor.RootContext, pid *actor.PID) // makes the actor write its state
	}{
		{"push", false, func(*actor.RootContext, *actor.PID) {}},
		{"queue", true, func(root *actor.RootContext, pid *actor.PID) {
			root.RequestFuture(pid, &ReceiveEvents{Subscription: "audit", ID: 1, MaxEvents: 1, MaxWait: time.Second}, time.Minute)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { testStopWithAHungWrite(t, tt.queue, tt.write) })
	}
}

func testStopWithAHungWrite(t *testing.T, queue bool, write func(*actor.RootContext, *actor.PID)) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := ordersAudit(t)
		h := newHungWrites(mem)
		system := actor.NewActorSystem()
		defer system.Shutdown()
		const grace = 3 * time.Second
		stops := new(Stops)
		cfg := &SubscriptionConfig{
			SubscriptionShared: &SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: h, Metrics: new(metrics.Set), StopGrace: grace, Stops: stops},
			Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true},
			Sink: sinks.Func(func(context.Context, *sinks.Batch) error { return nil }),
		}
		props := SubscriptionProps
		if queue {
			cfg.Queue, cfg.Sink = &QueueConfig{}, nil
			props = QueueProps
		}
		pid := system.Root.Spawn(props(cfg))
		ev := &schemas.Event{ID: "e1", Raw: []byte(`{"id":"e1"}`)}
		seq, err := mem.Append(ctx, "orders", time.Now(), []*schemas.Event{ev})
		if err != nil {
			t.Fatal(err)
		}
		system.Root.Send(pid, &Deliver{Entries: []store.Entry{{Seq: seq, PublishTime: time.Now(), Event: ev}}, Through: seq, From: seq})
		write(system.Root, pid)
		synctest.Wait()
		select {
		case <-h.entered:
		default:
			t.Fatal("the actor wrote no state")
		}
		start := time.Now()
		if err := system.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("the actor terminated after %v with its state write held, want at once", took)
		}
		for _, e := range h.seen() {
			if e.what == "write" {
				t.Fatal("the held write landed before the release")
			}
		}
		ended := make(chan error, 1)
		go func() { ended <- stops.Wait(ctx) }()
		synctest.Wait()
		select {
		case <-ended:
			t.Fatal("the stop work ended with the last write still held")
		default:
		}
		close(h.release)
		synctest.Wait() // the write lands after all, and the stop work ends with it
		if err := <-ended; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("the stop work ended %v after the stop, want when the write was released (at once)", took)
		}
		st, err := mem.LoadSubscription(ctx, "orders", "audit")
		if err != nil {
			t.Fatal(err)
		}
		if st.Cursor == 0 && len(st.Parked) == 0 {
			t.Errorf("nothing stored once the hung write returned")
		}
	})
}

// A subscription actor restarted after a panic loads its state only once the last write of
// the incarnation before has landed — and no longer waits for it inside Receive: the
// restarting actor answers at once (loading), where its Restarting turn held the mailbox
// until the write returned. When the write does not return, the load goes ahead once the
// stop grace has passed, as before.
func TestRestartLoadsAfterTheLastWriteOfTheIncarnationBefore(t *testing.T) {
	const (
		backoff = time.Second
		grace   = 10 * time.Second
		held    = 2 * time.Second // how long after the restart the write is released
	)
	for _, tt := range []struct {
		name     string
		release  bool          // the held write is released `held` after the restart
		wantLoad time.Duration // the second load, after the panic
		wantAll  []string
	}{
		{"write released", true, backoff + held, []string{"load", "write", "load"}},
		{"write hung", false, backoff + grace, []string{"load", "load"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := ordersAudit(t)
				ev := &schemas.Event{ID: "e1", Raw: []byte(`{"id":"e1"}`)}
				if _, err := mem.Append(context.Background(), "orders", time.Now(), []*schemas.Event{ev}); err != nil {
					t.Fatal(err)
				}
				h := newHungWrites(mem)
				system := actor.NewActorSystem()
				defer system.Shutdown()
				w := NewStateWriter(h, "orders")
				var calls sync.Mutex
				n := 0
				sink := sinks.Func(func(context.Context, *sinks.Batch) error {
					calls.Lock()
					n++
					first := n == 1
					calls.Unlock()
					if first {
						panic("sink bug") // the attempt is written (held), then the actor restarts
					}
					return nil
				})
				topic := system.Root.Spawn(TopicProps(&TopicConfig{Name: "orders", Metrics: new(metrics.Set), RestartBackoff: backoff, Subscriptions: []*SubscriptionConfig{{
					SubscriptionShared: &SubscriptionShared{Topic: "orders", TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: h, Writer: w, Metrics: new(metrics.Set), StopGrace: grace},
					Name:               "audit", DeliverySchema: schemas.EventGrid, Policy: &retry.Policy{NoJitter: true}, Sink: sink,
				}}}))
				system.Root.Send(topic, &JournalAt{Last: 1})
				synctest.Wait()
				start := time.Now()
				select {
				case <-h.entered:
				default:
					t.Fatal("the panicking attempt wrote no state")
				}
				<-time.After(backoff) // the restart is due
				synctest.Wait()
				res, err := system.Root.RequestFuture(topic, &GetStatus{Subscription: "audit"}, 5*time.Second).Result()
				if err != nil {
					t.Fatalf("no answer from the restarting actor while the last write of the one before is held: %v", err)
				}
				if st, ok := res.(*Status); !ok || !st.Loading {
					t.Errorf("status of the restarted actor = %+v, want it loading (waiting for the last write)", res)
				}
				restarted := start.Add(backoff)
				if tt.release {
					<-time.After(held - time.Since(restarted)) // the status waited for the load a moment
					close(h.release)
				} else {
					<-time.After(grace - time.Since(restarted))
				}
				synctest.Wait()
				var loads []time.Duration
				var all []string
				for _, e := range h.seen() {
					all = append(all, e.what)
					if e.what == "load" {
						loads = append(loads, e.at.Sub(start))
					}
				}
				if len(loads) != 2 || loads[1] != tt.wantLoad {
					t.Errorf("loads at %v after the panic, want the second at %v", loads, tt.wantLoad)
				}
				if len(all) != len(tt.wantAll) {
					t.Errorf("the store saw %q, want %q", all, tt.wantAll)
				} else {
					for i := range all {
						if all[i] != tt.wantAll[i] {
							t.Errorf("the store saw %q, want %q", all, tt.wantAll)
							break
						}
					}
				}
				if !tt.release {
					close(h.release)
				}
				if err := system.Root.StopFuture(topic).Wait(); err != nil {
					t.Fatal(err)
				}
				_ = w.Close()
				synctest.Wait()
			})
		})
	}
}
