package schemas_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// fuzzLimits keep fuzzed inputs small enough to hit the limits.
var fuzzLimits = schemas.Limits{MaxEventBytes: 4 << 10, MaxRequestBytes: 64 << 10, MaxEvents: 50}

// checkDecodeError asserts that a decode error is one of the documented kinds.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	var tooLarge *schemas.TooLargeError
	var tooMany *schemas.TooManyEventsError
	if errors.As(err, &tooLarge) || errors.As(err, &tooMany) {
		return
	}
	ves := schemas.ValidationErrors(err)
	if len(ves) == 0 || len(ves) > 20 {
		t.Fatalf("error is not 1 to 20 *ValidationError: %T %v", err, err)
	}
}

// checkEncodes asserts that events re-encode to valid JSON in every schema they can be
// delivered in, and that the bodies decode again.
func checkEncodes(t *testing.T, in schemas.Schema, events []*schemas.Event) {
	t.Helper()
	for _, out := range []schemas.Schema{schemas.EventGrid, schemas.CloudEvents, schemas.Custom} {
		if !schemas.CanDeliver(in, out) {
			continue
		}
		body, _, err := schemas.EncodeBatch(nil, in, out, topicID, events)
		if err != nil {
			t.Fatalf("EncodeBatch %v -> %v: %v", in, out.DeliveryName(), err)
		}
		if !json.Valid(body) {
			t.Fatalf("EncodeBatch %v -> %v gave invalid JSON: %q", in, out.DeliveryName(), body)
		}
		switch out {
		case schemas.EventGrid:
			_, err = schemas.DecodeEventGrid(body, topicID, schemas.Limits{})
		case schemas.CloudEvents:
			_, err = schemas.DecodeCloudEvents(body, schemas.Limits{})
		}
		if err != nil {
			t.Fatalf("%v body does not decode again: %v\n%s", out.DeliveryName(), err, body)
		}
	}
}

func FuzzDecodeEventGrid(f *testing.F) {
	f.Add([]byte(array(egEvent())))
	f.Add([]byte(array(egEvent(`topic="`+topicID+`"`, `metadataVersion="1"`, `dataVersion="1"`), egEvent(`data=[1, {"a": null}]`, `subject=""`))))
	f.Add([]byte(`[{"id":"\u00e9\ud83d\ude00","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00.5+02:00","data":"\n","x":[]}]`))
	f.Add([]byte(egEvent()))
	f.Add([]byte(`[{"id":1,"data":`))
	f.Fuzz(func(t *testing.T, body []byte) {
		events, err := schemas.DecodeEventGrid(body, topicID, fuzzLimits)
		if err != nil {
			if events != nil {
				t.Fatal("events returned with an error")
			}
			checkDecodeError(t, err)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		for i, e := range events {
			if !json.Valid(e.Raw) {
				t.Fatalf("event %d Raw is not valid JSON: %q", i, e.Raw)
			}
			// Normalising is idempotent: Raw decodes to itself.
			again, err := schemas.DecodeEventGrid([]byte("["+string(e.Raw)+"]"), topicID, schemas.Limits{})
			if err != nil {
				t.Fatalf("event %d Raw does not decode: %v\n%s", i, err, e.Raw)
			}
			if string(again[0].Raw) != string(e.Raw) || again[0].ID != e.ID || again[0].Subject != e.Subject || again[0].Type != e.Type || again[0].Time != e.Time || again[0].DataVersion != e.DataVersion {
				t.Fatalf("event %d is not a fixed point:\n%+v\n%+v", i, e, again[0])
			}
		}
		checkEncodes(t, schemas.EventGrid, events)
	})
}

func FuzzDecodeCloudEvents(f *testing.F) {
	f.Add([]byte(ceEvent()))
	f.Add([]byte(array(ceEvent(`time="2024-05-01T12:00:00Z"`, `data={"a": [1]}`, `ext1=2`, `traceparent="00-x"`), ceEvent(`data_base64="AAEC"`))))
	f.Add([]byte(ceEvent(`data="x"`, `data_base64="AA=="`)))
	f.Add([]byte(`[{"specversion":"1.0","id":"\ud800","source":"s","type":"t"}]`))
	f.Add([]byte(`{"specversion":`))
	f.Fuzz(func(t *testing.T, body []byte) {
		events, err := schemas.DecodeCloudEvents(body, fuzzLimits)
		if err != nil {
			if events != nil {
				t.Fatal("events returned with an error")
			}
			checkDecodeError(t, err)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		for i, e := range events {
			again, err := schemas.DecodeCloudEvents(e.Raw, schemas.Limits{})
			if err != nil {
				t.Fatalf("event %d Raw does not decode: %v\n%s", i, err, e.Raw)
			}
			if string(again[0].Raw) != string(e.Raw) || again[0].ID != e.ID || again[0].Source != e.Source || again[0].Type != e.Type || again[0].Traceparent != e.Traceparent {
				t.Fatalf("event %d is not a fixed point:\n%+v\n%+v", i, e, again[0])
			}
		}
		checkEncodes(t, schemas.CloudEvents, events)
	})
}

func FuzzDecodeCustom(f *testing.F) {
	f.Add([]byte(`[{"orderId": 1, "ts": "2024-05-01T12:00:00Z", "kind": "K", "path": "/p", "v": true}]`))
	f.Add([]byte(`[{"meta": {"id": "x"}}, {}]`))
	f.Add([]byte(`[{"kind": {"a": 1}}]`))
	m := &schemas.InputMapping{
		ID:          schemas.FieldMapping{SourceField: "orderId"},
		EventTime:   schemas.FieldMapping{SourceField: "ts"},
		EventType:   schemas.FieldMapping{SourceField: "kind", DefaultValue: "T"},
		Subject:     schemas.FieldMapping{SourceField: "meta.id"},
		DataVersion: schemas.FieldMapping{SourceField: "v"},
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		events, err := schemas.DecodeCustom(body, m, topicID, fuzzLimits, ids(), customNow)
		if err != nil {
			checkDecodeError(t, err)
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		checkEncodes(t, schemas.Custom, events)
	})
}
