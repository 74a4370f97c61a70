package httpapi_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/sinks"
)

// accept is a Go sink that accepts everything.
type accept struct{}

func (accept) Deliver(context.Context, *sinks.Batch) error { return nil }

func TestExplainEndpoint(t *testing.T) {
	// The router reports an attempt to Deps.OnAttempt after it has queued it for the
	// history, so the history is there once the report arrived.
	attempted := make(chan *router.AttemptRecord, 1)
	r, err := router.New(router.Config{AdminToken: "s3cret"}, router.Deps{
		Sinks:     map[string]sinks.Sink{"got": accept{}},
		OnAttempt: func(a *router.AttemptRecord) { attempted <- a },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	ctx := context.Background()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "orders", "sub-1", router.SubscriptionSpec{Destination: router.SinkDestination("got")}); err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(ctx, "orders", map[string]any{
		"id": "order-1", "subject": "/orders/1", "eventType": "Order.Created", "eventTime": "2024-05-01T12:00:00Z",
		"data": map[string]any{}, "dataVersion": "1",
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-attempted:
	case <-time.After(10 * time.Second):
		t.Fatal("the event was not delivered within 10 s")
	}

	status, body := adminDo(t, srv, "s3cret", "GET", "/admin/topics/orders/eventSubscriptions/sub-1/events/order-1", "")
	if status != 200 || body["state"] != "Delivered" || body["eventId"] != "order-1" {
		t.Fatalf("explain: %d %v, want 200 Delivered for order-1", status, body)
	}
	attempts, _ := body["attempts"].([]any)
	if len(attempts) != 1 || attempts[0].(map[string]any)["explanation"] != "delivered" {
		t.Fatalf("attempts %v, want one delivered", attempts)
	}

	status, body = adminDo(t, srv, "s3cret", "GET", "/admin/topics/orders/eventSubscriptions/sub-1/events/nope-42", "")
	msg, _ := body["error"].(map[string]any)["message"].(string)
	if status != 404 || !strings.Contains(msg, "nope-42") {
		t.Fatalf("unknown event: %d %v, want 404 naming nope-42", status, body)
	}
	if status, _ := adminDo(t, srv, "s3cret", "GET", "/admin/topics/orders/eventSubscriptions/sub-2/events/order-1", ""); status != 404 {
		t.Fatalf("unknown subscription: %d, want 404", status)
	}
	if status, _ := adminDo(t, srv, "", "GET", "/admin/topics/orders/eventSubscriptions/sub-1/events/order-1", ""); status != 401 {
		t.Fatalf("without a token: %d, want 401", status)
	}
}

// A queue subscription's event is explained over HTTP by its pull steps.
func TestExplainEndpointPull(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "s3cret"}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	ctx := context.Background()
	if _, err := r.CreateTopic(ctx, "ns1", router.TopicSpec{Kind: router.KindNamespace}); err != nil {
		t.Fatal(err)
	}
	spec := router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}}
	if err := r.CreateSubscription(ctx, "ns1", "que3", spec); err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(ctx, "ns1", map[string]any{"specversion": "1.0", "id": "e400", "source": "/orders", "type": "Order.Created"}); err != nil {
		t.Fatal(err)
	}
	evs, err := r.Receive(ctx, "ns1", "que3", router.ReceiveOptions{MaxEvents: 1, MaxWait: router.MinReceiveWait})
	if err != nil || len(evs) != 1 {
		t.Fatalf("receive: %d events, %v; want e400", len(evs), err)
	}
	if res, err := r.Acknowledge(ctx, "ns1", "que3", []string{evs[0].LockToken}); err != nil || len(res.Succeeded) != 1 {
		t.Fatalf("acknowledge: %+v, %v", res, err)
	}

	status, body := adminDo(t, srv, "s3cret", "GET", "/admin/topics/ns1/eventSubscriptions/que3/events/e400", "")
	if status != 200 || body["state"] != "Delivered" || body["eventId"] != "e400" || body["attemptsMade"] != 1.0 {
		t.Fatalf("explain: %d %v, want 200 Delivered for e400 after 1 delivery", status, body)
	}
	attempts, _ := body["attempts"].([]any)
	if len(attempts) != 2 {
		t.Fatalf("attempts %v, want the receipt and the acknowledgement", attempts)
	}
	received, acked := attempts[0].(map[string]any), attempts[1].(map[string]any)
	if received["step"] != "Received" || received["attempt"] != 1.0 || received["lockedUntil"] == nil || acked["step"] != "Acknowledged" {
		t.Fatalf("attempts %v, want Received (delivery 1, with lockedUntil) then Acknowledged", attempts)
	}
}

// The event ids "." and ".." are explained by the query form (?id=), which is what the
// console sends since a browser drops such a path segment even sent as %2E; a Go client's
// %2E reaches the path form too. The query form without an id says what it takes.
func TestExplainEndpointDotIDs(t *testing.T) {
	attempted := make(chan *router.AttemptRecord, 2)
	r, err := router.New(router.Config{AdminToken: "s3cret"}, router.Deps{
		Sinks:     map[string]sinks.Sink{"got": accept{}},
		OnAttempt: func(a *router.AttemptRecord) { attempted <- a },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	ctx := context.Background()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "orders", "sub-1", router.SubscriptionSpec{Destination: router.SinkDestination("got")}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{".", ".."} {
		if err := r.Publish(ctx, "orders", map[string]any{
			"id": id, "subject": "/orders/1", "eventType": "Order.Created", "eventTime": "2024-05-01T12:00:00Z",
			"data": map[string]any{}, "dataVersion": "1",
		}); err != nil {
			t.Fatal(err)
		}
	}
	for delivered := 0; delivered < 2; {
		select {
		case a := <-attempted:
			delivered += len(a.EventIDs)
		case <-time.After(10 * time.Second):
			t.Fatal("the events were not delivered within 10 s")
		}
	}
	for _, tc := range []struct{ path, id string }{
		{"/admin/topics/orders/eventSubscriptions/sub-1/events?id=.", "."},
		{"/admin/topics/orders/eventSubscriptions/sub-1/events?id=..", ".."},
		{"/admin/topics/orders/eventSubscriptions/sub-1/events?id=%2E%2E", ".."},
		{"/admin/topics/orders/eventSubscriptions/sub-1/events/%2E", "."},
		{"/admin/topics/orders/eventSubscriptions/sub-1/events/%2E%2E", ".."},
	} {
		status, body := adminDo(t, srv, "s3cret", "GET", tc.path, "")
		if status != 200 || body["state"] != "Delivered" || body["eventId"] != tc.id {
			t.Errorf("GET %s: %d %v, want 200 Delivered for %q", tc.path, status, body, tc.id)
		}
	}
	for _, path := range []string{"/admin/topics/orders/eventSubscriptions/sub-1/events", "/admin/topics/orders/eventSubscriptions/sub-1/events?id=", "/admin/topics/orders/eventSubscriptions/sub-1/events?id=a&id=b"} {
		status, body := adminDo(t, srv, "s3cret", "GET", path, "")
		msg, _ := body["error"].(map[string]any)["message"].(string)
		if status != 400 || !strings.Contains(msg, "?id=") {
			t.Errorf("GET %s: %d %v, want 400 saying to send the id", path, status, body)
		}
	}
}
