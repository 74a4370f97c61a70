package schemas_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

func TestDeliveryHeaders(t *testing.T) {
	ev := &schemas.Event{ID: "e1", DataVersion: "2.0", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	tests := []struct {
		name string
		d    schemas.DeliveryHeaders
		want string
	}{
		{
			name: "event grid",
			d:    schemas.DeliveryHeaders{Schema: schemas.EventGrid, Subscription: "Billing-1", DeliveryCount: 3, ContentType: schemas.ContentTypeJSON, Event: ev},
			want: "aeg-event-type: Notification|aeg-subscription-name: BILLING-1|aeg-delivery-count: 3|aeg-metadata-version: 1|content-type: " + schemas.ContentTypeJSON +
				"|aeg-output-event-id: e1|aeg-data-version: 2.0|traceparent: " + ev.Traceparent,
		},
		{
			name: "cloudevents carry no data version",
			d:    schemas.DeliveryHeaders{Schema: schemas.CloudEvents, Subscription: "s", ContentType: schemas.ContentTypeCloudEvent, Event: &schemas.Event{ID: "c1"}},
			want: "aeg-event-type: Notification|aeg-subscription-name: S|aeg-delivery-count: 0|aeg-metadata-version: 1.0|content-type: " + schemas.ContentTypeCloudEvent + "|aeg-output-event-id: c1",
		},
		{
			name: "validation handshake, no schema set",
			d:    schemas.DeliveryHeaders{EventType: schemas.EventTypeSubscriptionValidation, Subscription: "s", ContentType: schemas.ContentTypeJSON, Event: &schemas.Event{ID: "v", DataVersion: "1"}},
			want: "aeg-event-type: SubscriptionValidation|aeg-subscription-name: S|aeg-delivery-count: 0|aeg-metadata-version: 1|content-type: " + schemas.ContentTypeJSON + "|aeg-output-event-id: v|aeg-data-version: 1",
		},
		{
			name: "no event",
			d:    schemas.DeliveryHeaders{Schema: schemas.Custom, Subscription: "s", ContentType: schemas.ContentTypeJSON},
			want: "aeg-event-type: Notification|aeg-subscription-name: S|aeg-delivery-count: 0|aeg-metadata-version: 1|content-type: " + schemas.ContentTypeJSON,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs, err := tt.d.Append([]schemas.Header{{Name: "kept", Value: "x"}})
			if err != nil {
				t.Fatal(err)
			}
			if hs[0].Name != "kept" {
				t.Fatalf("Append replaced dst: %v", hs)
			}
			var parts []string
			for _, h := range hs[1:] {
				parts = append(parts, h.Name+": "+h.Value)
			}
			if got := strings.Join(parts, "|"); got != tt.want {
				t.Errorf("headers\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// Every header-bound value of the event that cannot be sent is reported, and nothing is
// appended. A traceparent that is not a W3C one is no such value: it is not sent at all.
func TestDeliveryHeadersRefuseUnsendableValues(t *testing.T) {
	ev := &schemas.Event{ID: "a\nb", DataVersion: strings.Repeat("v", schemas.MaxHeaderAttributeBytes+1), Traceparent: "00\x00"}
	hs, err := schemas.DeliveryHeaders{Schema: schemas.EventGrid, Subscription: "s", Event: ev}.Append(nil)
	if len(hs) != 0 {
		t.Errorf("appended %v", hs)
	}
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var he *schemas.HeaderError
		if !errors.As(e, &he) {
			t.Fatalf("%v is not a *schemas.HeaderError", e)
		}
		fields = append(fields, he.Field+"→"+he.Header)
	}
	if got := strings.Join(fields, ","); got != "id→aeg-output-event-id,dataVersion→aeg-data-version" {
		t.Errorf("problems %s", got)
	}
	// A CloudEvents delivery does not send dataVersion, so only id and traceparent count.
	if err := schemas.CheckHeaderBound(schemas.CloudEvents, &schemas.Event{ID: "ok", DataVersion: "\n"}); err != nil {
		t.Errorf("CloudEvents: %v", err)
	}
}

func TestEncodingFraming(t *testing.T) {
	const tid = "/t"
	ce := &schemas.Event{ID: "c1", Raw: []byte(`{"specversion":"1.0","id":"c1"}`)}
	eg := &schemas.Event{ID: "e1", Type: "T", Time: "2024-05-01T12:00:00Z", Raw: []byte(`{"id":"e1","data":{"n":1}}`)}
	tests := []struct {
		name     string
		enc      schemas.Encoding
		events   []*schemas.Event
		body, ct string
	}{
		{name: "one cloudevent unbatched", enc: schemas.Encoding{In: schemas.CloudEvents, Out: schemas.CloudEvents}, events: []*schemas.Event{ce},
			body: string(ce.Raw), ct: schemas.ContentTypeCloudEvent},
		{name: "one cloudevent with batching on", enc: schemas.Encoding{In: schemas.CloudEvents, Out: schemas.CloudEvents, Batched: true}, events: []*schemas.Event{ce},
			body: "[" + string(ce.Raw) + "]", ct: schemas.ContentTypeCloudEventsBatch},
		{name: "two cloudevents", enc: schemas.Encoding{In: schemas.CloudEvents, Out: schemas.CloudEvents}, events: []*schemas.Event{ce, ce},
			body: "[" + string(ce.Raw) + "," + string(ce.Raw) + "]", ct: schemas.ContentTypeCloudEventsBatch},
		{name: "event grid batched is an array as always", enc: schemas.Encoding{In: schemas.EventGrid, Out: schemas.EventGrid, Batched: true}, events: []*schemas.Event{eg},
			body: "[" + string(eg.Raw) + "]", ct: schemas.ContentTypeJSON},
		{name: "converted, batching on", enc: schemas.Encoding{In: schemas.EventGrid, Out: schemas.CloudEvents, TopicID: tid, Batched: true}, events: []*schemas.Event{eg},
			body: `[{"specversion":"1.0","type":"T","source":"/t","id":"e1","time":"2024-05-01T12:00:00Z","dataschema":"#","datacontenttype":"application/json","data":{"n":1}}]`, ct: schemas.ContentTypeCloudEventsBatch},
		{name: "converted with options", enc: schemas.Encoding{In: schemas.EventGrid, Out: schemas.CloudEvents, TopicID: tid, Options: schemas.EncodeOptions{OmitConvertedDataSchema: true}}, events: []*schemas.Event{eg},
			body: `{"specversion":"1.0","type":"T","source":"/t","id":"e1","time":"2024-05-01T12:00:00Z","datacontenttype":"application/json","data":{"n":1}}`, ct: schemas.ContentTypeCloudEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ct, err := tt.enc.AppendBatch(nil, tt.events)
			if err != nil || string(body) != tt.body || ct != tt.ct {
				t.Errorf("AppendBatch = %s, %s, %v; want %s, %s", body, ct, err, tt.body, tt.ct)
			}
			if got := tt.enc.ContentType(len(tt.events)); got != tt.ct {
				t.Errorf("ContentType(%d) = %s, want %s", len(tt.events), got, tt.ct)
			}
			one, _, err := tt.enc.AppendEvent(nil, tt.events[0])
			if err != nil || !strings.Contains(tt.body, string(one)) || one[0] != '{' {
				t.Errorf("AppendEvent = %s, %v; want the event's object in %s", one, err, tt.body)
			}
		})
	}
}

// An event that cannot be converted is an *EncodeError with its index, in a batch and alone.
func TestEncodeErrorNamesTheEvent(t *testing.T) {
	good := &schemas.Event{ID: "g", Raw: []byte(`{"id":"g","data":1}`)}
	bad := &schemas.Event{ID: "b", Raw: []byte(`{"id":"b"}`)}
	enc := schemas.Encoding{In: schemas.EventGrid, Out: schemas.CloudEvents, TopicID: "/t", Batched: true}
	for _, events := range [][]*schemas.Event{{good, bad}, {bad}} {
		_, _, err := enc.AppendBatch(nil, events)
		var ee *schemas.EncodeError
		if !errors.As(err, &ee) || ee.Index != len(events)-1 {
			t.Errorf("AppendBatch of %d events = %v, want an *EncodeError for the last", len(events), err)
		}
	}
	if _, _, err := enc.AppendEvent(nil, bad); !errors.As(err, new(*schemas.EncodeError)) {
		t.Errorf("AppendEvent = %v, want an *EncodeError", err)
	}
}
