package router_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/sas"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
)

// TestKeyRotationDuringPublishes rotates a topic's second key through the admin API while 64
// publishers publish with its first key: every publish is accepted, and the race detector sees
// the topic's definition replaced whole, never written under a reader.
func TestKeyRotationDuringPublishes(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	spec, err := r.CreateTopic(t.Context(), "orders", router.TopicSpec{})
	if err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(r)

	const publishers, each, rotations = 64, 10, 40
	var wg sync.WaitGroup
	failures := make(chan string, publishers*each)
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				body := `[{"id":"` + fmt.Sprint(p, "-", i) + `","eventType":"t","subject":"s","eventTime":"2024-01-01T00:00:00Z","dataVersion":"1","data":{}}]`
				req := httptest.NewRequest(http.MethodPost, "/topics/orders/api/events", strings.NewReader(body))
				req.Host = "localhost" // --insecure-dev lets in requests without credentials from this machine only (router/devguard)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("aeg-sas-key", spec.Key1)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					failures <- fmt.Sprintf("publish %d-%d: %d %s", p, i, rec.Code, rec.Body)
				}
			}
		})
	}
	wg.Go(func() {
		for range rotations {
			key2, err := sas.NewKey()
			if err != nil {
				failures <- err.Error()
				return
			}
			body := `{"properties":{"key1":"` + spec.Key1 + `","key2":"` + key2 + `"}}`
			req := httptest.NewRequest(http.MethodPut, "/admin/topics/orders", strings.NewReader(body))
			req.Host = "localhost" // --insecure-dev lets in requests without credentials from this machine only (router/devguard)
			req.Header.Set("Authorization", "Bearer tok")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				failures <- fmt.Sprintf("rotating key2: %d %s", rec.Code, rec.Body)
			}
		}
	})
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	got, err := r.Topic("orders")
	if err != nil || got.Key1 != spec.Key1 || got.Key2 == spec.Key2 {
		t.Fatalf("after the rotations: key1 kept %v, key2 rotated %v, err %v", got.Key1 == spec.Key1, got.Key2 != spec.Key2, err)
	}
}

// gatedStore blocks the definition writes of one topic (PutTopic, PutSubscription,
// DeleteSubscription, DeleteTopic) until the test opens the gate.
type gatedStore struct {
	store.Store
	topic   string
	mu      sync.Mutex
	gate    chan struct{} // nil: writes pass
	entered chan string   // the write that is waiting at the gate
}

func (s *gatedStore) close(topic string) (entered <-chan string, open func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topic, s.gate, s.entered = topic, make(chan struct{}), make(chan string, 1)
	gate := s.gate
	var once sync.Once
	return s.entered, func() {
		once.Do(func() {
			s.mu.Lock()
			s.gate = nil
			s.mu.Unlock()
			close(gate)
		})
	}
}

func (s *gatedStore) wait(topic, op string) {
	s.mu.Lock()
	gate, entered := s.gate, s.entered
	s.mu.Unlock()
	if gate == nil || !strings.EqualFold(topic, s.topic) {
		return
	}
	entered <- op
	<-gate
}

func (s *gatedStore) PutTopic(ctx context.Context, name string, spec []byte) error {
	s.wait(name, "PutTopic")
	return s.Store.PutTopic(ctx, name, spec)
}

func (s *gatedStore) CreateTopic(ctx context.Context, name string, spec []byte) error {
	s.wait(name, "CreateTopic")
	return s.Store.CreateTopic(ctx, name, spec)
}

func (s *gatedStore) DeleteTopic(ctx context.Context, name string) error {
	s.wait(name, "DeleteTopic")
	return s.Store.DeleteTopic(ctx, name)
}

func (s *gatedStore) PutSubscription(ctx context.Context, topic, name string, spec []byte) error {
	s.wait(topic, "PutSubscription")
	return s.Store.PutSubscription(ctx, topic, name, spec)
}

func (s *gatedStore) CreateSubscription(ctx context.Context, topic, name string, spec []byte) error {
	s.wait(topic, "CreateSubscription")
	return s.Store.CreateSubscription(ctx, topic, name, spec)
}

func (s *gatedStore) DeleteSubscription(ctx context.Context, topic, name string) error {
	s.wait(topic, "DeleteSubscription")
	return s.Store.DeleteSubscription(ctx, topic, name)
}

