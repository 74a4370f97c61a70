package cluster_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/testkit"
)

// A node looks a topic it does not know up in the cluster's store (created on another node a
// moment ago). When the store cannot answer — NATS is away — the publish is refused as
// unavailable, which publishers retry, not as a topic that does not exist: from Go, and over
// HTTP (publish and pull) a 503 with Retry-After; a client that went away meanwhile gets no
// answer.
func TestPublishToAnUnknownTopicWhileTheStoreIsAwayIsUnavailable(t *testing.T) {
	nc := testkit.StartNATSCluster(t, 1)
	c := testkit.StartCluster(t, testkit.ClusterConfig{Nodes: 1, NATS: nc, Config: router.Config{InsecureDev: true}})
	nc.Kill(0)
	defer nc.Restart(0) // the node's Close finds NATS again

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ev := map[string]any{"id": "1", "subject": "/s", "eventType": "T", "eventTime": "2026-01-01T00:00:00Z", "data": map[string]any{}, "dataVersion": "1"}
	err := c.Router(0).Publish(ctx, "orders", ev)
	if !errors.Is(err, router.ErrUnavailable) || errors.Is(err, router.ErrTopicNotFound) {
		t.Errorf("publish to a topic the node does not know, with the store away: %v; want unavailable, not topic not found", err)
	}
	if _, err := c.Router(0).Topic("orders"); !errors.Is(err, router.ErrUnavailable) {
		t.Errorf("the topic's definition, with the store away: %v; want unavailable", err)
	}

	// Over HTTP: 503 with Retry-After, which publishers and consumers retry, saying what
	// happened; it was answered as a topic that does not exist (401, or 404 here under
	// --insecure-dev), which Azure's SDKs do not retry.
	h := httpapi.New(c.Router(0))
	for _, tt := range []struct{ name, target, contentType, body string }{
		{"classic publish", "/topics/orders/api/events", "application/json", `[{"id":"1","subject":"/s","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{},"dataVersion":"1"}]`},
		{":publish", "/topics/jobs:publish", "application/cloudevents+json", `{"specversion":"1.0","id":"1","source":"/s","type":"T"}`},
		{"receive", "/topics/jobs/eventsubscriptions/workers:receive?maxWaitTime=10", "", ""},
		{"acknowledge", "/topics/jobs/eventsubscriptions/workers:acknowledge", "application/json", `{"lockTokens":["x"]}`},
	} {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, tt.target, strings.NewReader(tt.body))
		req.Host = "localhost" // --insecure-dev lets in requests without credentials from this machine only (router/devguard)
		if tt.contentType != "" {
			req.Header.Set("Content-Type", tt.contentType)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if body := rec.Body.String(); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
			!strings.Contains(body, `"code":"ServiceUnavailable"`) || !strings.Contains(body, "store") || !strings.Contains(body, "retry") {
			t.Errorf("%s to a topic the node does not know, with the store away: %d (Retry-After %q) %s; want 503 with Retry-After, saying the store could not be read and to retry",
				tt.name, rec.Code, rec.Header().Get("Retry-After"), body)
		}
	}

	// A client gone while the node waits for the store is not answered.
	gone, leave := context.WithCancel(ctx)
	leave()
	req := httptest.NewRequestWithContext(gone, http.MethodPost, "/topics/orders/api/events", strings.NewReader(`[]`))
	req.Host = "localhost" // --insecure-dev lets in requests without credentials from this machine only (router/devguard)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Body.Len() != 0 || len(rec.Header()) != 0 {
		t.Errorf("a publish whose client went away while the node read the store was answered %d %v %s; want no answer", rec.Code, rec.Header(), rec.Body)
	}
}
