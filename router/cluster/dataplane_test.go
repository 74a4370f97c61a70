package cluster_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/cluster"
	"github.com/egridio/egrid/router/httpapi"
)

// serveHTTP sends one request to h with the topic key key and returns the answer.
func serveHTTP(t *testing.T, h http.Handler, target, contentType, body, key string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, target, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("aeg-sas-key", key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// putTopic writes a topic straight into the store, as another node's create does, without
// the notice that node sends: a node learns of it only by reading the store.
func putTopic(t *testing.T, n *node, name string, spec router.TopicSpec) {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.st.PutTopic(t.Context(), name, raw); err != nil {
		t.Fatalf("PutTopic %s: %v", name, err)
	}
}

// A client that creates a topic through one node and publishes or receives through another
// a moment later — a load balancer in front of the cluster — is served at once: the HTTP data
// plane looks a topic the node does not know up in the store, as Router.Publish does. It was
// answered 401 (the unknown-topic answer, which Azure's SDKs do not retry) until the node
// heard of the topic. A name no node created still answers 401.
func TestDataPlaneFindsATopicOnlyTheStoreKnows(t *testing.T) {
	c := newCluster(t)
	// b reads every definition every 20 s only: what it knows of the topics below, it
	// learns by the lookups of its data plane.
	c.ttl = 10 * time.Second
	a, b := c.start("a"), c.start("b")
	h := httpapi.New(b.r)
	const key = "c2VjcmV0LWtleS1vZi10aGUtdG9waWNzLW9mLXRoaXMtdGVzdA=="
	unknownToB := func(topic string) {
		t.Helper()
		if _, err := b.r.TopicName(topic); err == nil {
			t.Fatalf("node b knows topic %s already: the test would not exercise its lookup", topic)
		}
	}

	// Classic publish.
	putTopic(t, a, "orders", router.TopicSpec{Key1: key})
	unknownToB("orders")
	ev := `[{"id":"e1","subject":"/orders/1","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","data":{},"dataVersion":"1"}]`
	if rec := serveHTTP(t, h, "/topics/orders/api/events", "application/json", ev, key); rec.Code != http.StatusOK {
		t.Errorf("publish through b to a topic only the store knows: %d %s; want 200", rec.Code, rec.Body)
	}

	// Namespace :publish.
	putTopic(t, a, "jobs", router.TopicSpec{Kind: router.KindNamespace, Key1: key})
	unknownToB("jobs")
	ce := `{"specversion":"1.0","id":"j1","source":"/jobs","type":"Job.Created","data":{}}`
	if rec := serveHTTP(t, h, "/topics/jobs:publish", "application/cloudevents+json", ce, key); rec.Code != http.StatusOK {
		t.Errorf(":publish through b to a topic only the store knows: %d %s; want 200", rec.Code, rec.Body)
	}

	// Pull: a queue subscription of a topic b does not know, running on a.
	sub := ""
	for i := 0; sub == ""; i++ {
		if name := fmt.Sprintf("workers%d", i); cluster.Owner([]string{"a", "b"}, cluster.Key{Topic: "tasks", Subscription: name}) == "a" {
			sub = name
		}
	}
	putTopic(t, a, "tasks", router.TopicSpec{Kind: router.KindNamespace, Key1: key})
	raw, err := json.Marshal(router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.st.PutSubscription(t.Context(), "tasks", sub, raw); err != nil {
		t.Fatalf("PutSubscription: %v", err)
	}
	if _, err := a.r.Topic("tasks"); err != nil { // a reads it from the store
		t.Fatalf("topic tasks on a: %v", err)
	}
	eventually(t, 30*time.Second, sub+" running on a", func() bool {
		_, err := a.r.Status(t.Context(), "tasks", sub)
		return err == nil
	})
	if err := a.r.Publish(t.Context(), "tasks", json.RawMessage(`{"specversion":"1.0","id":"t1","source":"/tasks","type":"Task.Created","data":{}}`)); err != nil {
		t.Fatalf("publish on a: %v", err)
	}
	unknownToB("tasks")
	rec := serveHTTP(t, h, "/topics/tasks/eventsubscriptions/"+sub+":receive?maxEvents=1&maxWaitTime=10", "", "", key)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"id":"t1"`) {
		t.Errorf("receive through b from a topic only the store knows: %d %s; want 200 with event t1", rec.Code, rec.Body)
	}

	// A name no node created answers as before: 401, as to a wrong key.
	if rec := serveHTTP(t, h, "/topics/nowhere/api/events", "application/json", ev, key); rec.Code != http.StatusUnauthorized {
		t.Errorf("publish through b to a topic that does not exist: %d %s; want 401", rec.Code, rec.Body)
	}
	if rec := serveHTTP(t, h, "/topics/nowhere/eventsubscriptions/"+sub+":receive?maxWaitTime=10", "", "", key); rec.Code != http.StatusUnauthorized {
		t.Errorf("receive through b from a topic that does not exist: %d %s; want 401", rec.Code, rec.Body)
	}
}

// A queue subscription created through one node is pulled from, read and asked for its
// status through another at once, before that node has heard of it: the node looks a
// subscription it does not know, of a topic it knows, up in the store, as it does a topic. Its
// pull calls were answered 404 until the notice arrived (here: never, as the definition is
// put straight into the store, which is what a lost or late notice leaves). The node that
// owns the subscription learns of it the same way when a call is routed to it.
func TestDataPlaneFindsASubscriptionOnlyTheStoreKnows(t *testing.T) {
	c := newCluster(t)
	c.ttl = 10 * time.Second // b reads every definition every 20 s only
	a, b := c.start("a"), c.start("b")
	h := httpapi.New(b.r)
	const key = "c2VjcmV0LWtleS1vZi10aGUtdG9waWNzLW9mLXRoaXMtdGVzdA=="
	if _, err := a.r.CreateTopic(t.Context(), "tasks", router.TopicSpec{Kind: router.KindNamespace, Key1: key}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "topic tasks known on b", func() bool {
		_, err := b.r.TopicName("tasks")
		return err == nil
	})
	raw, err := json.Marshal(router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}})
	if err != nil {
		t.Fatal(err)
	}
	ownedBy := func(owner string) string {
		for i := 0; ; i++ {
			if name := fmt.Sprintf("workers%d", i); cluster.Owner([]string{"a", "b"}, cluster.Key{Topic: "tasks", Subscription: name}) == owner {
				return name
			}
		}
	}
	receive := func(sub string) *httptest.ResponseRecorder {
		return serveHTTP(t, h, "/topics/tasks/eventsubscriptions/"+sub+":receive?maxEvents=1&maxWaitTime=10", "", "", key)
	}

	// Owned by b, the node asked.
	mine := ownedBy("b")
	if err := a.st.PutSubscription(t.Context(), "tasks", mine, raw); err != nil {
		t.Fatalf("PutSubscription: %v", err)
	}
	if _, _, err := b.r.SubscriptionName("tasks", mine); err == nil {
		t.Fatalf("node b knows %s already: the test would not exercise its lookup", mine)
	}
	// The first call finds it and asks b to start it: until its actor runs (the node's next
	// placement round) the answer is 503 with Retry-After, which clients retry, not 404.
	if rec := receive(mine); rec.Code != http.StatusOK && (rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "") {
		t.Fatalf("receive through b from a subscription only the store knows: %d %s; want 200, or 503 with Retry-After while it starts", rec.Code, rec.Body)
	}
	eventually(t, 30*time.Second, mine+" received from through b", func() bool { return receive(mine).Code == http.StatusOK })
	if spec, err := b.r.FindSubscription(t.Context(), "TASKS", strings.ToUpper(mine)); err != nil || !spec.IsQueue() {
		t.Errorf("FindSubscription on b: %+v, %v; want the queue subscription", spec, err)
	}
	if _, err := b.r.Status(t.Context(), "tasks", mine); err != nil {
		t.Errorf("status through b: %v", err)
	}

	// Owned by a, which has not heard of it either: b routes the call there, and a looks it
	// up too and starts it.
	theirs := ownedBy("a")
	if err := a.st.PutSubscription(t.Context(), "tasks", theirs, raw); err != nil {
		t.Fatalf("PutSubscription: %v", err)
	}
	if err := a.r.Publish(t.Context(), "tasks", json.RawMessage(`{"specversion":"1.0","id":"t1","source":"/tasks","type":"Task.Created","data":{}}`)); err != nil {
		t.Fatalf("publish on a: %v", err)
	}
	if rec := receive(theirs); rec.Code != http.StatusOK && (rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "") {
		t.Fatalf("receive through b from a subscription only the store knows, owned by a: %d %s; want 200, or 503 with Retry-After while it starts", rec.Code, rec.Body)
	}
	eventually(t, 30*time.Second, "event t1 received through b", func() bool {
		rec := receive(theirs)
		return rec.Code == http.StatusOK && strings.Contains(rec.Body.String(), `"id":"t1"`)
	})
	if !a.r.RunsSubscription("tasks", theirs) {
		t.Errorf("%s does not run on a, its owner", theirs)
	}

	// A name nobody created still answers 404, and a second try within the second reads
	// nothing more.
	for range 2 {
		if rec := receive("nobody"); rec.Code != http.StatusNotFound {
			t.Errorf("receive through b from a subscription that does not exist: %d %s; want 404", rec.Code, rec.Body)
		}
	}
	if _, err := b.r.FindSubscription(t.Context(), "tasks", "nobody"); !errors.Is(err, router.ErrSubscriptionNotFound) {
		t.Errorf("FindSubscription of a name nobody created: %v; want ErrSubscriptionNotFound", err)
	}
}
