package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
)

// TestSubscriptionReadShowsDefaults: as Azure's GET of an event subscription does, a read
// shows the effective retryPolicy (30 attempts, 1440 minutes; the namespace profile's 10 on a
// namespace topic) and eventDeliverySchema of a definition that left them out, and the read
// PUT back is taken and reads the same.
func TestSubscriptionReadShowsDefaults(t *testing.T) {
	r, err := router.New(router.Config{AdminToken: "tok"}, router.Deps{Sinks: nullSinks()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(httpapi.New(r))
	defer srv.Close()
	tests := []struct {
		topic, topicBody string
		wantAttempts     float64
		wantSchema       string
	}{
		{topic: "orders", topicBody: `{}`, wantAttempts: 30, wantSchema: "EventGridSchema"},
		{topic: "cetopic", topicBody: `{"properties":{"inputSchema":"CloudEventSchemaV1_0"}}`, wantAttempts: 30, wantSchema: "CloudEventSchemaV1_0"},
		{topic: "custom", topicBody: `{"properties":{"inputSchema":"CustomEventSchema","inputSchemaMapping":{"inputSchemaMappingType":"Json","properties":{"eventType":{"defaultValue":"t"},"subject":{"defaultValue":"s"},"dataVersion":{"defaultValue":"1"}}}}}`, wantAttempts: 30, wantSchema: "EventGridSchema"},
		{topic: "nsorders", topicBody: `{"properties":{"kind":"namespace"}}`, wantAttempts: 10, wantSchema: "CloudEventSchemaV1_0"},
	}
	for _, tt := range tests {
		t.Run(tt.topic, func(t *testing.T) {
			if status, out := adminDo(t, srv, "tok", "PUT", "/admin/topics/"+tt.topic, tt.topicBody); status != 201 {
				t.Fatalf("PUT topic: %d %v", status, out)
			}
			path := "/admin/topics/" + tt.topic + "/eventSubscriptions/sub1"
			if status, out := adminDo(t, srv, "tok", "PUT", path, `{"properties":{"destination":{"endpointType":"Sink","properties":{"sinkName":"null"}}}}`); status != 201 {
				t.Fatalf("PUT: %d %v", status, out)
			}
			status, got := adminDo(t, srv, "tok", "GET", path, "")
			if status != 200 {
				t.Fatalf("GET: %d %v", status, got)
			}
			props := got["properties"].(map[string]any)
			rp, _ := props["retryPolicy"].(map[string]any)
			if rp["maxDeliveryAttempts"] != tt.wantAttempts || rp["eventTimeToLiveInMinutes"] != float64(1440) {
				t.Errorf("retryPolicy read %v, want maxDeliveryAttempts %v and eventTimeToLiveInMinutes 1440", rp, tt.wantAttempts)
			}
			if props["eventDeliverySchema"] != tt.wantSchema {
				t.Errorf("eventDeliverySchema read %v, want %s", props["eventDeliverySchema"], tt.wantSchema)
			}
			delete(props, "deliveryState")
			body, _ := json.Marshal(got)
			if status, out := adminDo(t, srv, "tok", "PUT", path, string(body)); status != 200 {
				t.Fatalf("PUT of the read: %d %v", status, out)
			}
			_, again := adminDo(t, srv, "tok", "GET", path, "")
			delete(again["properties"].(map[string]any), "deliveryState")
			if !reflect.DeepEqual(again, got) {
				t.Errorf("read after the read was PUT back:\n%v\nwant\n%v", again, got)
			}
		})
	}
}
