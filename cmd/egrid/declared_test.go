package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/testkit"
)

// TestServeKeepsADeclaredSubscriptionItsEndpointDoesNotValidate applies a config to a router
// whose store holds its WebHook subscription, validated, while the endpoint is down: the
// unchanged definition is left as it is (no validation), and a changed one the endpoint does
// not validate is logged as an ERROR and the start goes on, the stored definition delivering,
// where the start stopped (exit 2) and took every topic down with it; without a logger it is
// still reported as an error.
func TestServeKeepsADeclaredSubscriptionItsEndpointDoesNotValidate(t *testing.T) {
	synctest.Test(t, testServeKeepsADeclaredSubscription)
}

func testServeKeepsADeclaredSubscription(t *testing.T) {
	ctx := context.Background()
	var down atomic.Bool
	var validations atomic.Int32
	tr := testkit.NewTransport()
	tr.Handle("hook.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("aeg-event-type") != "SubscriptionValidation" {
			return
		}
		validations.Add(1)
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var evs []struct {
			Data struct {
				ValidationCode string `json:"validationCode"`
			} `json:"data"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &evs); err != nil || len(evs) != 1 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"validationResponse": evs[0].Data.ValidationCode})
	}))
	config := func(label string) *fileConfig {
		file, err := decodeConfig([]byte(fmt.Sprintf(`topics:
  - name: orders
    eventSubscriptions:
      - name: billing
        properties:
          destination: {endpointType: WebHook, properties: {endpointUrl: "http://hook.test/hook"}}
          labels: [%s]
`, label)), func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return file
	}
	st := store.NewMemory()
	newRouter := func() *router.Router {
		r, err := router.New(router.Config{}, router.Deps{Store: st, HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := newRouter()
	if err := applyDeclared(ctx, r, config("v1"), nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}

	down.Store(true)
	r = newRouter()
	defer r.Close(ctx)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if err := applyDeclared(ctx, r, config("v1"), log); err != nil || validations.Load() != 1 {
		t.Fatalf("applying the unchanged config, the endpoint down: %v, %d validations; want nil and no new validation", err, validations.Load())
	}
	if err := applyDeclared(ctx, r, config("v2"), log); err != nil {
		t.Fatalf("applying a changed config, the endpoint down: %v; want it logged and the start going on", err)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "did not validate its changed definition") {
		t.Fatalf("log %q; want an ERROR saying the changed definition was not validated", logs.String())
	}
	if spec, err := r.Subscription("orders", "billing"); err != nil || len(spec.Labels) != 1 || spec.Labels[0] != "v1" {
		t.Fatalf("stored definition %+v, %v; want the previous one (label v1) in place", spec.Labels, err)
	}
	if p, _ := r.Provisioning("orders", "billing"); p.State != router.StateSucceeded {
		t.Fatalf("provisioning %s; want Succeeded, the stored definition delivering", p.State)
	}
	if err := applyDeclared(ctx, r, config("v2"), nil); err == nil || !strings.Contains(err.Error(), "validation failed") {
		t.Fatalf("applying it without a logger (egrid validate): %v; want the validation failure reported", err)
	}
}
