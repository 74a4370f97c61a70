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
