package router_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store/disk"
)

// A router whose store holds a damaged topic definition starts and serves the other topics:
// their subscriptions deliver what is published. The damaged topic is not served; creating it
// again is refused with router.ErrDefinitionDamaged until it is deleted, and deleting it (the
// operator's way out, though the router does not run it) frees the name. So does a damaged
// subscription definition, for its subscription alone. Before, the store refused to open, and
// the router with it.
func TestRouterStartsPastADamagedDefinition(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string]int{}
	delivered := make(chan struct{}, 1)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		got[req.URL.Path]++
		mu.Unlock()
		select {
		case delivered <- struct{}{}:
		default:
		}
	}))
	defer endpoint.Close()

	dir := t.TempDir()
	cfg := router.Config{InsecureDev: true, SkipEndpointValidation: true}
	st, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"orders", "broken"} {
		if _, err := r.CreateTopic(ctx, topic, router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"hook", "spoilt"} {
			if err := r.CreateSubscription(ctx, topic, name, router.SubscriptionSpec{Destination: router.WebHook(endpoint.URL + "/" + topic + "/" + name)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// Damage the definitions of topic broken and of subscription orders/spoilt: an unknown
	// version byte in place of theirs.
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	damaged := 0
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("S"), UpperBound: []byte("U")})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	for valid, first := it.First(), true; valid; valid = it.Next() {
		k := it.Key()
		if string(k) == "Tbroken" || k[0] == 'S' && strings.HasSuffix(string(k), "spoilt") && first {
			first = first && k[0] != 'S' // orders' subscriptions come first (its id is lower)
			v := append([]byte{0x7f}, it.Value()[1:]...)
			if err := b.Set(k, v, nil); err != nil {
				t.Fatal(err)
			}
			damaged++
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if damaged != 2 {
		t.Fatalf("damaged %d definitions; want 2", damaged)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	kinds := make(chan string, 10)
	st, err = disk.Open(dir, disk.Options{Logger: slog.New(slog.DiscardHandler), OnCorruption: func(kind string) { kinds <- kind }})
	if err != nil {
		t.Fatalf("Open: %v; want the store open past the damaged definitions", err)
	}
	defer st.Close()
	r, err = router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	defer r.Close(ctx)
	if len(kinds) != 2 || <-kinds != disk.DamageDefinition {
		t.Errorf("%d damage counted; want 2 of kind definition", len(kinds))
	}
	if topics := r.Topics(); strings.Join(topics, ",") != "orders" {
		t.Fatalf("Topics = %v; want orders alone", topics)
	}
	if subs, err := r.Subscriptions("orders"); err != nil || strings.Join(subs, ",") != "hook" {
		t.Fatalf("Subscriptions of orders = %v, %v; want hook alone", subs, err)
	}
	if err := r.Publish(ctx, "orders", map[string]any{"id": "e1", "subject": "/s", "eventType": "T", "eventTime": "2026-01-01T00:00:00Z", "data": map[string]any{}, "dataVersion": "1"}); err != nil {
		t.Fatalf("Publish to orders: %v", err)
	}
	select { // bounded: a router that does not deliver fails here, not by the test's timeout
	case <-delivered:
	case <-time.After(time.Minute):
		t.Fatal("orders/hook delivered nothing")
	}
	mu.Lock()
	if got["/orders/hook"] != 1 || len(got) != 1 {
		t.Errorf("deliveries %v; want one to orders/hook", got)
	}
	mu.Unlock()

	if _, err := r.CreateTopic(ctx, "Broken", router.TopicSpec{}); !errors.Is(err, router.ErrDefinitionDamaged) || !strings.Contains(err.Error(), "delete the topic") {
		t.Errorf("CreateTopic of the damaged name = %v; want router.ErrDefinitionDamaged saying to delete it", err)
	}
	spec := router.SubscriptionSpec{Destination: router.WebHook(endpoint.URL + "/orders/spoilt")}
	if err := r.CreateSubscription(ctx, "orders", "spoilt", spec); !errors.Is(err, router.ErrDefinitionDamaged) {
		t.Errorf("CreateSubscription of the damaged name = %v; want router.ErrDefinitionDamaged", err)
	}
	if err := r.DeleteTopic(ctx, "broken"); err != nil {
		t.Fatalf("DeleteTopic of the damaged topic: %v", err)
	}
	if err := r.DeleteTopic(ctx, "broken"); !errors.Is(err, router.ErrTopicNotFound) {
		t.Errorf("DeleteTopic again = %v; want router.ErrTopicNotFound", err)
	}
	if err := r.DeleteSubscription(ctx, "orders", "spoilt"); err != nil {
		t.Fatalf("DeleteSubscription of the damaged subscription: %v", err)
	}
	if _, err := r.CreateTopic(ctx, "broken", router.TopicSpec{}); err != nil {
		t.Errorf("CreateTopic after the delete: %v", err)
	}
	if err := r.CreateSubscription(ctx, "orders", "spoilt", spec); err != nil {
		t.Errorf("CreateSubscription after the delete: %v", err)
	}
}
