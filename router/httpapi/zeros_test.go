package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
)

// TestExplicitZeroSettingsAreRefused: Azure's ranges for maxDeliveryAttempts,
// eventTimeToLiveInMinutes, maxEventsPerBatch and preferredBatchSizeInKilobytes start at 1, so
// a PUT body that sends 0 is a 400 naming the property and its range, not a definition taken
// with the setting dropped. A member left out, or null, takes the default.
func TestExplicitZeroSettingsAreRefused(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	for _, topic := range []string{"orders", "nsorders"} {
		body := `{}`
		if topic == "nsorders" {
			body = `{"properties":{"kind":"namespace"}}`
		}
		if status, out := adminDo(t, srv, "tok", "PUT", "/admin/topics/"+topic, body); status != 201 {
			t.Fatalf("PUT topic %s: %d %v", topic, status, out)
		}
	}
	const dest = `"destination":{"endpointType":"Sink","properties":{"sinkName":"null"%s}}`
	tests := []struct {
		name, topic, retry, batch string
		want                      []string
	}{
		{name: "maxDeliveryAttempts", topic: "orders", retry: `"maxDeliveryAttempts":0`,
			want: []string{"retryPolicy.maxDeliveryAttempts 0 is out of range: use 1-30"}},
		{name: "maxDeliveryAttempts namespace", topic: "nsorders", retry: `"maxDeliveryAttempts":0`,
			want: []string{"retryPolicy.maxDeliveryAttempts 0 is out of range: use 1-10"}},
		{name: "eventTimeToLiveInMinutes", topic: "orders", retry: `"eventTimeToLiveInMinutes":-0`,
			want: []string{"retryPolicy.eventTimeToLiveInMinutes 0 is out of range: use 1-1440"}},
		{name: "maxEventsPerBatch", topic: "orders", batch: `,"maxEventsPerBatch":0`,
			want: []string{"destination.properties.maxEventsPerBatch 0 is out of range: use 1-5000"}},
		{name: "preferredBatchSizeInKilobytes", topic: "orders", batch: `,"PreferredBatchSizeInKilobytes":0`,
			want: []string{"destination.properties.preferredBatchSizeInKilobytes 0 is out of range: use 1-1024"}},
		{name: "all four", topic: "orders", retry: `"maxDeliveryAttempts":0,"eventTimeToLiveInMinutes":0`,
			batch: `,"maxEventsPerBatch":0,"preferredBatchSizeInKilobytes":0`,
			want:  []string{"maxDeliveryAttempts 0", "eventTimeToLiveInMinutes 0", "maxEventsPerBatch 0", "preferredBatchSizeInKilobytes 0"}},
		{name: "null is absent", topic: "orders", retry: `"maxDeliveryAttempts":null`, batch: `,"maxEventsPerBatch":null`},
	}
	queueTests := []struct{ name, queue, want string }{
		{name: "receiveLockDurationInSeconds", queue: `"receiveLockDurationInSeconds":0`,
			want: "deliveryConfiguration.queue.receiveLockDurationInSeconds 0 is out of range: use 60-300"},
		{name: "maxDeliveryCount", queue: `"maxDeliveryCount":0`,
			want: "deliveryConfiguration.queue.maxDeliveryCount 0 is out of range: use 1-10"},
		{name: "queue null is absent", queue: `"maxDeliveryCount":null`},
	}
	for _, tt := range queueTests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"properties":{"deliveryConfiguration":{"deliveryMode":"Queue","queue":{` + tt.queue + `}}}}`
			status, out := adminDo(t, srv, "tok", "PUT", "/admin/topics/nsorders/eventSubscriptions/queue1", body)
			raw, _ := json.Marshal(out)
			if tt.want == "" {
				if status != 201 && status != 200 {
					t.Fatalf("PUT %s: %d %s, want it taken", body, status, raw)
				}
				return
			}
			if status != 400 || !strings.Contains(string(raw), tt.want) {
				t.Fatalf("PUT %s: %d %s, want 400 saying %q", body, status, raw, tt.want)
			}
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"properties":{` + strings.Replace(dest, "%s", tt.batch, 1) + `,"retryPolicy":{` + tt.retry + `}}}`
			status, out := adminDo(t, srv, "tok", "PUT", "/admin/topics/"+tt.topic+"/eventSubscriptions/sub1", body)
			if tt.want == nil {
				if status != 201 && status != 200 {
					t.Fatalf("PUT %s: %d %v, want it taken", body, status, out)
				}
				return
			}
			if status != 400 {
				t.Fatalf("PUT %s: %d %v, want 400", body, status, out)
			}
			raw, _ := json.Marshal(out)
			for _, w := range tt.want {
				if !strings.Contains(string(raw), w) {
					t.Errorf("answer %s does not say %q", raw, w)
				}
			}
			if status, _ := adminDo(t, srv, "tok", "GET", "/admin/topics/"+tt.topic+"/eventSubscriptions/sub1", ""); status != 404 {
				t.Errorf("GET after the refused PUT: %d, want 404 (nothing stored)", status)
			}
		})
	}
}
