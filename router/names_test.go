package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
)

func nullSinks() map[string]sinks.Sink {
	return map[string]sinks.Sink{"null": sinks.Func(func(context.Context, *sinks.Batch) error { return nil })}
}

// TestNamesAreCaseInsensitive: names differing only in case are the same topic or
// subscription in every call of the Go API, and keep the case they were created with.
func TestNamesAreCaseInsensitive(t *testing.T) {
	ctx := context.Background()
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	first, err := r.CreateTopic(ctx, "Orders", router.TopicSpec{})
	if err != nil {
		t.Fatal(err)
	}
	second, err := r.CreateTopic(ctx, "ORDERS", router.TopicSpec{Key1: first.Key1})
	if err != nil {
		t.Fatalf("CreateTopic in another case: %v", err)
	}
	if second.Key2 != first.Key2 {
		t.Errorf("CreateTopic in another case made a new topic: key2 changed")
	}
	if got := r.Topics(); !slices.Equal(got, []string{"Orders"}) {
		t.Errorf("Topics() = %v, want [Orders]: one topic, in the case it was created with", got)
	}
	if _, err := r.Topic("orders"); err != nil {
		t.Errorf("Topic(orders): %v", err)
	}
	if id := r.TopicID("oRdErS"); !strings.HasSuffix(id, "/topics/Orders") {
		t.Errorf("TopicID(oRdErS) = %s, want the name as created", id)
	}

	sub := router.SubscriptionSpec{Destination: router.SinkDestination("null")}
	if err := r.CreateSubscription(ctx, "orders", "sub-a", sub); err != nil {
		t.Fatal(err)
	}
	sub.Labels = []string{"second"}
	if err := r.CreateSubscription(ctx, "ORDERS", "SUB-A", sub); err != nil {
		t.Fatalf("CreateSubscription in another case: %v", err)
	}
	if got, _ := r.Subscriptions("orders"); !slices.Equal(got, []string{"sub-a"}) {
		t.Errorf("Subscriptions = %v, want [sub-a]: SUB-A updates sub-a", got)
	}
	if got, err := r.Subscription("Orders", "Sub-A"); err != nil || !slices.Equal(got.Labels, []string{"second"}) {
		t.Errorf("Subscription(Orders, Sub-A) = %v, %v: want the update", got.Labels, err)
	}
	if tn, sn, err := r.SubscriptionName("ORDERS", "SUB-A"); err != nil || tn != "Orders" || sn != "sub-a" {
		t.Errorf("SubscriptionName = %q %q %v, want Orders sub-a", tn, sn, err)
	}
	if p, err := r.Provisioning("orders", "SUB-A"); err != nil || p.State != router.StateSucceeded {
		t.Errorf("Provisioning: %+v %v", p, err)
	}
	if _, err := r.Status(ctx, "ORDERS", "Sub-A"); err != nil {
		t.Errorf("Status in another case: %v", err)
	}
	if err := r.Publish(ctx, "oRdErS", egEventAt("e1")); err != nil {
		t.Errorf("Publish in another case: %v", err)
	}
	if err := r.DeleteSubscription(ctx, "ORDERS", "SUB-A"); err != nil {
		t.Fatalf("DeleteSubscription in another case: %v", err)
	}
	if got, _ := r.Subscriptions("Orders"); len(got) != 0 {
		t.Errorf("after the delete: %v", got)
	}
	if err := r.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatalf("DeleteTopic in another case: %v", err)
	}
	if _, err := r.Topic("Orders"); !errors.Is(err, router.ErrTopicNotFound) {
		t.Errorf("after the delete: %v", err)
	}
}

