package router_test

import (
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/testkit"
)

// Retry-After is an egrid extension (Azure documents no Retry-After handling:
// learn.microsoft.com/azure/event-grid/delivery-and-retry). Config.HonorRetryAfter turns it on
// for every subscription; retryPolicy.honorRetryAfter overrides it either way.
func TestHonorRetryAfterSwitches(t *testing.T) {
	for _, tt := range []struct {
		name      string
		server    bool
		sub       *bool
		wantRetry time.Duration // when the second attempt goes out
	}{
		{"off by default: the 10 s floor", false, nil, 10 * time.Second},
		{"server switch on", true, nil, 90 * time.Second},
		{"subscription on", false, ptr(true), 90 * time.Second},
		{"subscription off beats the server", true, ptr(false), 10 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				hook := h.Endpoint("hook", testkit.RetryAfter(429, 90*time.Second))
				h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{MaxDeliveryAttempts: 2, HonorRetryAfter: tt.sub})
				h.Publish("orders", h.EventGridEvent())
				h.Advance(5 * time.Minute)
				hook.RequireAttempts(t, 2)
				if got := hook.Attempts()[1].At - hook.Attempts()[0].At; got != tt.wantRetry {
					t.Errorf("second attempt %s after the first, want %s", got, tt.wantRetry)
				}
			}, testkit.WithConfig(router.Config{HonorRetryAfter: tt.server}), testkit.WithoutJitter())
		})
	}
}

func ptr[T any](v T) *T { return &v }

// Config.AzureSubscriptionID and Config.ResourceGroup give topics the ARM IDs the user's Azure
// topics have (/subscriptions/<id>/resourceGroups/<group>/providers/Microsoft.EventGrid/topics/<name>,
// the shape of the topic field in learn.microsoft.com/azure/event-grid/event-schema), stamped
// into every event's topic.
func TestResourceIDsFollowTheConfig(t *testing.T) {
	const want = "/subscriptions/5f0c1a52-8a3d-4f7e-9d51-0c6a8f7b2e10/resourceGroups/rg-prod/providers/Microsoft.EventGrid/topics/orders"
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		if got := h.Router().TopicID("orders"); got != want {
			t.Errorf("TopicID = %s, want %s", got, want)
		}
		hook := h.Endpoint("hook")
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent())
		h.Settle()
		hook.RequireAttempts(t, 1)
		if body := string(hook.Attempts()[0].Body); !strings.Contains(body, `"topic":"`+want+`"`) {
			t.Errorf("delivered %s; want topic %s", body, want)
		}
	}, testkit.WithConfig(router.Config{AzureSubscriptionID: "5f0c1a52-8a3d-4f7e-9d51-0c6a8f7b2e10", ResourceGroup: "rg-prod"}))

	for _, bad := range []router.Config{
		{AzureSubscriptionID: "my-subscription"},
		{ResourceGroup: "ends-with-a-dot."},
		{ResourceGroup: "rg", ResourceIDPrefix: "/x"},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
	if err := (router.Config{}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}
