package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// hungLoads is a store whose subscription state loads wait until release is called (or their
// context ends): a disk that stopped answering.
type hungLoads struct {
	store.Store
	gate    chan struct{}
	release func()
}

func newHungLoads() *hungLoads {
	h := &hungLoads{Store: store.NewMemory(), gate: make(chan struct{})}
	h.release = sync.OnceFunc(func() { close(h.gate) })
	return h
}

func (h *hungLoads) LoadSubscriptionIndex(ctx context.Context, topic, sub string) (store.SubscriptionState, error) {
	select {
	case <-h.gate:
	case <-ctx.Done():
		return store.SubscriptionState{}, ctx.Err()
	}
	return h.Store.LoadSubscriptionIndex(ctx, topic, sub)
}

// While a subscription's state load hangs, GET of the subscription answers once the load has
// run for a second (and at once after that), its deliveryState saying only that it is loading
// and since when (no backlog or probation that
// would read as an idle, healthy subscription), and POST …/endProbation answers 503 with
// Retry-After and a message that says why and to try again, having changed nothing. Both
// waited for the load before (the GET then showed no deliveryState at all once its ask timed
// out). Once the state is in, GET shows the real delivery state.
func TestSubscriptionLoadingShowsInTheAdminAPI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newHungLoads() // in the bubble: its loads wait durably
		h := testkit.New(t, testkit.WithStore(st))
		defer h.Close()
		defer st.release()
		h.Subscribe("orders", "billing", router.SubscriptionSpec{Destination: router.WebHook(h.Endpoint("hook").URL())})
		started := time.Now()
		h.Settle() // the actor is loading, held up
		api := httpapi.New(h.Router())
		do := func(method, path string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, localRequest(method, path, nil))
			return rec
		}
		const path = "/admin/topics/orders/eventSubscriptions/billing"
		deliveryState := func(rec *httptest.ResponseRecorder) map[string]any {
			t.Helper()
			var body struct {
				Properties struct {
					DeliveryState map[string]any `json:"deliveryState"`
				} `json:"properties"`
			}
			if rec.Code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			return body.Properties.DeliveryState
		}

		ds := deliveryState(do(http.MethodGet, path))
		if waited := time.Since(started); waited != time.Second {
			t.Errorf("GET answered %v after it was asked, want when the load had run for a second", waited)
		}
		if want := started.UTC().Format(time.RFC3339Nano); len(ds) != 2 || ds["loading"] != true || ds["loadingSince"] != want {
			t.Errorf("deliveryState while loading = %v, want only loading: true and loadingSince: %s", ds, want)
		}

		rec := do(http.MethodPost, path+"/endProbation")
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
			!strings.Contains(rec.Body.String(), "still loading its state") || !strings.Contains(rec.Body.String(), "try again") {
			t.Errorf("endProbation while loading = %d (Retry-After %q) %s; want 503 with Retry-After, saying it is loading and to try again",
				rec.Code, rec.Header().Get("Retry-After"), rec.Body)
		}
		if waited := time.Since(started) - time.Second; waited != 0 {
			t.Errorf("endProbation answered %v after it was asked, want at once (the load has run for over a second)", waited)
		}

		st.release()
		h.Settle()
		ds = deliveryState(do(http.MethodGet, path))
		if _, loading := ds["loading"]; loading || ds["backlog"] != 0.0 || ds["probation"] != false {
			t.Errorf("deliveryState after the load = %v, want the real one: backlog 0, no probation, not loading", ds)
		}
		if rec := do(http.MethodPost, path+"/endProbation"); rec.Code != http.StatusOK {
			t.Errorf("endProbation after the load = %d %s, want 200", rec.Code, rec.Body)
		}
	})
}
