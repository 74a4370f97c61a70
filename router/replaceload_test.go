package router_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
)

// heldStateStore holds subscription "sub"'s state writes while hold is set, and records, in
// order, the writes it let through and the loads of that subscription's state.
type heldStateStore struct {
	store.Store
	mu      sync.Mutex
	hold    chan struct{} // non-nil: writes of "sub" wait until it is closed
	journal []string
}

func (s *heldStateStore) record(what string) {
	s.mu.Lock()
	s.journal = append(s.journal, what)
	s.mu.Unlock()
}

func (s *heldStateStore) UpdateSubscription(ctx context.Context, topic, sub string, u store.Update) error {
	s.mu.Lock()
	hold := s.hold
	s.mu.Unlock()
	if sub == "sub" && hold != nil {
		<-hold
		s.record("write")
	}
	return s.Store.UpdateSubscription(ctx, topic, sub, u)
}

func (s *heldStateStore) LoadSubscriptionIndex(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	if sub == "sub" {
		s.record("load")
	}
	return s.Store.LoadSubscriptionIndex(ctx, topic, sub)
}

// An update of a subscription replaces its actor; the new actor reads the subscription's
// stored state only once the old one's last state write is in the store. The new actor was
// started at once and loaded while that write was still on its way: it went on from an older
// cursor (events delivered again), and a retry parked by the old actor and written after the
// load was in the store but not in the new actor, not retried until the next restart.
func TestUpdatedSubscriptionLoadsAfterTheOldActorsLastWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := &heldStateStore{Store: store.NewMemory()}
		delivered := make(chan string, 16)
		r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{Store: st,
			Sinks: map[string]sinks.Sink{"hook": sinks.Func(func(_ context.Context, b *sinks.Batch) error {
				for _, ev := range b.Events {
					delivered <- ev.ID
				}
				return nil
			})}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		spec := router.SubscriptionSpec{Destination: router.SinkDestination("hook")}
		if err := r.CreateSubscription(ctx, "orders", "sub", spec); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		hold := make(chan struct{})
		st.mu.Lock()
		st.hold, st.journal = hold, nil
		st.mu.Unlock()
		if err := r.Publish(ctx, "orders", json.RawMessage(egEvent("e1"))); err != nil {
			t.Fatal(err)
		}
		if id := <-delivered; id != "e1" {
			t.Fatalf("delivered %s, want e1", id)
		}
		synctest.Wait() // its cursor's write is held in the store
		spec.Labels = []string{"updated"}
		updated := make(chan error, 1)
		go func() { updated <- r.CreateSubscription(ctx, "orders", "sub", spec) }()
		synctest.Wait()
		close(hold)
		if err := <-updated; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		st.mu.Lock()
		got := append([]string(nil), st.journal...)
		st.mu.Unlock()
		if len(got) < 2 || got[0] != "write" || got[len(got)-1] != "load" {
			t.Errorf("the store saw %q; want the old actor's last write before the new actor's load", got)
		}
		select {
		case id := <-delivered:
			t.Errorf("event %s delivered again after the update", id)
		default:
		}
	})
}
