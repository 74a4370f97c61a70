// Command deadletter shows egrid's dead-lettering end to end (SPEC §5): a subscription whose
// webhook always fails, its dead letters landing in MinIO as one object per flush, a handler
// subscribed to the notification topic receiving Microsoft.Storage.BlobCreated for each
// object, and a replay of the dead letters once the webhook is healthy again.
//
//	minio server /tmp/minio-data &                  # any MinIO; minioadmin/minioadmin by default
//	go run ./examples/deadletter -minio 127.0.0.1:9000 -access-key minioadmin -secret-key minioadmin
//
// The router runs 60 times faster than real time, so the five-minute dead-letter delay takes
// five seconds.
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
	"sync/atomic"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/blob"
)

// Options say where MinIO is and how fast the demo runs.
type Options struct {
	MinIO blob.Config
	// TimeScale runs every policy delay (retries, the dead-letter delay) this many times faster.
	TimeScale float64
	// DeadLetterDelay is the dead-letter delay before scaling (default 5 min).
	DeadLetterDelay time.Duration
}

// Run runs the demo and reports what happens on out: three orders fail, are dead-lettered to
// the bucket "orders-deadletters", announced to the handler, and replayed to the repaired
// webhook. It returns the replay's summary.
func Run(ctx context.Context, opts Options, out io.Writer) (*router.ReplaySummary, error) {
	store, err := blob.New(opts.MinIO, nil)
	if err != nil {
		return nil, err
	}

	// The webhook: broken (500) until repaired.
	var repaired atomic.Bool
	delivered := make(chan string, 100)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	webhook := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var evs []struct{ ID string }
		_ = json.NewDecoder(r.Body).Decode(&evs)
		if !repaired.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		for _, e := range evs {
			delivered <- e.ID
		}
	})}
	go func() { _ = webhook.Serve(ln) }()
	defer webhook.Close()

	// The dead-letter handler: a Go function subscribed to the notification topic.
	type notification struct {
		Subject string
		Data    router.BlobCreatedData
	}
	notified := make(chan notification, 100)
	onDeadLetters := sinks.Func(func(_ context.Context, b *sinks.Batch) error {
		var evs []notification
		if err := json.Unmarshal(b.Body, &evs); err != nil {
			return err
		}
		for _, e := range evs {
			notified <- e
		}
		return nil
	})

	r, err := router.New(router.Config{
		TimeScale: opts.TimeScale, SkipEndpointValidation: true,
		DeadLetters: router.DeadLetterConfig{Delay: opts.DeadLetterDelay},
	}, router.Deps{DeadLetterStore: store, Sinks: map[string]sinks.Sink{"on-dead-letters": onDeadLetters}})
	if err != nil {
		return nil, err
	}
	defer r.Close(context.Background())

	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		return nil, err
	}
	spec := router.SubscriptionSpec{
		Destination:           router.WebHook("http://" + ln.Addr().String() + "/orders"),
		RetryPolicy:           router.RetryPolicy{MaxDeliveryAttempts: 3},
		DeadLetterDestination: &router.DeadLetterDestination{EndpointType: "StorageBlob"},
	}
	spec.Destination.Properties.MaxEventsPerBatch = 10
	spec.DeadLetterDestination.Properties.BlobContainerName = "orders-deadletters"
	if err := r.CreateSubscription(ctx, "orders", "fulfilment", spec); err != nil {
		return nil, err
	}
	if err := r.CreateSubscription(ctx, router.DefaultDeadLetterTopic, "on-dead-letters", router.SubscriptionSpec{
		Destination: router.SinkDestination("on-dead-letters"),
	}); err != nil {
		return nil, err
	}

	ids := []string{"order-1", "order-2", "order-3"}
	var events []any
	for _, id := range ids {
		events = append(events, map[string]any{
			"id": id, "subject": "/orders/" + id, "eventType": "Order.Created",
			"eventTime": time.Now().UTC().Format(time.RFC3339), "data": map[string]any{"id": id},
		})
	}
	if err := r.Publish(ctx, "orders", events...); err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "published 3 orders; the webhook answers 500 to every attempt")

	// Each object is announced; read the records once all three orders are in.
	var read *router.DeadLetterRead
	for read == nil || len(read.Entries) < len(ids) {
		select {
		case n := <-notified:
			fmt.Fprintf(out, "handler: BlobCreated %s (%d bytes)\n", n.Subject, n.Data.ContentLength)
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the dead letters: %w", ctx.Err())
		}
		if read, err = r.DeadLetterRecords(ctx, "orders", "fulfilment", router.DeadLetterQuery{}); err != nil {
			return nil, err
		}
	}
	for _, e := range read.Entries {
		fmt.Fprintf(out, "dead letter %s: %s after %d attempts (last status %d) in %s\n",
			e.Event.ID, e.Reason, e.DeliveryAttempts, e.LastHTTPStatus, e.Object)
	}

	repaired.Store(true)
	fmt.Fprintln(out, "webhook repaired; replaying")
	sum, err := r.ReplayDeadLetters(ctx, "orders", "fulfilment", router.ReplayOptions{
		Wait: true,
		Progress: func(p router.ReplayProgress) {
			fmt.Fprintf(out, "replay %s %d/%d\n", p.Stage, p.Done, p.Total)
		},
	})
	if err != nil {
		return nil, err
	}
	for range sum.Delivered {
		fmt.Fprintf(out, "webhook received %s\n", <-delivered)
	}
	fmt.Fprintf(out, "replayed %d, delivered %d, dead-lettered again %d\n", sum.Replayed, sum.Delivered, sum.DeadLettered)
	return sum, nil
}

func main() {
	var opts Options
	flag.StringVar(&opts.MinIO.Endpoint, "minio", "127.0.0.1:9000", "MinIO host:port")
	flag.StringVar(&opts.MinIO.AccessKey, "access-key", "minioadmin", "MinIO access key")
	flag.StringVar(&opts.MinIO.SecretKey, "secret-key", "minioadmin", "MinIO secret key")
	flag.Float64Var(&opts.TimeScale, "time-scale", 60, "run policy delays this many times faster")
	flag.Parse()
	opts.MinIO.CreateBuckets = true
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := Run(ctx, opts, os.Stdout); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			log.Fatalf("%v (is MinIO running at %s?)", err, opts.MinIO.Endpoint)
		}
		log.Fatal(err)
	}
}
