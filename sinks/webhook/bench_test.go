package webhook_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// countingConn counts the writes (one syscall each) a client makes on its connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// BenchmarkDeliver measures one attempt of a single 1 KB Event Grid event to a local server
// over a reused connection: the sink's cost plus the loopback round trip (compare with the
// Go client POST 1 KB anchor in reference/machine-limits.md). writes/op counts the client's
// writes to the connection: one per request when headers and body go out together.
func BenchmarkDeliver(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	var writes atomic.Int64
	var d net.Dialer
	client := webhook.NewClient(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	})
	defer client.CloseIdleConnections()
	s, err := webhook.New(webhook.Config{URL: srv.URL + "/api/updates?code=secret"}, client)
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
	writes.Store(0)
	for b.Loop() {
		if err := s.Deliver(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
}
