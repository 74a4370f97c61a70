package router_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// deliveredAttrs returns the attribute of each CloudEvent in an attempt's body (a single
// event or a batch), by event id.
func deliveredAttrs(t *testing.T, a testkit.Attempt, attr string) map[string]string {
	t.Helper()
	var many []map[string]any
	if json.Unmarshal(a.Body, &many) != nil {
		var one map[string]any
		if err := json.Unmarshal(a.Body, &one); err != nil {
			t.Fatalf("attempt body %s: %v", a.Body, err)
		}
		many = []map[string]any{one}
	}
	got := map[string]string{}
	for _, e := range many {
		id, _ := e["id"].(string)
		v, _ := e[attr].(string)
		got[id] = v
	}
	return got
}

// An Event Grid event delivered as a CloudEvent, dead-lettered and replayed, is the event
// published: the dead letter reads back its dataVersion, and the replay delivers the dataschema
// the first delivery had, whatever the dataVersion holds.
func TestReplayOfConvertedEventsKeepsDataVersion(t *testing.T) {
	dataVersions := []string{"1.0", "v 1", "100%", "é", "a#b", "%41", ""}
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		var healthy atomic.Bool
		hook := h.Endpoint("hook", switchable(&healthy, http.StatusBadRequest))
		spec := router.SubscriptionSpec{Destination: router.WebHook(hook.URL()), EventDeliverySchema: "CloudEventSchemaV1_0"}
		spec.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
		spec.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
		h.Subscribe("orders", "billing", spec)
		published := map[string]string{}
		for i, dv := range dataVersions {
			id := "e" + strconv.Itoa(i)
			published[id] = dv
			h.Publish("orders", h.EventGridEvent(testkit.ID(id), testkit.Field("dataVersion", dv)))
		}
		h.Advance(6 * time.Minute)
		first := map[string]string{}
		for _, a := range hook.Attempts() {
			for id, schema := range deliveredAttrs(t, a, "dataschema") {
				first[id] = schema
			}
		}
		if len(first) != len(dataVersions) {
			t.Fatalf("first deliveries carried %d events, want %d", len(first), len(dataVersions))
		}
		ctx := context.Background()
		read, err := h.Router().DeadLetterRecords(ctx, "orders", "billing", router.DeadLetterQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(read.Entries) != len(dataVersions) || len(read.Problems) != 0 {
			t.Fatalf("read %d dead letters (problems %q), want %d", len(read.Entries), read.Problems, len(dataVersions))
		}
		for _, e := range read.Entries {
			if want := published[e.Event.ID]; e.Event.DataVersion != want {
				t.Errorf("event %s reads back from its dead letter with dataVersion %q, published %q", e.Event.ID, e.Event.DataVersion, want)
			}
		}

		n := len(hook.Attempts())
		healthy.Store(true)
		sum, err := h.Router().ReplayDeadLetters(ctx, "orders", "billing", router.ReplayOptions{Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Replayed != len(dataVersions) || sum.Delivered != len(dataVersions) || len(sum.Problems) != 0 {
			t.Errorf("replay summary %+v, want every event replayed and delivered", sum)
		}
		replayed := map[string]string{}
		for _, a := range hook.Attempts()[n:] {
			for id, schema := range deliveredAttrs(t, a, "dataschema") {
				replayed[id] = schema
			}
		}
		for id, want := range first {
			if got, ok := replayed[id]; !ok || got != want {
				t.Errorf("event %s (dataVersion %q) replayed with dataschema %q, first delivered with %q", id, published[id], got, want)
			}
		}
	})
}

// A dead-letter object written by an earlier release holds a CloudEvent that release took and
// today's publish refuses (a source with a space, a time with a ',' fraction, a dataschema with
// a space): it is replayed, and delivered as it was stored.
func TestReplayOfARecordOfAnEarlierRelease(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook")
		h.CreateTopic("orders", router.TopicSpec{InputSchema: "CloudEventSchemaV1_0"})
		h.CreateSubscription("orders", "billing", hook, router.RetryPolicy{})
		const event = `{"specversion":"1.0","id":"old-1","source":"my source","type":"T","time":"2024-05-01T12:00:00,5Z","dataschema":"#1 0","data":{"n":1}}`
		record := event[:len(event)-1] + `,"deadletterreason":"MaxDeliveryAttemptsExceeded","deliveryattempts":3,"lastdeliveryoutcome":"GenericError","publishtime":"2024-05-01T12:00:01Z"}`
		ctx := context.Background()
		if _, err := h.DeadLetterObjects().Put(ctx, "deadletters", "BILLING/2024/5/1/12/00000000-0000-0000-0000-000000000000.json", []byte("["+record+"]"), sinks.PutOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		sum, err := h.Router().ReplayDeadLetters(ctx, "orders", "billing", router.ReplayOptions{Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Replayed != 1 || sum.Delivered != 1 || len(sum.Problems) != 0 {
			t.Fatalf("replay summary %+v, want the record replayed and delivered", sum)
		}
		att := hook.Attempts()
		if len(att) != 1 {
			t.Fatalf("%d attempts, want the replayed one", len(att))
		}
		body := att[0].Body
		if len(body) > 0 && body[0] == '[' {
			body = body[1 : len(body)-1]
		}
		if string(body) != event {
			t.Errorf("replay delivered %s, want the stored event %s", att[0].Body, event)
		}
	})
}
