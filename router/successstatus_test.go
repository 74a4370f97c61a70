package router_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// attemptLog is a slog.Handler that passes on the "status" of each "delivery attempt" line.
type attemptLog struct{ statuses chan int64 }

func (h attemptLog) Enabled(context.Context, slog.Level) bool { return true }
func (h attemptLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h attemptLog) WithGroup(string) slog.Handler            { return h }
func (h attemptLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "delivery attempt" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "status" {
				h.statuses <- a.Value.Int64()
			}
			return true
		})
	}
	return nil
}

// A delivered attempt's status is the one the destination answered (a 202 here), in the debug
// log's "delivery attempt" line and in the event's history (egrid explain): a webhook's, and a
// Go sink's that sets it (sinks.Batch.StatusCode) behind delivery attribute mappings, which
// hand the sink a copy of the batch. Before, a success reported no status: the log said
// status=0 and explain "-".
func TestDeliveredAttemptsShowTheirStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		transport := testkit.NewTransport()
		transport.Handle("hook.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
		}))
		log := attemptLog{statuses: make(chan int64, 10)}
		goSink := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
			b.StatusCode = http.StatusAccepted
			return nil
		})
		r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true}, router.Deps{
			Store: store.NewMemory(), HTTPClient: &http.Client{Transport: transport}, Logger: slog.New(log),
			Sinks: map[string]sinks.Sink{"go": goSink},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		ctx := context.Background()
		if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		for _, sub := range []string{"plain", "mapped"} {
			spec := router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/" + sub)}
			if sub == "mapped" {
				spec.Destination = router.SinkDestination("go")
				spec.Destination.Properties.DeliveryAttributeMappings = []router.DeliveryAttributeMapping{
					{Name: "X-Tenant", Type: "Static", Properties: router.DeliveryAttributeMappingProperties{Value: "t1"}},
				}
			}
			if err := r.CreateSubscription(ctx, "orders", sub, spec); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Publish(ctx, "orders", map[string]any{"id": "e1", "subject": "s", "eventType": "t", "eventTime": "2026-01-01T00:00:00Z", "data": map[string]any{}}); err != nil {
			t.Fatal(err)
		}
		testkit.Advance(time.Second) // the deliveries and their histories' writes run
		synctest.Wait()
		if n := len(log.statuses); n != 2 {
			t.Fatalf("%d delivery attempts logged, want 2", n)
		}
		for range 2 {
			if s := <-log.statuses; s != http.StatusAccepted {
				t.Errorf("the debug log says status=%d for a delivery answered 202", s)
			}
		}
		for _, sub := range []string{"plain", "mapped"} {
			e, err := r.Explain(ctx, "orders", sub, "e1")
			if err != nil || len(e.Attempts) != 1 {
				t.Fatalf("%s: explain: %+v, %v; want one attempt", sub, e, err)
			}
			if got := e.Attempts[0].StatusCode; got != http.StatusAccepted || e.State != router.EventDelivered {
				t.Errorf("%s: explain shows %s with status %d, want Delivered with 202", sub, e.State, got)
			}
		}
	})
}
