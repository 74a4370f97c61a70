package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
)

// A body sent compressed is answered 415 with a message naming its Content-Encoding, on every
// route that reads a body, as a publish is: egrid does not decode it. Before, a definition,
// a settle request or a replay request sent with Content-Encoding: gzip was refused as JSON
// that is not valid ("invalid character '\x1f'"), which named no cause.
func TestCompressedBodiesAre415(t *testing.T) {
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
	gz := "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
	for _, c := range []struct{ name, method, path, key string }{
		{"a topic definition", "PUT", "/admin/topics/nsq", ""},
		{"an event subscription definition", "PUT", "/admin/topics/nsq/eventSubscriptions/que", ""},
		{"a replay request", "POST", "/admin/topics/nsq/eventSubscriptions/que/deadLetters/replay", ""},
		{"an acknowledge", "POST", "/topics/nsq/eventsubscriptions/que:acknowledge", spec.Key1},
		{"a release", "POST", "/topics/nsq/eventsubscriptions/que:release", spec.Key1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{"Content-Encoding": {"gzip"}, "Content-Type": {"application/json"}}
			if c.key != "" {
				h.Set("Aeg-Sas-Key", c.key)
				h.Set("Authorization", "none")
			}
			rec := fuzzDo(api, c.method, c.path, h, []byte(gz))
			var e struct {
				Error struct{ Code, Message string }
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != http.StatusUnsupportedMediaType || !strings.Contains(e.Error.Message, `Content-Encoding "gzip"`) || !strings.Contains(e.Error.Message, "uncompressed") {
				t.Errorf("%d %s, want 415 naming Content-Encoding gzip and saying to send the body uncompressed", rec.Code, rec.Body)
			}
		})
	}
	// identity is no coding: the body is read as it is.
	rec := fuzzDo(api, "PUT", "/admin/topics/nsq", http.Header{"Content-Encoding": {"identity"}}, []byte(`{"properties":{"kind":"namespace"}}`))
	if rec.Code != http.StatusOK {
		t.Errorf("PUT with Content-Encoding identity: %d %s, want 200", rec.Code, rec.Body)
	}
}
