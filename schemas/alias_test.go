package schemas_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// TestDecodedEventsKeepNoBody holds what lets the HTTP API reuse a request's body buffer
// (router/httpapi, readBody): no decoder leaves an event pointing into the body it read, so
// overwriting the body after decoding changes none of the events.
func TestDecodedEventsKeepNoBody(t *testing.T) {
	decoders := []struct {
		name   string
		body   string
		decode func(body []byte) ([]*schemas.Event, error)
	}{
		{"Event Grid", array(egEvent(), egEvent(`id="2"`, `data={"big":"`+string(bytes.Repeat([]byte("d"), 2000))+`"}`)), func(b []byte) ([]*schemas.Event, error) {
			return schemas.DecodeEventGrid(b, topicID, schemas.ClassicLimits)
		}},
		{"CloudEvents batch", `[{"specversion":"1.0","id":"c1","source":"/orders","type":"Orders.Created","subject":"s","time":"2024-05-01T12:30:00Z","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","data":{"n":1}},{"specversion":"1.0","id":"c2","source":"/o","type":"T","data_base64":"AAEC"}]`, func(b []byte) ([]*schemas.Event, error) {
			return schemas.DecodeCloudEvents(b, schemas.NamespaceLimits)
		}},
		{"CloudEvent structured", `{"specversion":"1.0","id":"c3","source":"/orders","type":"Orders.Created","data":"text"}`, func(b []byte) ([]*schemas.Event, error) {
			return schemas.DecodeCloudEvents(b, schemas.NamespaceLimits)
		}},
		{"CloudEvent binary, JSON data", `{"n":1,"s":"x"}`, func(b []byte) ([]*schemas.Event, error) {
			ev, err := schemas.DecodeCloudEventBinary(map[string]string{"specversion": "1.0", "id": "b1", "source": "/orders", "type": "T"}, "application/json", b, schemas.NamespaceLimits)
			return []*schemas.Event{ev}, err
		}},
		{"CloudEvent binary, bytes", "plain text", func(b []byte) ([]*schemas.Event, error) {
			ev, err := schemas.DecodeCloudEventBinary(map[string]string{"specversion": "1.0", "id": "b2", "source": "/orders", "type": "T"}, "text/plain", b, schemas.NamespaceLimits)
			return []*schemas.Event{ev}, err
		}},
		{"custom", `[{"orderId":"o1","kind":"Orders.Created","path":"/orders/1","ts":"2024-05-01T12:30:00Z","v":"2.0","extra":{"a":[1,2]}}]`, func(b []byte) ([]*schemas.Event, error) {
			return schemas.DecodeCustom(b, ordersMapping, topicID, schemas.ClassicLimits, ids(), customNow)
		}},
	}
	for _, d := range decoders {
		t.Run(d.name, func(t *testing.T) {
			body := []byte(d.body)
			events, err := d.decode(body)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]schemas.Event, len(events))
			for i, ev := range events {
				want[i] = *ev
				want[i].Raw = bytes.Clone(ev.Raw)
			}
			for i := range body {
				body[i] = 'x'
			}
			for i, ev := range events {
				if !reflect.DeepEqual(*ev, want[i]) {
					t.Errorf("event %d changed when the body was overwritten:\n got %+v\nwant %+v", i, *ev, want[i])
				}
			}
		})
	}
}
