package router_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/actors/deadletter"
	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// Subscriptions of one name on two topics that dead-letter to one bucket write under one key
// prefix (Event Grid's classic key names only the subscription, upper-cased). Listing,
// reading and replaying one topic's dead letters take its objects only: in every schema, and
// whether or not a record would name its topic.
func TestDeadLettersOfTwoTopicsInOneBucket(t *testing.T) {
	tests := []struct {
		name, input, delivery string
	}{
		{"EventGrid", "", ""},
		{"EventGridDeliveredAsCloudEvents", "", "CloudEventSchemaV1_0"},
		{"CloudEvents", "CloudEventSchemaV1_0", "CloudEventSchemaV1_0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				var healthy atomic.Bool
				hooks := map[string]*testkit.Endpoint{}
				for _, topic := range []string{"orders", "returns"} {
					h.CreateTopic(topic, router.TopicSpec{InputSchema: tt.input})
					hooks[topic] = h.Endpoint(topic, switchable(&healthy, http.StatusBadRequest))
					spec := router.SubscriptionSpec{Destination: router.WebHook(hooks[topic].URL()), EventDeliverySchema: tt.delivery}
					spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
					spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
					h.Subscribe(topic, "billing", spec)
				}
				event := h.EventGridEvent
				if tt.input != "" {
					event = h.CloudEvent
				}
				h.Publish("orders", event(testkit.ID("o1")), event(testkit.ID("o2")))
				h.Publish("returns", event(testkit.ID("r1")))
				h.Advance(6 * time.Minute)
				if n := len(h.DeadLetterObjects().Objects("deadletters")); n != 2 {
					t.Fatalf("%d objects in the bucket, want one per topic", n)
				}
				ctx := context.Background()
				for topic, want := range map[string][]string{"orders": {"o1", "o2"}, "returns": {"r1"}} {
					objs, err := listedObjects(h.Router().DeadLetterObjects(ctx, topic, "billing", router.DeadLetterQuery{}))
					if err != nil {
						t.Fatal(err)
					}
					if len(objs) != 1 || !strings.HasPrefix(objs[0].Key, "BILLING/") {
						t.Errorf("%s: listed %d objects (%v), want its one object under BILLING/", topic, len(objs), objs)
					}
					read, err := h.Router().DeadLetterRecords(ctx, topic, "billing", router.DeadLetterQuery{})
					if err != nil {
						t.Fatal(err)
					}
					var got []string
					for _, e := range read.Entries {
						got = append(got, e.Event.ID)
					}
					slices.Sort(got)
					if !slices.Equal(got, want) || read.Objects != 1 || len(read.Problems) != 0 {
						t.Errorf("%s: read %v from %d objects with problems %q, want %v from one object", topic, got, read.Objects, read.Problems, want)
					}
				}

				healthy.Store(true)
				sum, err := h.Router().ReplayDeadLetters(ctx, "orders", "billing", router.ReplayOptions{Wait: true})
				if err != nil {
					t.Fatal(err)
				}
				if sum.Replayed != 2 || sum.Delivered != 2 || len(sum.Problems) != 0 {
					t.Errorf("replay of orders: %+v, want its 2 events replayed and delivered", sum)
				}
				var replayed []string
				for _, a := range hooks["orders"].Attempts()[2:] {
					replayed = append(replayed, a.EventIDs()...)
				}
				slices.Sort(replayed)
				if !slices.Equal(replayed, []string{"o1", "o2"}) {
					t.Errorf("the replay delivered %v to orders' subscription, want o1 and o2 only", replayed)
				}
				h.Advance(time.Hour)
				hooks["returns"].RequireAttempts(t, 1) // returns' subscription never sees a replay of orders
			})
		})
	}
}

// An object without the topic metadata — written before egrid wrote it — is read as the
// dead letters of whichever topic's subscription reads its prefix, as before.
func TestDeadLetterObjectWithoutTopicMetadata(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		h.Publish("orders", h.EventGridEvent(testkit.ID("e1")))
		h.Advance(6 * time.Minute)
		store := h.DeadLetterObjects()
		objs := store.Objects("deadletters")
		if len(objs) != 1 || objs[0].Metadata[deadletter.TopicMetadata] != "orders" {
			t.Fatalf("objects %+v, want one naming its topic orders in %s", objs, deadletter.TopicMetadata)
		}
		ctx := context.Background()
		body, _, err := store.Get(ctx, "deadletters", objs[0].Key, 0)
		if err != nil {
			t.Fatal(err)
		}
		old := "BILLING/2025/1/2/3/00000000-0000-0000-0000-000000000000.json"
		if _, err := store.Put(ctx, "deadletters", old, body, sinks.PutOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		read, err := h.Router().DeadLetterRecords(ctx, "orders", "billing", router.DeadLetterQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if read.Objects != 2 || len(read.Entries) != 2 || len(read.Problems) != 0 {
			t.Errorf("read %d records from %d objects (problems %q), want the record of each object", len(read.Entries), read.Objects, read.Problems)
		}
	})
}
