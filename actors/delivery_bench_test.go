package actors_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

// countingStore counts the subscription state writes that reach the store.
type countingStore struct {
	store.Store
	updates atomic.Int64
}

func (c *countingStore) UpdateSubscription(ctx context.Context, topic, name string, u store.Update) error {
	c.updates.Add(1)
	return c.Store.UpdateSubscription(ctx, topic, name, u)
}

// BenchmarkSubscriptionDelivery is egrid's cost from the journal to the sink call: a
// subscription actor taking in events as the topic actor hands them over (64 per Deliver, as a
// group-committed publish does), encoding one request per event (batching off), running the
// attempt off the mailbox and settling it, with the state writer writing the cursor. The sink
// answers at once, so what is measured is egrid's own overhead per delivered event
// (allocations, encoding, goroutine hops, timers, state writes); one op is one event.
// stateWrites/event counts the store updates: with writer=off the actor writes each update
// itself, so it counts the updates the actor makes; with the state writer (as the router runs
// it) the writes that reach the in-memory or the disk store.
func BenchmarkSubscriptionDelivery(b *testing.B) {
	for _, tc := range []struct{ store, writer string }{
		{"memory", "on"}, {"memory", "off"}, {"disk", "on"},
	} {
		for _, batch := range []int{0, 100} {
			b.Run(fmt.Sprintf("store=%s/writer=%s/maxEventsPerBatch=%d", tc.store, tc.writer, batch), func(b *testing.B) {
				var st store.Store = store.NewMemory()
				if tc.store == "disk" {
					d, err := disk.Open(b.TempDir(), disk.Options{})
					if err != nil {
						b.Fatal(err)
					}
					defer d.Close()
					st = d
				}
				benchDelivery(b, st, tc.writer == "on", batch)
			})
		}
	}
}

func benchDelivery(b *testing.B, base store.Store, writer bool, maxEvents int) {
	ctx := context.Background()
	st := &countingStore{Store: base}
	const topic, sub = "orders", "billing"
	if err := st.PutTopic(ctx, topic, []byte("{}")); err != nil {
		b.Fatal(err)
	}
	if err := st.PutSubscription(ctx, topic, sub, []byte("{}")); err != nil {
		b.Fatal(err)
	}
	loaded, err := st.LoadSubscription(ctx, topic, sub) // its epoch, which the actor's writes carry
	if err != nil {
		b.Fatal(err)
	}
	policy := &retry.Policy{}
	var delivered atomic.Int64
	done := make(chan struct{}, 1)
	var want atomic.Int64
	sink := sinks.Func(func(_ context.Context, bt *sinks.Batch) error {
		if delivered.Add(int64(len(bt.Events))) == want.Load() {
			done <- struct{}{}
		}
		return nil
	})
	var w *actors.StateWriter
	if writer {
		w = actors.NewStateWriter(st, topic)
		defer w.Close()
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	cfg := &actors.SubscriptionConfig{
		SubscriptionShared: &actors.SubscriptionShared{Topic: topic, TopicID: "/topics/orders", InputSchema: schemas.EventGrid, Store: st, Writer: w, Metrics: new(metrics.Set), MaxInFlight: 64},
		Name:               sub, DeliverySchema: schemas.EventGrid, Policy: policy, Sink: sink,
		MaxEventsPerBatch: maxEvents, OnAttempt: func(*actors.AttemptRecord) {},
	}
	pid := sys.Root.Spawn(actors.SubscriptionProps(cfg))
	defer sys.Root.Stop(pid)

	// The events, parsed once as ingress does, appended to the journal in chunks of 64.
	const chunk = 64
	body := []byte(`[` + fmt.Sprintf(`{"id":"e","subject":"/orders/1","eventType":"Orders.Created","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1.0","data":{"pad":"%0820d"}}`, 0) + `]`)
	evs, err := schemas.DecodeEventGrid(body, "/topics/orders", schemas.ClassicLimits)
	if err != nil {
		b.Fatal(err)
	}
	ev := evs[0]
	events := make([]*schemas.Event, chunk)
	for i := range events {
		events[i] = ev
	}
	// The journal is written before the clock starts: its cost is ingest's, not delivery's.
	now := time.Now()
	var delivers []*actors.Deliver
	for sent := 0; sent < b.N; sent += chunk {
		n := min(chunk, b.N-sent)
		last, err := st.Append(ctx, topic, now, events[:n])
		if err != nil {
			b.Fatal(err)
		}
		entries := make([]store.Entry, n)
		for i := range entries {
			entries[i] = store.Entry{Seq: last - uint64(n-1-i), PublishTime: now, Event: ev}
		}
		delivers = append(delivers, &actors.Deliver{Entries: entries, Through: last})
	}
	before := st.updates.Load()
	want.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	for _, d := range delivers {
		sys.Root.Send(pid, d)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("delivered %d of %d events in a minute", delivered.Load(), b.N)
	}
	b.StopTimer()
	if w != nil {
		if err := w.Flush(sub, loaded.Epoch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(st.updates.Load()-before)/float64(b.N), "stateWrites/event")
}
