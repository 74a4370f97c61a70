// Command embed is a Go service that embeds egrid: it mounts the router's HTTP data plane on its
// own mux under /events/ and receives the events of topic "orders" in a Go function, with the
// same retry semantics a webhook gets.
//
//	go run ./examples/embed
//	curl -X POST localhost:8090/events/topics/orders/api/events -H "aeg-sas-key: $KEY" -d '[...]'
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/sinks"
)

// Service is the example service: its own routes plus egrid.
type Service struct {
	Router *router.Router
	Mux    *http.ServeMux
	Key    string // key1 of topic orders
}

// NewService builds the service. handle receives every event of topic orders.
func NewService(ctx context.Context, handle func(id, eventType string, data []byte) error) (*Service, error) {
	audit := sinks.Func(func(ctx context.Context, b *sinks.Batch) error {
		for _, ev := range b.Events {
			if err := handle(ev.ID, ev.Type, ev.Raw); err != nil {
				return err // the batch is retried on egrid's schedule
			}
		}
		return nil
	})
	r, err := router.New(router.Config{}, router.Deps{Sinks: map[string]sinks.Sink{"audit": audit}})
	if err != nil {
		return nil, err
	}
	topic, err := r.CreateTopic(ctx, "orders", router.TopicSpec{})
	if err != nil {
		return nil, err
	}
	if err := r.CreateSubscription(ctx, "orders", "audit", router.SubscriptionSpec{
		Destination: router.SinkDestination("audit"),
		RetryPolicy: router.RetryPolicy{MaxDeliveryAttempts: 5},
	}); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/events/", http.StripPrefix("/events", httpapi.New(r)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return &Service{Router: r, Mux: mux, Key: topic.Key1}, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	svc, err := NewService(ctx, func(id, eventType string, data []byte) error {
		fmt.Printf("received %s (%s): %s\n", id, eventType, data)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer svc.Router.Close(context.Background())
	srv := &http.Server{Addr: "127.0.0.1:8090", Handler: svc.Mux}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	fmt.Printf("publish to http://127.0.0.1:8090/events/topics/orders/api/events with aeg-sas-key: %s\n", svc.Key)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
