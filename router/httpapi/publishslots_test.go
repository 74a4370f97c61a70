package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/httpserver"
	"github.com/egridio/egrid/router/metrics"
)

// A publish with the key of a known topic turned away 429 because every publish slot is
// taken (--max-publish-bodies) counts in PublishFailCount{topic, TooManyRequests}, as the
// topic's other refusals count by their codes; publishes to a topic that does not exist, with
// a key or without, create no series, so the series stay bounded by the topics.
func TestPublishRefusedForFullSlotsIsCounted(t *testing.T) {
	r, err := router.New(router.Config{}, router.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	spec, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{})
	if err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(r)
	// One slot, taken here for the whole test; a publish waits no time for it.
	slots := httpserver.NewBodyLimit(1, 0)
	release, ok := slots.Admit(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	if !ok {
		t.Fatal("the only publish slot could not be taken")
	}
	defer release()
	api.AdmitBodies(slots.Admit)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	s := &server{t: t, r: r, srv: srv, key1: spec.Key1}

	key := http.Header{"Aeg-Sas-Key": {spec.Key1}}
	body := []byte("[" + egEvent("1") + "]")
	for i := range 2 {
		if status, answer := s.post("/topics/orders/api/events", "application/json", body, key); status != http.StatusTooManyRequests || !strings.Contains(answer, `"code":"TooManyRequests"`) {
			t.Fatalf("publish %d with the key while every slot is taken: %d %s; want 429 TooManyRequests", i+1, status, answer)
		}
	}
	for _, h := range []http.Header{key, nil} {
		if status, answer := s.post("/topics/nope/api/events", "application/json", body, h); status != http.StatusUnauthorized {
			t.Fatalf("publish to a topic that does not exist (header %v): %d %s; want 401", h, status, answer)
		}
	}

	if got := r.Metrics().Get(metrics.Key{Name: metrics.PublishFailCount, Scope: "orders", Dim: "TooManyRequests"}); got != 2 {
		t.Errorf("PublishFailCount{orders, TooManyRequests} = %d, want 2", got)
	}
	for _, k := range r.Metrics().Snapshot().Keys() {
		if !strings.HasPrefix(k.Scope, "orders") {
			t.Errorf("series %s: a publish to a topic that does not exist created a series", k)
		}
	}
}
