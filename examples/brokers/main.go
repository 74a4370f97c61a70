// Command brokers fans one topic out to two destinations at once: a webhook and a NATS
// JetStream stream. Each subscription has its own retry schedule, probation and dead letters;
// the NATS consumer gets one message per event, with the event id as message id and the aeg-*
// delivery headers as NATS headers.
//
//	nats-server -js &
//	go run ./examples/brokers -nats nats://127.0.0.1:4222
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks/broker"
)

// FanOut is a router whose topic "orders" has two subscriptions: "hook" (a webhook) and
// "stream" (a NATS JetStream subject).
type FanOut struct {
	Router  *router.Router
	Brokers *broker.Brokers
}

// NewFanOut starts the router. webhookURL must answer Event Grid's validation handshake (a
// [Hook] does); a JetStream stream must capture subject on the NATS server at natsURL.
func NewFanOut(ctx context.Context, natsURL, webhookURL, subject string) (*FanOut, error) {
	brokers, err := broker.Open(broker.Servers{NATS: &broker.NATSServer{URL: natsURL}}, nil)
	if err != nil {
		return nil, err
	}
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{Publishers: brokers.Publishers()})
	if err != nil {
		_ = brokers.Close()
		return nil, err
	}
	f := &FanOut{Router: r, Brokers: brokers}
	fail := func(err error) (*FanOut, error) { return nil, errors.Join(err, f.Close(ctx)) }
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		return fail(err)
	}
	retry := router.RetryPolicy{MaxDeliveryAttempts: 10, EventTimeToLiveInMinutes: 60}
	if err := r.CreateSubscription(ctx, "orders", "hook", router.SubscriptionSpec{
		Destination: router.WebHook(webhookURL), RetryPolicy: retry,
	}); err != nil {
		return fail(err)
	}
	// The same subscription in the ARM shape a config file or the admin API takes:
	// {"destination":{"endpointType":"NatsJetStream","properties":{"subject":"orders.events"}}}
	if err := r.CreateSubscription(ctx, "orders", "stream", router.SubscriptionSpec{
		Destination: router.BrokerDestination(broker.NATSJetStream, subject), RetryPolicy: retry,
	}); err != nil {
		return fail(err)
	}
	return f, nil
}

// Close stops the router, then the broker connections.
func (f *FanOut) Close(ctx context.Context) error {
	return errors.Join(f.Router.Close(ctx), f.Brokers.Close())
}

// Hook is a webhook endpoint: it answers Event Grid's validation handshake (SPEC §2.5) and
// hands every delivered event id to Handle.
type Hook struct {
	Handle func(id string)
}

// ServeHTTP implements http.Handler.
func (h Hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var events []struct {
		ID   string `json:"id"`
		Data struct {
			ValidationCode string `json:"validationCode"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &events); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Header.Get("aeg-event-type") == "SubscriptionValidation" && len(events) == 1 {
		_ = json.NewEncoder(w).Encode(map[string]string{"validationResponse": events[0].Data.ValidationCode})
		return
	}
	for _, e := range events {
		h.Handle(e.ID)
	}
}

func main() {
	natsURL := flag.String("nats", "nats://127.0.0.1:4222", "NATS server with JetStream")
	subject := flag.String("subject", "orders.events", "subject the stream subscription publishes to")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *natsURL, *subject); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, natsURL, subject string) error {
	// A stream that captures the subject (egrid never creates NATS streams).
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return fmt.Errorf("connecting to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "EGRID_EXAMPLE", Subjects: []string{subject}}); err != nil {
		return fmt.Errorf("creating the stream: %w", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: Hook{Handle: func(id string) { log.Printf("webhook got %s", id) }}, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	f, err := NewFanOut(ctx, natsURL, "http://"+ln.Addr().String()+"/hook", subject)
	if err != nil {
		return err
	}
	defer f.Close(context.Background())
	sub, _ := f.Brokers.Subscriber(broker.NATSJetStream)
	msgs, err := sub.Subscribe(ctx, subject)
	if err != nil {
		return err
	}
	for i := range 3 {
		id := fmt.Sprintf("order-%d", i)
		if err := f.Router.Publish(ctx, "orders", map[string]any{
			"id": id, "subject": "/orders/" + id, "eventType": "Order.Created",
			"eventTime": time.Now().UTC().Format(time.RFC3339), "dataVersion": "1", "data": map[string]any{"n": i},
		}); err != nil {
			return err
		}
	}
	for range 3 {
		select {
		case m := <-msgs:
			log.Printf("NATS got %s (aeg-subscription-name %s)", m.UUID, m.Metadata.Get("aeg-subscription-name"))
			m.Ack()
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}
