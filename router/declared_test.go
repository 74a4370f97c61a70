package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// declaredHook is a WebHook endpoint that validates by hand (200 without validationResponse,
// remembering the validationUrl) or answers validations with validation (when not 0), counts
// them, and answers notifications with status, recording the events it accepts.
type declaredHook struct {
	mu          sync.Mutex
	validation  int
	status      int
	validations int
	lastURL     string
	delivered   []string
}

func (h *declaredHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.Header.Get("aeg-event-type") {
	case "SubscriptionValidation":
		h.validations++
		if h.validation != 0 {
			w.WriteHeader(h.validation)
			return
		}
		h.lastURL = validationData(body).ValidationURL
	case "Notification":
		if h.status != http.StatusOK {
			w.WriteHeader(h.status)
			return
		}
		var evs []struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(body, &evs)
		for _, e := range evs {
			h.delivered = append(h.delivered, e.ID)
		}
	}
}

func (h *declaredHook) set(f func(h *declaredHook)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
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
		h := &declaredHook{status: http.StatusServiceUnavailable}
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
		u, err := url.Parse(h.lastURL)
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
		h.set(func(h *declaredHook) { h.validation = http.StatusServiceUnavailable }) // the endpoint is down
		if err := r2.EnsureSubscription(ctx, "orders", "sub", spec); err != nil {
			t.Fatalf("EnsureSubscription of the unchanged definition, its endpoint down: %v; want nil", err)
		}
		if p, _ := r2.Provisioning("orders", "sub"); p.State != router.StateSucceeded || h.validations != 1 {
			t.Fatalf("after EnsureSubscription of the unchanged definition: %s, %d validations; want Succeeded and no new validation", p.State, h.validations)
		}
		if err := r2.CreateSubscription(ctx, "orders", "sub", spec); !errors.Is(err, router.ErrValidationFailed) {
			t.Fatalf("CreateSubscription (an update) with the endpoint down: %v; want ErrValidationFailed", err)
		}

		h.set(func(h *declaredHook) { h.validation, h.status = 0, http.StatusOK }) // back
		testkit.Advance(router.ManualValidationWindow + time.Hour)
		synctest.Wait()
		h.mu.Lock()
		got := slices.Clone(h.delivered)
		h.mu.Unlock()
		if !slices.Equal(got, []string{"accepted-1"}) {
			t.Fatalf("delivered %v; want the accepted event delivered after the restart", got)
		}

		h.mu.Lock()
		before := h.validations
		h.mu.Unlock()
		changed := spec
		changed.Labels = []string{"v2"}
		if err := r2.EnsureSubscription(ctx, "orders", "sub", changed); err != nil {
			t.Fatal(err)
		}
		if p, _ := r2.Provisioning("orders", "sub"); p.State != router.StateAwaitingManualAction || h.validations != before+1 {
			t.Fatalf("after EnsureSubscription of a changed definition: %s, %d validations; want AwaitingManualAction after one more than %d", p.State, h.validations, before)
		}
	})
}
