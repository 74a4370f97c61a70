package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
)

// TestReceiveReleasesWhatItsGoneClientTook serves a receive whose client goes away as its
// event is taken, before the answer: the event is released at once, so the next receive gets
// it (its delivery count raised, as it was handed out) rather than after its lock's minute.
func TestReceiveReleasesWhatItsGoneClientTook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, api := newFuzzAPI(t)
		ctx := context.Background()
		spec, err := r.CreateTopic(ctx, "nsq", router.TopicSpec{Kind: router.KindNamespace})
		if err != nil {
			t.Fatal(err)
		}
		queue := router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}}
		if err := r.CreateSubscription(ctx, "nsq", "que", queue); err != nil {
			t.Fatal(err)
		}
		ev := json.RawMessage(`{"specversion":"1.0","id":"e1","source":"/s","type":"T"}`)
		if err := r.Publish(ctx, "nsq", ev); err != nil {
			t.Fatal(err)
		}

		reqCtx, gone := context.WithCancel(ctx)
		defer httpapi.SetAfterReceive(func(*http.Request) { gone() })()
		req := httptest.NewRequestWithContext(reqCtx, http.MethodPost, "/topics/nsq/eventsubscriptions/que:receive?maxEvents=1&maxWaitTime=10", nil)
		req.Header.Set("Aeg-Sas-Key", spec.Key1)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Body.Len() != 0 {
			t.Fatalf("the gone client's receive was answered %d %s; want no answer", rec.Code, rec.Body)
		}
		start := time.Now()
		got, err := r.Receive(ctx, "nsq", "que", router.ReceiveOptions{MaxEvents: 1, MaxWait: router.MinReceiveWait})
		if err != nil || len(got) != 1 || got[0].DeliveryCount != 2 {
			t.Fatalf("next receive: %d events, %v; want e1 again, its second delivery", len(got), err)
		}
		if waited := time.Since(start); waited >= router.DefaultReceiveLockDuration {
			t.Fatalf("e1 came back after %v; want it released at once, not after its lock", waited)
		}
	})
}