func gatedRouter(t *testing.T) (*router.Router, *gatedStore) {
	t.Helper()
	gs := &gatedStore{Store: store.NewMemory()}
	t.Cleanup(func() { _ = gs.Store.Close() })
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{
		Store: gs, Sinks: map[string]sinks.Sink{"null": sinks.Func(func(context.Context, *sinks.Batch) error { return nil })},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	for _, name := range []string{"topic-a", "topic-b"} {
		if _, err := r.CreateTopic(t.Context(), name, router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.CreateSubscription(t.Context(), "topic-b", "sub-1", router.SubscriptionSpec{Destination: router.SinkDestination("null")}); err != nil {
		t.Fatal(err)
	}
	return r, gs
}

func egEventAt(id string) map[string]any {
	return map[string]any{"id": id, "eventType": "t", "subject": "s", "eventTime": "2024-01-01T00:00:00Z", "dataVersion": "1", "data": map[string]any{}}
}

// TestAdminWriteDoesNotStallOtherTopics holds each kind of admin write of topic B in its store
// write and checks that, meanwhile, a publish to topic A, the creation of topic C and a read
// complete; then it lets B's write finish.
func TestAdminWriteDoesNotStallOtherTopics(t *testing.T) {
	sub := router.SubscriptionSpec{Destination: router.SinkDestination("null")}
	for _, tt := range []struct {
		name string
		op   string // the store write the admin call blocks in
		call func(ctx context.Context, r *router.Router) error
	}{
		{"update topic", "PutTopic", func(ctx context.Context, r *router.Router) error {
			_, err := r.CreateTopic(ctx, "topic-b", router.TopicSpec{})
			return err
		}},
		{"create subscription", "CreateSubscription", func(ctx context.Context, r *router.Router) error {
			return r.CreateSubscription(ctx, "topic-b", "sub-2", sub)
		}},
		{"update subscription", "PutSubscription", func(ctx context.Context, r *router.Router) error {
			return r.CreateSubscription(ctx, "topic-b", "sub-1", sub)
		}},
		{"delete subscription", "DeleteSubscription", func(ctx context.Context, r *router.Router) error {
			return r.DeleteSubscription(ctx, "topic-b", "sub-1")
		}},
		{"delete topic", "DeleteTopic", func(ctx context.Context, r *router.Router) error {
			return r.DeleteTopic(ctx, "topic-b")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, gs := gatedRouter(t)
			entered, open := gs.close("topic-b")
			t.Cleanup(open) // before the router's Close, also when the test fails
			adminDone := make(chan error, 1)
			go func() { adminDone <- tt.call(context.Background(), r) }()
			deadline := time.After(30 * time.Second) // a bound for a broken build, not a timing
			select {
			case op := <-entered:
				if op != tt.op {
					t.Fatalf("the admin call blocked in %s, want %s", op, tt.op)
				}
			case err := <-adminDone:
				t.Fatalf("the admin call returned (%v) without writing the store", err)
			case <-deadline:
				t.Fatal("the admin call never reached the store")
			}

			others := make(chan error, 3)
			go func() { others <- r.Publish(context.Background(), "topic-a", egEventAt("a-1")) }()
			go func() {
				_, err := r.CreateTopic(context.Background(), "topic-c", router.TopicSpec{})
				others <- err
			}()
			go func() { _, err := r.Subscriptions("topic-a"); others <- err }()
			for range 3 {
				select {
				case err := <-others:
					if err != nil {
						t.Errorf("while topic B's %s was blocked: %v", tt.op, err)
					}
				case <-adminDone:
					t.Fatal("the admin call of topic B finished while its store write was held")
				case <-deadline:
					t.Fatalf("while topic B's %s was blocked, a publish to topic A, the creation of topic C or a read did not complete", tt.op)
				}
			}
			select {
			case <-adminDone:
				t.Fatal("the admin call of topic B finished while its store write was held")
			default:
			}
			open()
			select {
			case err := <-adminDone:
				if err != nil {
					t.Fatalf("the admin call after its store write was let through: %v", err)
				}
			case <-deadline:
				t.Fatal("the admin call did not finish once its store write was let through")
			}
		})
	}
}

// TestAdminLoopWhilePublishing creates, updates and deletes topic B and its subscriptions in a
// loop while publishers publish to topic A; every publish is accepted (and -race is clean).
func TestAdminLoopWhilePublishing(t *testing.T) {
	r, _ := gatedRouter(t)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for p := range 8 {
		wg.Go(func() {
			for i := range 40 {
				if err := r.Publish(context.Background(), "topic-a", egEventAt(fmt.Sprint(p, "-", i))); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Go(func() {
		ctx := context.Background()
		sub := router.SubscriptionSpec{Destination: router.SinkDestination("null")}
		for i := range 20 {
			steps := []func() error{
				func() error { _, err := r.CreateTopic(ctx, "topic-b", router.TopicSpec{}); return err },
				func() error { return r.CreateSubscription(ctx, "topic-b", "sub-1", sub) },
				func() error { return r.CreateSubscription(ctx, "topic-b", "sub-2", sub) },
				func() error { return r.Publish(ctx, "topic-b", egEventAt(fmt.Sprint("b-", i))) },
				func() error { return r.DeleteSubscription(ctx, "topic-b", "sub-2") },
				func() error { return r.DeleteTopic(ctx, "topic-b") },
			}
			for _, step := range steps {
				if err := step(); err != nil {
					errs <- fmt.Errorf("round %d: %w", i, err)
				}
			}
		}
	})
	// Reads of topic B run against the loop; they see it or get a not-found.
	wg.Go(func() {
		for range 20 {
			_, _ = r.Topic("topic-b")
			_, _ = r.Subscriptions("topic-b")
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if slices.Contains(r.Topics(), "topic-b") {
		t.Errorf("topic-b still listed after the last delete")
	}
}
