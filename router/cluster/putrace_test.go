package cluster_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// slowHook answers the SubscriptionValidation handshake with its code, at once on every path
// but /v-slow, where it answers once the test lets it (release).
type slowHook struct {
	entered chan struct{}
	release chan struct{}
}

func (h *slowHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("aeg-event-type") != "SubscriptionValidation" {
		return
	}
	if r.URL.Path == "/v-slow" {
		h.entered <- struct{}{}
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
	}
	var evs []struct {
		Data struct {
			ValidationCode string `json:"validationCode"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &evs)
	if len(evs) == 1 {
		_ = json.NewEncoder(w).Encode(map[string]string{"validationResponse": evs[0].Data.ValidationCode})
	}
}

// storedEndpoint is the endpoint URL of subscription sub of topic orders as stored ("": none).
func storedEndpoint(t *testing.T, n *node, sub string) string {
	t.Helper()
	defs, err := n.st.Subscriptions(t.Context(), "orders")
	if errors.Is(err, store.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if d.Name == sub {
			var rec router.SubscriptionSpec
			if err := json.Unmarshal(d.Spec, &rec); err != nil {
				t.Fatal(err)
			}
			return rec.Destination.Properties.EndpointURL
		}
	}
	return ""
}

// A PUT of an event subscription on one node whose endpoint holds the handshake, while
// another node updates or deletes the subscription or its topic: the PUT answered last fails
// and changes nothing, as on a single node (the store's compare-and-swap in the topic's turn),
// so the write answered first is not undone — was: the slow PUT stored its definition over
// the other node's update, or brought the deleted subscription back.
func TestPutDuringASlowHandshakeDoesNotUndoAnotherNodesWrite(t *testing.T) {
	hook := &slowHook{entered: make(chan struct{}, 4), release: make(chan struct{}, 4)}
	c := newCluster(t)
	tr := testkit.NewTransport()
	tr.Handle("hook.test", hook)
	c.configure = func(_ string, cfg *router.Config, deps *router.Deps) {
		deps.HTTPClient = &http.Client{Transport: tr}
	}
	a, b := c.start("a"), c.start("b")
	ctx := t.Context()
	if _, err := a.r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	put := func(n *node, sub, path string) error {
		return n.r.CreateSubscription(ctx, "orders", sub, router.SubscriptionSpec{Destination: router.WebHook("http://hook.test" + path)})
	}
	// slow PUTs sub to /v-slow on a, and returns once the endpoint holds its handshake.
	slow := func(sub string) <-chan error {
		done := make(chan error, 1)
		go func() { done <- put(a, sub, "/v-slow") }()
		select {
		case <-hook.entered:
		case err := <-done:
			t.Fatalf("the slow PUT returned before its handshake reached the endpoint: %v", err)
		}
		return done
	}
	finish := func(done <-chan error) error {
		hook.release <- struct{}{}
		return <-done
	}

	if err := put(a, "race3", "/ok"); err != nil {
		t.Fatal(err)
	}
	done := slow("race3")
	if err := put(b, "race3", "/st200"); err != nil {
		t.Fatalf("the later update, on b: %v", err)
	}
	if err := finish(done); !errors.Is(err, router.ErrDefinitionChanged) {
		t.Errorf("the earlier update, on a, answered after b's: %v; want an error matching ErrDefinitionChanged", err)
	}
	if got := storedEndpoint(t, a, "race3"); got != "http://hook.test/st200" {
		t.Errorf("stored endpoint: %q; want b's, /st200", got)
	}

	if err := put(a, "race4", "/ok"); err != nil {
		t.Fatal(err)
	}
	done = slow("race4")
	if err := b.r.DeleteSubscription(ctx, "orders", "race4"); err != nil {
		t.Fatalf("the delete, on b: %v", err)
	}
	if err := finish(done); !errors.Is(err, router.ErrDefinitionChanged) {
		t.Errorf("the update, on a, answered after b's delete: %v; want an error matching ErrDefinitionChanged", err)
	}
	if got := storedEndpoint(t, a, "race4"); got != "" {
		t.Errorf("after b's delete answered, race4 is stored again, to %q; want it deleted", got)
	}

	done = slow("race6")
	if err := b.r.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatalf("deleting the topic on b: %v", err)
	}
	if err := finish(done); !errors.Is(err, router.ErrTopicNotFound) {
		t.Errorf("the create, on a, answered after b deleted its topic: %v; want an error matching ErrTopicNotFound", err)
	}
	topics, err := a.st.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range topics {
		if d.Name == "orders" {
			t.Errorf("topic orders is stored after its delete answered: %s", d.Spec)
		}
	}
	if _, err := a.st.Subscriptions(ctx, "orders"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("subscriptions of orders after its delete: %v; want ErrNotFound", err)
	}
}
