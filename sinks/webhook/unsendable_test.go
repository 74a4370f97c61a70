package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/sinks/webhook"
)

// A batch whose first event's id or dataVersion cannot be a header value is the
// event's own fault: Deliver reports it as an *sinks.UnsendableError for event 0 and sends
// nothing, so the endpoint is never asked (and never blamed).
func TestDeliverRefusesUnsendableHeaders(t *testing.T) {
	tests := []struct {
		name   string
		schema schemas.Schema
		ev     schemas.Event
		field  string
	}{
		{name: "line feed in the id", schema: schemas.EventGrid, ev: schemas.Event{ID: "a\nb"}, field: "id"},
		{name: "id over the limit", schema: schemas.EventGrid, ev: schemas.Event{ID: strings.Repeat("x", 100_000)}, field: "id"},
		{name: "NUL in dataVersion", schema: schemas.EventGrid, ev: schemas.Event{ID: "e", DataVersion: "1\x00"}, field: "dataVersion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, seen := captureServer(t)
			s := newSink(t, webhook.Config{URL: srv.URL}, srv.Client())
			good := &schemas.Event{ID: "good"}
			ev := tt.ev
			err := s.Deliver(context.Background(), &sinks.Batch{
				Subscription: "s", Schema: tt.schema, Body: []byte(`[{},{}]`),
				Events: []*schemas.Event{&ev, good},
			})
			var ue *sinks.UnsendableError
			if !errors.As(err, &ue) {
				t.Fatalf("Deliver = %v, want *sinks.UnsendableError", err)
			}
			var he *schemas.HeaderError
			if len(ue.Faults) != 1 || ue.Faults[0].Index != 0 || !errors.As(ue.Faults[0].Err, &he) || he.Field != tt.field {
				t.Fatalf("faults %+v, want event 0 with a header error for %s", ue.Faults, tt.field)
			}
			if len(err.Error()) > 1000 {
				t.Errorf("the error is %d bytes long; it must not carry the whole value", len(err.Error()))
			}
			select {
			case c := <-seen:
				t.Fatalf("the endpoint got a request: %v", c.header)
			default:
			}
		})
	}
}

// Every event of a batch is checked, not only the first whose values become headers: a retry
// may put any of them first.
func TestDeliverRefusesUnsendableEventsAnywhereInTheBatch(t *testing.T) {
	srv, seen := captureServer(t)
	s := newSink(t, webhook.Config{URL: srv.URL}, srv.Client())
	err := s.Deliver(context.Background(), &sinks.Batch{
		Subscription: "s", Schema: schemas.EventGrid, Body: []byte(`[{},{},{}]`),
		Events: []*schemas.Event{{ID: "good"}, {ID: "a\nb"}, {ID: "c", DataVersion: "\x00"}},
	})
	var ue *sinks.UnsendableError
	if !errors.As(err, &ue) || len(ue.Faults) != 2 || ue.Faults[0].Index != 1 || ue.Faults[1].Index != 2 {
		t.Fatalf("Deliver = %v, want an *sinks.UnsendableError for events 1 and 2", err)
	}
	select {
	case c := <-seen:
		t.Fatalf("the endpoint got a request: %v", c.header)
	default:
	}
}

// A traceparent that is not a W3C Trace Context one ("garbage", or one carrying a line break)
// is not forwarded, nor is the tracestate beside it: the event is delivered without them, and
// nothing of them reaches the request's headers. A valid one goes with its tracestate. Before,
// any traceparent was sent as it was (and a line break made the event undeliverable), and no
// tracestate was ever sent.
func TestDeliverForwardsOnlyATraceContext(t *testing.T) {
	const valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, tt := range []struct {
		name, traceparent     string
		wantParent, wantState string
	}{
		{"valid", valid, valid, "congo=t61rcWkgMzE"},
		{"garbage", "garbage", "", ""},
		{"a line break", "00-\r\nX-Injected: y", "", ""},
		{"upper-case", strings.ToUpper(valid), "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, seen := captureServer(t)
			s := newSink(t, webhook.Config{URL: srv.URL}, srv.Client())
			raw := fmt.Sprintf(`{"specversion":"1.0","id":"e","source":"/s","type":"t","traceparent":%q,"tracestate":"congo=t61rcWkgMzE"}`, tt.traceparent)
			ev := &schemas.Event{ID: "e", SpecVersion: "1.0", Traceparent: tt.traceparent, Raw: []byte(raw)}
			b := &sinks.Batch{Subscription: "s", Schema: schemas.CloudEvents, Body: ev.Raw, ContentType: schemas.ContentTypeCloudEvent, Events: []*schemas.Event{ev}}
			if err := s.Deliver(context.Background(), b); err != nil {
				t.Fatalf("Deliver = %v, want nil", err)
			}
			c := <-seen
			if got := c.header.Get("Traceparent"); got != tt.wantParent {
				t.Errorf("traceparent %q, want %q", got, tt.wantParent)
			}
			if got := c.header.Get("Tracestate"); got != tt.wantState {
				t.Errorf("tracestate %q, want %q", got, tt.wantState)
			}
			if c.header.Get("X-Injected") != "" {
				t.Errorf("a header was injected: %v", c.header)
			}
		})
	}
}
