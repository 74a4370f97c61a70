package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// beforeWrite is a store whose next PutSubscription or SwapSubscription of subscription sub
// once armed first runs then: another node's write landing between the router's read in the
// topic's turn and its own write.
type beforeWrite struct {
	store.Store
	sub   string
	armed atomic.Bool
	then  func(ctx context.Context)
}

func (s *beforeWrite) fire(ctx context.Context, name string) {
	if name == s.sub && s.armed.CompareAndSwap(true, false) {
		s.then(ctx)
	}
}

func (s *beforeWrite) PutSubscription(ctx context.Context, topic, name string, spec []byte) error {
	s.fire(ctx, name)
	return s.Store.PutSubscription(ctx, topic, name, spec)
}

func (s *beforeWrite) SwapSubscription(ctx context.Context, topic, name string, old, spec []byte) error {
	s.fire(ctx, name)
	return s.Store.SwapSubscription(ctx, topic, name, old, spec)
}

// lostCreate is a store whose PutSubscription of a subscription runs other (another node's
// create of it) and fails as the JetStream store's create does when another writer created
// the key after it found none.
type lostCreate struct {
	store.Store
	other func(ctx context.Context)
}

func (s *lostCreate) PutSubscription(ctx context.Context, topic, name string, spec []byte) error {
	s.other(ctx)
	return fmt.Errorf("jetstream store: writing subscription %q of topic %q: %w (key exists)", name, topic, store.ErrFenced)
}

// hookCluster starts nodes a and b, whose WebHook endpoints are a slowHook at hook.test; b's
// store is wrapped by wrap when not nil.
func hookCluster(t *testing.T, wrap func(store.Store) store.Store) (a, b *node, hook *slowHook) {
	hook = &slowHook{entered: make(chan struct{}, 4), release: make(chan struct{}, 4)}
	c := newCluster(t)
	tr := testkit.NewTransport()
	tr.Handle("hook.test", hook)
	c.configure = func(name string, _ *router.Config, deps *router.Deps) {
		deps.HTTPClient = &http.Client{Transport: tr}
		if name == "b" && wrap != nil {
			deps.Store = wrap(deps.Store)
		}
	}
	a, b = c.start("a"), c.start("b")
	if _, err := a.r.CreateTopic(t.Context(), "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	return a, b, hook
}

// A PUT of a read-back definition (endpointUrl left out, as reads hide its query string) on
// a node that has not heard of another node's answered update yet keeps the endpoint that
// update stored — was: it took the endpoint from its own older copy and stored it, undoing
// the update.
func TestAReadBackPutKeepsTheEndpointAnotherNodeStored(t *testing.T) {
	a, b, _ := hookCluster(t, nil)
	ctx := t.Context()
	if err := a.r.CreateSubscription(ctx, "orders", "sub1", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/ok?k=1")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "b knows sub1", func() bool { _, err := b.r.Subscription("orders", "sub1"); return err == nil })
	// Another node's update, answered, whose notice b has not had yet.
	raw, _ := json.Marshal(router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/st200?k=2")})
	if err := a.st.PutSubscription(ctx, "orders", "sub1", raw); err != nil {
		t.Fatal(err)
	}
	err := b.r.CreateSubscription(ctx, "orders", "sub1", router.SubscriptionSpec{Destination: router.Destination{EndpointType: router.EndpointWebHook}})
	if err != nil {
		t.Fatalf("PUT of the read-back definition on b: %v", err)
	}
	if got := storedEndpoint(t, a, "sub1"); got != "http://hook.test/st200?k=2" {
		t.Errorf("stored endpoint %q, want the other node's http://hook.test/st200?k=2", got)
	}
}

// Two nodes PUT one definition at once (a client's retry through another node while the
// first attempt's handshake runs): both succeed, as a PUT is idempotent — was: the one
// answered last failed 409 although its own definition was in force.
func TestIdenticalPutsOnTwoNodesBothSucceed(t *testing.T) {
	a, b, hook := hookCluster(t, nil)
	ctx := t.Context()
	spec := router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/v-slow?k=1")}
	errs := make(chan error, 2)
	go func() { errs <- a.r.CreateSubscription(ctx, "orders", "twice", spec) }()
	<-hook.entered
	go func() { errs <- b.r.CreateSubscription(ctx, "orders", "twice", spec) }()
	<-hook.entered
	hook.release <- struct{}{}
	hook.release <- struct{}{}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("a PUT of the definition in force failed: %v", err)
		}
	}
	if got := storedEndpoint(t, a, "twice"); got != "http://hook.test/v-slow?k=1" {
		t.Errorf("stored endpoint %q", got)
	}
}

// Two nodes create one subscription at once, the other node's create stored while this
// node's create runs in the store, which then refuses it (the JetStream store's create of a
// key another writer created fails fenced): the create answers 409 (the subscription was
// created by another request), or succeeds when the definitions are the same — was: 503,
// the refusal taken for an unavailable store.
func TestConcurrentCreatesOnTwoNodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other string // the endpoint the other node's create stores
		same  bool
	}{
		{"different definitions conflict", "http://hook.test/ok?other=1", false},
		{"the same definition succeeds", "http://hook.test/ok?k=1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a *node
			a, b, _ := hookCluster(t, func(st store.Store) store.Store {
				return &lostCreate{Store: st, other: func(ctx context.Context) {
					if err := a.r.CreateSubscription(ctx, "orders", "both", router.SubscriptionSpec{Destination: router.WebHook(tc.other)}); err != nil {
						t.Errorf("the other node's create: %v", err)
					}
				}}
			})
			err := b.r.CreateSubscription(t.Context(), "orders", "both", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/ok?k=1")})
			if tc.same {
				if err != nil {
					t.Errorf("create of the definition in force: %v", err)
				}
			} else if !errors.Is(err, router.ErrDefinitionChanged) || errors.Is(err, router.ErrUnavailable) {
				t.Errorf("create: %v; want an error matching ErrDefinitionChanged (409)", err)
			}
			if got := storedEndpoint(t, a, "both"); got != tc.other {
				t.Errorf("stored endpoint %q, want the other node's %q", got, tc.other)
			}
		})
	}
}

// A topic deleted on another node between an update's read in the topic's turn and its
// swap answers 404 topic not found — was: the update said the subscription had been
// deleted.
func TestAnUpdateWhoseTopicIsDeletedBeforeItsSwapAnswers404(t *testing.T) {
	var a *node
	var bw *beforeWrite
	a, b, _ := hookCluster(t, func(st store.Store) store.Store {
		bw = &beforeWrite{Store: st, sub: "gone", then: func(ctx context.Context) {
			if err := a.r.DeleteTopic(ctx, "orders"); err != nil {
				t.Errorf("the other node's topic delete: %v", err)
			}
		}}
		return bw
	})
	ctx := t.Context()
	if err := a.r.CreateSubscription(ctx, "orders", "gone", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/ok?k=1")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "b knows gone", func() bool { _, err := b.r.Subscription("orders", "gone"); return err == nil })
	bw.armed.Store(true)
	err := b.r.CreateSubscription(ctx, "orders", "gone", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/ok?k=2")})
	if !errors.Is(err, router.ErrTopicNotFound) {
		t.Errorf("update: %v; want an error matching ErrTopicNotFound (404)", err)
	}
}
