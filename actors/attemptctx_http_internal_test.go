package actors

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// An attempt's context bounds a real delivery over HTTP, through the webhook sink's own
// client, whose transport derives its context per request from it: the attempt timeout ends
// the request as TimedOut, and the incarnation's end ends it as Canceled. Either way the
// endpoint sees its request go away.
func TestAttemptContextEndsARealRequest(t *testing.T) {
	arrived, gone, stop := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a closed connection once it is read
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			gone <- struct{}{}
		case <-stop: // the test failed; let srv.Close return
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) }) // runs first
	sink, err := webhook.New(webhook.Config{URL: srv.URL + "/hook"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	batch := &sinks.Batch{Subscription: "s", Body: []byte(`[]`)}
	deliver := func(ctx context.Context) error {
		t.Helper()
		res := make(chan error, 1)
		go func() { res <- sink.Deliver(ctx, batch) }()
		select {
		case err := <-res:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Deliver did not return when the attempt's context ended")
			return nil
		}
	}
	waitGone := func() {
		t.Helper()
		select {
		case <-gone:
		case <-time.After(10 * time.Second):
			t.Fatal("the endpoint's request was not ended")
		}
	}

	t.Run("timeout", func(t *testing.T) {
		inc, cancel := context.WithCancel(context.Background())
		defer cancel()
		k := newAttemptClock(inc, context.WithoutCancel(inc))
		defer k.close()
		ctx := k.begin(100 * time.Millisecond)
		err := deliver(ctx)
		k.finish(ctx)
		var de *sinks.DeliveryError
		if !errors.As(err, &de) || de.Outcome != schemas.TimedOut || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Deliver = %v; want TimedOut wrapping DeadlineExceeded", err)
		}
		<-arrived
		waitGone()
	})

	t.Run("incarnation ends", func(t *testing.T) {
		inc, cancel := context.WithCancel(context.Background())
		defer cancel()
		k := newAttemptClock(inc, context.WithoutCancel(inc))
		defer k.close()
		ctx := k.begin(time.Hour)
		go func() {
			<-arrived
			cancel()
		}()
		err := deliver(ctx)
		k.finish(ctx)
		var de *sinks.DeliveryError
		if !errors.As(err, &de) || de.Outcome != schemas.Canceled {
			t.Fatalf("Deliver = %v; want Canceled", err)
		}
		waitGone()
	})
}
