package router_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
)

// Explain of an event a subscription has no history of, when the subscription runs no actor
// (it awaits its validation), is ErrEventNotFound (404), not a 503 that asks to retry for ever.
func TestExplainOfAnUnknownEventOnASubscriptionAwaitingValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBubble(t, router.Config{PublicURL: "http://egrid.test"})
		b.tr.Handle("hook.test", &timedHook{start: time.Now(), answer: func(int, http.ResponseWriter, *http.Request, []byte) {}})
		if err := b.r.CreateSubscription(context.Background(), "orders", "sub", router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}); err != nil {
			t.Fatal(err)
		}
		if p := b.state("sub"); p.State != router.StateAwaitingManualAction {
			t.Fatalf("state %s", p.State)
		}
		_, err := b.r.Explain(context.Background(), "orders", "sub", "nope")
		if !errors.Is(err, router.ErrEventNotFound) {
			t.Fatalf("Explain of an unknown event = %v; want ErrEventNotFound (404); ErrSubscriptionNotRunning? %v", err, errors.Is(err, router.ErrSubscriptionNotRunning))
		}
	})
}
