package webhook_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// BenchmarkDeliver measures one attempt of a single 1 KB Event Grid event to a local server
// over a reused connection: the sink's cost plus the loopback round trip (compare with the
// Go client POST 1 KB anchor in reference/machine-limits.md).
func BenchmarkDeliver(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	s, err := webhook.New(webhook.Config{URL: srv.URL + "/api/updates?code=secret"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	body := append(append([]byte(`[{"id":"evt-1","data":"`), bytes.Repeat([]byte("x"), 1024-27)...), `"}]`...)
	batch := &sinks.Batch{
		Topic: "orders", Subscription: "billing", Schema: schemas.EventGrid,
		Body: body, ContentType: schemas.ContentTypeJSON,
		Events: []*schemas.Event{{ID: "evt-1", Type: "Orders.Created", DataVersion: "1.0", Raw: body[1 : len(body)-1]}},
	}
	ctx := context.Background()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Deliver(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}
