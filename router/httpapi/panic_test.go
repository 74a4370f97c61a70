package httpapi_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store"
)

// panickingStore panics when a delivery history is read: a bug reached from a handler.
type panickingStore struct{ store.Store }

func (panickingStore) History(context.Context, string, string, string, time.Time) (store.HistoryRecord, error) {
	panic("history index out of range")
}

// TestHandlerPanicIsAnswered500: a handler that panics answers 500 with Event Grid's error
// body and logs the panic with its stack, instead of dropping the connection without an
// answer; the server goes on serving.
func TestHandlerPanicIsAnswered500(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemory()
	defer mem.Close()
	var logs bytes.Buffer
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Store: panickingStore{mem}, Sinks: nullSinks(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateSubscription(ctx, "orders", "sub-1", router.SubscriptionSpec{Destination: router.SinkDestination("null")}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()

	status, body := adminDo(t, srv, "tok", "GET", "/admin/topics/orders/eventSubscriptions/sub-1/events/e1", "")
	if status != http.StatusInternalServerError {
		t.Fatalf("a panicking handler: %d %v, want 500", status, body)
	}
	e, _ := body["error"].(map[string]any)
	if e["code"] != "InternalServerError" || !strings.Contains(e["message"].(string), "retry") {
		t.Errorf("error body %v, want code InternalServerError and a message that says what to do", body)
	}
	if !strings.Contains(logs.String(), "history index out of range") || !strings.Contains(logs.String(), "panic_test.go") {
		t.Errorf("the log does not hold the panic and its stack:\n%s", logs.String())
	}
	if status, _ := adminDo(t, srv, "tok", "GET", "/admin/topics/orders", ""); status != http.StatusOK {
		t.Errorf("after the panic, GET /admin/topics/orders: %d, want 200", status)
	}
}