// TestRestoreFoldsNames: a restarted router finds what the store keeps in any case; of two
// stored names that differ only in case (written before names were folded) it serves the
// first and leaves the other in the store.
func TestRestoreFoldsNames(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	defer st.Close()
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{Store: st, Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "Orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "Orders", "Sub-A", router.SubscriptionSpec{Destination: router.SinkDestination("null")}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(router.SubscriptionSpec{Destination: router.SinkDestination("null")})
	if err := st.PutSubscription(ctx, "Orders", "SUB-A", raw); err != nil {
		t.Fatal(err)
	}

	r, err = router.New(router.Config{InsecureDev: true}, router.Deps{Store: st, Sinks: nullSinks()})
	if err != nil {
		t.Fatalf("restart with names that differ only in case: %v", err)
	}
	defer r.Close(ctx)
	if got, err := r.Subscriptions("ORDERS"); err != nil || len(got) != 1 || !strings.EqualFold(got[0], "sub-a") {
		t.Errorf("Subscriptions(ORDERS) after the restart = %v, %v: want one", got, err)
	}
	if _, err := r.Subscription("orders", "sub-a"); err != nil {
		t.Errorf("Subscription(orders, sub-a) after the restart: %v", err)
	}
	defs, _ := st.Subscriptions(ctx, "Orders")
	if len(defs) != 2 {
		t.Errorf("the store keeps %d definitions, want both: nothing is deleted behind the operator's back", len(defs))
	}
}

// TestConcurrentCreatesInAnotherCase: two creates of one subscription in different cases,
// both checked before either is stored, make one subscription: the second, which waits for
// the topic's turn, finds the subscription the first created under the name. With the same
// definition it succeeds, changing nothing (a PUT is idempotent: was, it failed 409 saying
// another request's definition was in force, which was its own); with another it changes
// nothing and fails wrapping ErrDefinitionChanged (it does not replace a definition it never
// saw; see TestPutDuringASlowHandshakeDoesNotUndoALaterWrite), saying the other request came
// while it waited to be stored — no handshake ran.
func TestConcurrentCreatesInAnotherCase(t *testing.T) {
	null := router.SubscriptionSpec{Destination: router.SinkDestination("null")}
	labelled := null
	labelled.Labels = []string{"other"}
	for _, tc := range []struct {
		name   string
		second router.SubscriptionSpec
		fails  bool
	}{
		{"the same definition", null, false},
		{"another definition", labelled, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Runs last, after the router's Close. The update's stop of the first actor
				// can race the topic's own stop of its children, and protoactor then logs the
				// second Stop as a dead letter through a throttle whose goroutine waits out a
				// second: let that second pass in virtual time, or the bubble ends with the
				// goroutine still blocked.
				t.Cleanup(func() { <-time.After(2 * time.Second) })
				r, gs := gatedRouter(t)
				entered, open := gs.close("topic-b")
				defer open()
				first := make(chan error, 1)
				go func() { first <- r.CreateSubscription(context.Background(), "topic-b", "sub-x", null) }()
				synctest.Wait() // the first holds the turn, stopped in its store write
				if op := <-entered; op != "CreateSubscription" {
					t.Fatalf("the first create stopped in %s", op)
				}
				second := make(chan error, 1)
				go func() { second <- r.CreateSubscription(context.Background(), "TOPIC-B", "SUB-X", tc.second) }()
				synctest.Wait() // the second is checked and waits for the turn
				open()
				if err := <-first; err != nil {
					t.Errorf("the first create: %v", err)
				}
				err := <-second
				switch {
				case !tc.fails && err != nil:
					t.Errorf("the second create, of the definition in force: %v", err)
				case tc.fails && !errors.Is(err, router.ErrDefinitionChanged):
					t.Errorf("the second create: %v; want an error matching ErrDefinitionChanged", err)
				case tc.fails && (!strings.Contains(err.Error(), "while this request waited to be stored") || strings.Contains(err.Error(), "validated its endpoint")):
					t.Errorf("the second create's error %q says a handshake ran", err)
				}
				if got, _ := r.Subscriptions("topic-b"); !slices.Equal(got, []string{"sub-1", "sub-x"}) {
					t.Errorf("subscriptions %v, want [sub-1 sub-x]", got)
				}
				if got, _ := r.Subscription("topic-b", "sub-x"); len(got.Labels) != 0 {
					t.Errorf("sub-x has labels %v: the first create's definition was replaced", got.Labels)
				}
				defs, err := gs.Subscriptions(context.Background(), "topic-b")
				if err != nil || len(defs) != 2 {
					t.Errorf("the store holds %d definitions (%v), want 2: sub-1 and sub-x once", len(defs), err)
				}
			})
		})
	}
}
