package router_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

func (h *manualHook) with(f func(h *manualHook)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func (h *manualHook) validated() (n int, lastURL string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validations, h.lastURL
}

// TestEnsureSubscriptionLeavesAValidatedDefinitionAsItIs restarts a router whose store holds
// a manually validated WebHook subscription with a parked event, and applies the same
// definition again, as egrid serve applies its YAML config at every start: EnsureSubscription
// sends no validation and leaves it Succeeded, and the event is delivered once its endpoint is
// back (validating again put it back to AwaitingManualAction, and the window, unanswered,
// dropped the event). An endpoint that is down meanwhile does not fail it either, where
// CreateSubscription, an update, still validates (as Event Grid does); a changed definition
// is validated.
func TestEnsureSubscriptionLeavesAValidatedDefinitionAsItIs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := &manualHook{manual: true, status: http.StatusServiceUnavailable}
		tr := testkit.NewTransport()
		tr.Handle("hook.test", h)
		st := keptJournalStore{store.NewMemory()}
		spec := router.SubscriptionSpec{Destination: router.WebHook("http://hook.test/")}
		newRouter := func() *router.Router {
			r, err := router.New(router.Config{PublicURL: "http://egrid.test"}, router.Deps{Store: st, HTTPClient: &http.Client{Transport: tr}})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		r1 := newRouter()
		if _, err := r1.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
			t.Fatal(err)
		}
		if err := r1.EnsureSubscription(ctx, "orders", "sub", spec); err != nil { // the first start
			t.Fatal(err)
		}
		_, last := h.validated()
		u, err := url.Parse(last)
		if err != nil {
			t.Fatal(err)
		}
		if err := r1.CompleteValidation(ctx, "sub", u.Query().Get("token")); err != nil {
			t.Fatal(err)
		}
		if err := r1.Publish(ctx, "orders", gridEvent("accepted-1")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // attempted: 503, parked for its retry
		if err := r1.Close(ctx); err != nil {
			t.Fatal(err)
		}

		r2 := newRouter() // the restart, applying the same config
		defer r2.Close(ctx)
		h.with(func(h *manualHook) { h.validation = http.StatusServiceUnavailable }) // the endpoint is down
		if err := r2.EnsureSubscription(ctx, "orders", "sub", spec); err != nil {
			t.Fatalf("EnsureSubscription of the unchanged definition, its endpoint down: %v; want nil", err)
		}
		if p, _ := r2.Provisioning("orders", "sub"); p.State != router.StateSucceeded {
			t.Fatalf("after EnsureSubscription of the unchanged definition: %s; want Succeeded", p.State)
		}
		if n, _ := h.validated(); n != 1 {
			t.Fatalf("after EnsureSubscription of the unchanged definition: %d validations; want no new one", n)
		}
		if err := r2.CreateSubscription(ctx, "orders", "sub", spec); !errors.Is(err, router.ErrValidationFailed) {
			t.Fatalf("CreateSubscription (an update) with the endpoint down: %v; want ErrValidationFailed", err)
		}

		h.with(func(h *manualHook) { h.validation, h.status = 0, http.StatusOK }) // back
		testkit.Advance(router.ManualValidationWindow + time.Hour)
		synctest.Wait()
		if got := h.accepted(); !slices.Equal(got, []string{"accepted-1"}) {
			t.Fatalf("delivered %v; want the accepted event delivered after the restart", h.accepted())
		}

		before, _ := h.validated()
		changed := spec
		changed.Labels = []string{"v2"}
		if err := r2.EnsureSubscription(ctx, "orders", "sub", changed); err != nil {
			t.Fatal(err)
		}
		if p, _ := r2.Provisioning("orders", "sub"); p.State != router.StateAwaitingManualAction {
			t.Fatalf("after EnsureSubscription of a changed definition: %s; want AwaitingManualAction", p.State)
		}
		if n, _ := h.validated(); n != before+1 {
			t.Fatalf("after EnsureSubscription of a changed definition: %d validations; want one more than %d", n, before)
		}
	})
}
