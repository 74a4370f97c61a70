package router_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/schemas"
)

// Every CloudEvents delivery egrid produces, from each input schema, reaches a receiver built
// with the CloudEvents Go SDK — with one exception that is Azure's: an Event Grid or custom
// event converted to a CloudEvent carries dataschema "#"+dataVersion, as Azure sends it
// (learn.microsoft.com/azure/event-grid/cloudevents-schema), and the SDK refuses that with 400
// (it requires an absolute URI; cloudevents/sdk-go#615). Config.OmitConvertedDataSchema, an
// egrid extension, leaves dataschema out so the SDK accepts them too.
func TestCloudEventsSDKReceiverAcceptsDeliveries(t *testing.T) {
	for _, tt := range []struct {
		name     string
		input    string
		event    any
		omit     bool
		accepted bool
	}{
		{"CloudEvents input", "CloudEventSchemaV1_0", map[string]any{"specversion": "1.0", "id": "ce-1", "source": "/s", "type": "t", "time": "2026-01-01T00:00:00Z", "data": map[string]any{"n": 1}}, false, true},
		{"Event Grid input, Azure's dataschema", "EventGridSchema", gridEvent("eg-1"), false, false},
		{"Event Grid input, omitConvertedDataSchema", "EventGridSchema", gridEvent("eg-2"), true, true},
		{"Event Grid input without dataVersion, Azure's dataschema", "EventGridSchema", map[string]any{"id": "eg-3", "subject": "/s", "eventType": "T", "eventTime": "2026-01-01T00:00:00+0000", "data": nil}, false, false},
		{"Event Grid input without dataVersion, omitConvertedDataSchema", "EventGridSchema", map[string]any{"id": "eg-4", "subject": "/s", "eventType": "T", "eventTime": "2026-01-01T00:00:00+0000", "data": nil}, true, true},
		{"custom input, Azure's dataschema", "CustomEventSchema", map[string]any{"id": "cu-1", "kind": "x"}, false, false},
		{"custom input, omitConvertedDataSchema", "CustomEventSchema", map[string]any{"id": "cu-2", "kind": "x"}, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := cloudevents.NewHTTP()
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 1)
			h, err := cloudevents.NewHTTPReceiveHandler(context.Background(), p, func(e cloudevents.Event) { got <- e.ID() })
			if err != nil {
				t.Fatal(err)
			}
			statuses := make(chan int, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				w.WriteHeader(rec.Code)
				statuses <- rec.Code
			}))
			defer srv.Close()
			r, err := router.New(router.Config{SkipEndpointValidation: true, OmitConvertedDataSchema: tt.omit}, router.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(context.Background())
			topic := router.TopicSpec{InputSchema: tt.input}
			if tt.input == "CustomEventSchema" {
				topic.InputSchemaMapping = &router.InputSchemaMapping{InputSchemaMappingType: "Json", Properties: &schemas.InputMapping{
					ID: schemas.FieldMapping{SourceField: "id"}, EventType: schemas.FieldMapping{SourceField: "kind"},
				}}
			}
			if _, err := r.CreateTopic(context.Background(), "orders", topic); err != nil {
				t.Fatal(err)
			}
			spec := router.SubscriptionSpec{Destination: router.WebHook(srv.URL), EventDeliverySchema: "CloudEventSchemaV1_0", RetryPolicy: router.RetryPolicy{MaxDeliveryAttempts: 1}}
			if err := r.CreateSubscription(context.Background(), "orders", "sdk", spec); err != nil {
				t.Fatal(err)
			}
			if err := r.Publish(context.Background(), "orders", tt.event); err != nil {
				t.Fatal(err)
			}
			var status int
			select {
			case status = <-statuses:
			case <-time.After(30 * time.Second):
				t.Fatal("no delivery within 30 s")
			}
			switch {
			case tt.accepted && status != http.StatusOK:
				t.Errorf("the CloudEvents SDK receiver answered %d, want 200", status)
			case tt.accepted:
				<-got
			case status != http.StatusBadRequest:
				t.Errorf("the CloudEvents SDK receiver answered %d, want 400 (it refuses Azure's dataschema)", status)
			}
		})
	}
}
