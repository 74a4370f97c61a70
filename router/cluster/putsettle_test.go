package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// beforeWrite is a store whose next PutSubscription, CreateSubscription or SwapSubscription
// of subscription sub once armed first runs then: another node's write landing between the
// router's read in the topic's turn and its own write.
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

func (s *beforeWrite) CreateSubscription(ctx context.Context, topic, name string, spec []byte) error {
	s.fire(ctx, name)
	return s.Store.CreateSubscription(ctx, topic, name, spec)
}

func (s *beforeWrite) SwapSubscription(ctx context.Context, topic, name string, old, spec []byte) error {
	s.fire(ctx, name)
	return s.Store.SwapSubscription(ctx, topic, name, old, spec)
}

// lostCreate is a store whose create of a subscription first runs other (another node's
// create of it), so the store's create-if-absent then finds the key taken.
type lostCreate struct {
	store.Store
	other func(ctx context.Context)
}

func (s *lostCreate) CreateSubscription(ctx context.Context, topic, name string, spec []byte) error {
	s.other(ctx)
	return s.Store.CreateSubscription(ctx, topic, name, spec)
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
// node's create runs in the store, which then refuses it (store.ErrExists): the create
// answers 409 (the subscription was created by another request), or succeeds when the
// definitions are the same — was: 503, the refusal taken for an unavailable store.
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

// Two nodes race to create one subscription with different definitions: node a's create is
// stored and answered between node b's read of the record in the topic's turn (none) and
// b's write. b's write is the store's create-if-absent, which finds the key taken: a's
// definition alone stands, and b's client is answered 409 Conflict — was: b's write (a
// create-or-replace) found a's record and wrote its own definition over it, answering 201,
// so a's answered create was silently lost.
func TestRacingCreatesOnTwoNodesLeaveOneDefinition(t *testing.T) {
	const (
		winner = "http://hook.test/ok?node=a"
		loser  = "http://hook.test/ok?node=b"
	)
	var a *node
	var bw *beforeWrite
	hook := &slowHook{entered: make(chan struct{}, 4), release: make(chan struct{}, 4)}
	c := newCluster(t)
	tr := testkit.NewTransport()
	tr.Handle("hook.test", hook)
	c.configure = func(name string, cfg *router.Config, deps *router.Deps) {
		cfg.AdminToken = "s3cret"
		deps.HTTPClient = &http.Client{Transport: tr}
		if name == "b" {
			bw = &beforeWrite{Store: deps.Store, sub: "raced", then: func(ctx context.Context) {
				if err := a.r.CreateSubscription(ctx, "orders", "raced", router.SubscriptionSpec{Destination: router.WebHook(winner)}); err != nil {
					t.Errorf("node a's create: %v", err)
				}
			}}
			bw.armed.Store(true)
			deps.Store = bw
		}
	}
	a = c.start("a")
	b := c.start("b")
	ctx := t.Context()
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	body := `{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"` + loser + `"}}}}`
	req := httptest.NewRequestWithContext(ctx, http.MethodPut, "/admin/topics/orders/eventSubscriptions/raced", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer s3cret")
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	httpapi.New(b.r).ServeHTTP(rec, req)
	if bw.armed.Load() {
		t.Fatal("node a's create did not run before node b's write")
	}
	if rec.Code != http.StatusConflict {
		t.Errorf("node b's create: %d %s; want 409 Conflict", rec.Code, rec.Body)
	}
	if got := storedEndpoint(t, a, "raced"); got != winner {
		t.Errorf("stored endpoint %q, want node a's answered create %q", got, winner)
	}
	for _, n := range []*node{a, b} {
		eventually(t, 20*time.Second, n.name+" serves node a's definition", func() bool {
			spec, err := n.r.Subscription("orders", "raced")
			return err == nil && spec.Destination.Properties.EndpointURL == winner
		})
	}
}

// beforeTopicCreate is a store whose next CreateTopic, once armed, first runs then: another
// node's create of the topic landing between this node's look for it and its write.
type beforeTopicCreate struct {
	store.Store
	armed atomic.Bool
	then  func(ctx context.Context)
}

func (s *beforeTopicCreate) CreateTopic(ctx context.Context, name string, spec []byte) error {
	if s.armed.CompareAndSwap(true, false) {
		s.then(ctx)
	}
	return s.Store.CreateTopic(ctx, name, spec)
}

// Two nodes race to create one topic: node a's create is stored and answered while node b,
// which does not know the topic, writes its own. b's write is the store's create-if-absent:
// a's topic stands (its schema and keys), and b's create fails with ErrDefinitionChanged
// (409), or succeeds with a's topic when it asks for the same one — was: b wrote its
// definition over a's, so a's client held keys that no longer worked, and the topic's schema
// could change under the events in its journal.
func TestRacingTopicCreatesOnTwoNodesLeaveOneTopic(t *testing.T) {
	for _, tc := range []struct {
		name string
		mine router.TopicSpec
		same bool
	}{
		{"another schema conflicts", router.TopicSpec{InputSchema: "EventGridSchema"}, false},
		{"the same topic succeeds", router.TopicSpec{InputSchema: "CloudEventSchemaV1_0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a *node
			var winner router.TopicSpec
			c := newCluster(t)
			c.configure = func(name string, _ *router.Config, deps *router.Deps) {
				if name != "b" {
					return
				}
				bt := &beforeTopicCreate{Store: deps.Store, then: func(ctx context.Context) {
					var err error
					if winner, err = a.r.CreateTopic(ctx, "orders", router.TopicSpec{InputSchema: "CloudEventSchemaV1_0"}); err != nil {
						t.Errorf("node a's create: %v", err)
					}
				}}
				bt.armed.Store(true)
				deps.Store = bt
			}
			a = c.start("a")
			b := c.start("b")
			got, err := b.r.CreateTopic(t.Context(), "orders", tc.mine)
			switch {
			case tc.same && err != nil:
				t.Errorf("node b's create of the topic in force: %v", err)
			case tc.same && (got.Key1 != winner.Key1 || got.Key2 != winner.Key2):
				t.Errorf("node b's create answered keys other than the topic's in force")
			case !tc.same && (!errors.Is(err, router.ErrDefinitionChanged) || errors.Is(err, router.ErrUnavailable)):
				t.Errorf("node b's create: %v; want an error matching ErrDefinitionChanged (409)", err)
			}
			defs, err := a.st.Topics(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var stored router.TopicSpec
			for _, d := range defs {
				if d.Name == "orders" {
					if err := json.Unmarshal(d.Spec, &stored); err != nil {
						t.Fatal(err)
					}
				}
			}
			if stored.InputSchema != "CloudEventSchemaV1_0" || stored.Key1 != winner.Key1 || stored.Key2 != winner.Key2 {
				t.Errorf("stored topic orders: %s with other keys than node a's answered create: %t; want node a's (CloudEventSchemaV1_0, its keys)", stored.InputSchema, stored.Key1 != winner.Key1)
			}
		})
	}
}
