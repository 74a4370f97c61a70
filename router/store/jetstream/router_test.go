package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store/jetstream"
	"github.com/egridio/egrid/sinks"
)

// A router embeds the JetStream store: published events reach a Go sink, and a router
// started again on a new store with the same prefix has the topic and subscription back and
// delivers what is published next, nothing twice.
func TestRouterWithJetStreamStore(t *testing.T) {
	ctx := t.Context()
	nc, prefix := connect(t), newPrefix(t)
	got := make(chan string, 100)
	records := make(chan *router.AttemptRecord, 100)
	sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		for _, ev := range b.Events {
			got <- ev.ID
		}
		return nil
	})
	start := func() (*router.Router, *jetstream.Store) {
		t.Helper()
		st := open(t, nc, prefix)
		r, err := router.New(router.Config{}, router.Deps{Store: st, Sinks: map[string]sinks.Sink{"hook": sink},
			OnAttempt: func(rec *router.AttemptRecord) { records <- rec }, Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatalf("router.New: %v", err)
		}
		return r, st
	}
	stop := func(r *router.Router, st *jetstream.Store) {
		t.Helper()
		if err := r.Close(ctx); err != nil {
			t.Fatalf("router Close: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Fatalf("store Close: %v", err)
		}
	}
	await := func(want ...string) {
		t.Helper()
		seen := map[string]int{}
		timeout := time.After(30 * time.Second)
		for range want {
			select {
			case id := <-got:
				seen[id]++
			case <-timeout:
				t.Fatalf("delivered %v within 30 s, want %v", seen, want)
			}
		}
		for _, id := range want {
			if seen[id] != 1 {
				t.Errorf("event %s delivered %d times, want once (all: %v)", id, seen[id], seen)
			}
		}
	}
	publish := func(r *router.Router, ids ...string) {
		t.Helper()
		var evs []any
		for _, id := range ids {
			evs = append(evs, json.RawMessage(fmt.Sprintf(
				`{"id":%q,"subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{"n":1},"dataVersion":"1.0"}`, id)))
		}
		if err := r.Publish(ctx, "orders", evs...); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}

	r, st := start()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if err := r.CreateSubscription(ctx, "orders", "billing", router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	publish(r, "e1", "e2", "e3")
	await("e1", "e2", "e3")
	// The attempt records come from the actor turn that also saves the outcome: once the
	// three events are recorded, Close finds the cursor past them to save. (Events the sink
	// got but the router did not record yet would be delivered again: at least once.)
	timeout := time.After(30 * time.Second)
	for recorded := 0; recorded < 3; {
		select {
		case rec := <-records:
			recorded += len(rec.EventIDs)
		case <-timeout:
			t.Fatalf("%d attempt records within 30 s, want 3", recorded)
		}
	}
	stop(r, st)
	check := open(t, nc, prefix)
	if state, err := check.LoadSubscription(ctx, "orders", "billing"); err != nil || state.Cursor != 3 {
		t.Errorf("stored state after Close = %+v, %v; want cursor 3", state, err)
	}
	_ = check.Close()

	r, st = start()
	publish(r, "e4")
	await("e4")
	if last, err := st.LastSeq(ctx, "orders"); err != nil || last != 4 {
		t.Errorf("journal LastSeq = %d, %v; want 4", last, err)
	}
	stop(r, st)
	if n := len(got); n > 0 {
		t.Errorf("%d more deliveries after every event was delivered once (the cursor was not kept)", n)
	}
}

// A router starts on a JetStream store whose meta bucket holds a topic definition and a
// subscription record that do not decode (written by something else) and serves the rest:
// the listings leave them out, where they failed the router's start.
func TestRouterStartsPastDamagedDefinitions(t *testing.T) {
	ctx := t.Context()
	nc, prefix := connect(t), newPrefix(t)
	got := make(chan string, 100)
	sink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		for _, ev := range b.Events {
			got <- ev.ID
		}
		return nil
	})
	start := func() (*router.Router, *jetstream.Store) {
		t.Helper()
		st := open(t, nc, prefix)
		r, err := router.New(router.Config{}, router.Deps{Store: st, Sinks: map[string]sinks.Sink{"hook": sink},
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatalf("router.New: %v", err)
		}
		return r, st
	}
	r, st := start()
	for _, topic := range []string{"orders", "broken"} {
		if _, err := r.CreateTopic(ctx, topic, router.TopicSpec{}); err != nil {
			t.Fatalf("CreateTopic: %v", err)
		}
	}
	for _, sub := range []string{"billing", "lost"} {
		if err := r.CreateSubscription(ctx, "orders", sub, router.SubscriptionSpec{Destination: router.SinkDestination("hook")}); err != nil {
			t.Fatalf("CreateSubscription: %v", err)
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, prefix+"_meta")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"topic.broken", "sub.orders.lost"} {
		if _, err := kv.Put(ctx, key, []byte("not egrid's")); err != nil {
			t.Fatal(err)
		}
	}

	r, st = start()
	defer func() { _ = r.Close(ctx); _ = st.Close() }()
	if err := r.Publish(ctx, "orders", json.RawMessage(
		`{"id":"e1","subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{"n":1},"dataVersion":"1.0"}`)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	select {
	case id := <-got:
		if id != "e1" {
			t.Errorf("delivered %s, want e1", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing delivered within 30 s to the subscription whose record is intact")
	}
	if _, err := r.CreateTopic(ctx, "broken", router.TopicSpec{}); !errors.Is(err, router.ErrDefinitionDamaged) {
		t.Errorf("CreateTopic over the damaged definition = %v, want ErrDefinitionDamaged", err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
