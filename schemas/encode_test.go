package schemas_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// golden compares got with testdata/<name>.golden, or rewrites the file under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run go test -update if the change is intended):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// encodeInputs decodes the published batches the golden tests encode, one per input schema.
func encodeInputs(t *testing.T) (eg, ce, custom []*schemas.Event) {
	t.Helper()
	var err error
	eg, err = schemas.DecodeEventGrid([]byte(array(
		egEvent(`dataVersion="2.0"`, `data={"orderId": "o-1", "total": 12.5}`),
		egEvent(`id="e2"`, `subject=""`, `eventType="Orders.Shipped"`, `eventTime="2024-05-01T13:00:00.1234567Z"`, `data="shipped <fast> & \u00e9"`),
	)), topicID, schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	ce, err = schemas.DecodeCloudEvents([]byte(array(
		ceEvent(`time="2024-05-01T12:00:00Z"`, `subject="/orders/1"`, `datacontenttype="application/json"`, `data={"orderId":"o-1"}`, `traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"`, `comexampleext="x"`),
		ceEvent(`id="c2"`, `datacontenttype="application/octet-stream"`, `data_base64="AAEC"`),
	)), schemas.NamespaceLimits)
	if err != nil {
		t.Fatal(err)
	}
	m := &schemas.InputMapping{
		ID:          schemas.FieldMapping{SourceField: "orderId"},
		EventType:   schemas.FieldMapping{SourceField: "kind", DefaultValue: "Orders.Unknown"},
		Subject:     schemas.FieldMapping{SourceField: "path"},
		DataVersion: schemas.FieldMapping{DefaultValue: "1.0"},
	}
	custom, err = schemas.DecodeCustom([]byte(`[{"orderId": "o-1", "kind": "Orders.Created", "path": "/orders/1", "total": 12.5}, {"note": "no id, no kind"}]`),
		m, topicID, schemas.ClassicLimits, ids(), customNow)
	if err != nil {
		t.Fatal(err)
	}
	return eg, ce, custom
}

func TestEncodeBatchGolden(t *testing.T) {
	eg, ce, custom := encodeInputs(t)
	tests := []struct {
		name   string
		in     schemas.Schema
		out    schemas.Schema
		events []*schemas.Event
		wantCT string
	}{
		{"eg_to_eg", schemas.EventGrid, schemas.EventGrid, eg, schemas.ContentTypeJSON},
		{"eg_to_eg_single", schemas.EventGrid, schemas.EventGrid, eg[:1], schemas.ContentTypeJSON},
		{"eg_to_ce_single", schemas.EventGrid, schemas.CloudEvents, eg[:1], schemas.ContentTypeCloudEvent},
		{"eg_to_ce_batch", schemas.EventGrid, schemas.CloudEvents, eg, schemas.ContentTypeCloudEventsBatch},
		{"ce_to_ce_single", schemas.CloudEvents, schemas.CloudEvents, ce[:1], schemas.ContentTypeCloudEvent},
		{"ce_to_ce_batch", schemas.CloudEvents, schemas.CloudEvents, ce, schemas.ContentTypeCloudEventsBatch},
		{"custom_to_eg", schemas.Custom, schemas.EventGrid, custom, schemas.ContentTypeJSON},
		{"custom_to_ce_single", schemas.Custom, schemas.CloudEvents, custom[:1], schemas.ContentTypeCloudEvent},
		{"custom_to_ce_batch", schemas.Custom, schemas.CloudEvents, custom, schemas.ContentTypeCloudEventsBatch},
		{"custom_to_custom", schemas.Custom, schemas.Custom, custom, schemas.ContentTypeJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const prefix = "kept"
			dst := []byte(prefix)
			out, ct, err := schemas.EncodeBatch(dst, tt.in, tt.out, topicID, tt.events)
			if err != nil {
				t.Fatalf("EncodeBatch: %v", err)
			}
			if ct != tt.wantCT {
				t.Errorf("Content-Type = %q, want %q", ct, tt.wantCT)
			}
			if string(out[:len(prefix)]) != prefix {
				t.Fatalf("EncodeBatch did not append to dst: %q", out)
			}
			body := out[len(prefix):]
			golden(t, tt.name, append(append([]byte("Content-Type: "+ct+"\n\n"), body...), '\n'))
			if !json.Valid(body) {
				t.Fatalf("body is not valid JSON: %s", body)
			}
			// Every body must be acceptable to a receiver of its schema: decode it again.
			switch tt.out {
			case schemas.EventGrid:
				again, err := schemas.DecodeEventGrid(body, topicID, schemas.ClassicLimits)
				if err != nil {
					t.Fatalf("Event Grid body does not decode: %v", err)
				}
				for i, e := range again {
					if e.ID != tt.events[i].ID || e.Type != tt.events[i].Type || e.Subject != tt.events[i].Subject || e.Time != tt.events[i].Time || e.DataVersion != tt.events[i].DataVersion {
						t.Errorf("event %d decodes to %+v, want the envelope of %+v", i, e, tt.events[i])
					}
				}
			case schemas.CloudEvents:
				again, err := schemas.DecodeCloudEvents(body, schemas.NamespaceLimits)
				if err != nil {
					t.Fatalf("CloudEvents body does not decode: %v", err)
				}
				for i, e := range again {
					if e.ID != tt.events[i].ID || e.Type != tt.events[i].Type || e.Subject != tt.events[i].Subject || e.Time != tt.events[i].Time {
						t.Errorf("event %d decodes to %+v, want the attributes of %+v", i, e, tt.events[i])
					}
				}
			case schemas.Custom:
				var objs []json.RawMessage
				if err := json.Unmarshal(body, &objs); err != nil {
					t.Fatal(err)
				}
				for i, o := range objs {
					if string(o) != string(tt.events[i].Raw) {
						t.Errorf("object %d = %s, want the published object %s", i, o, tt.events[i].Raw)
					}
				}
			}
		})
	}
}

func TestEncodeBatchRefuses(t *testing.T) {
	eg, ce, custom := encodeInputs(t)
	tests := []struct {
		name    string
		in, out schemas.Schema
		events  []*schemas.Event
	}{
		{"CloudEvents input as Event Grid schema", schemas.CloudEvents, schemas.EventGrid, ce},
		{"CloudEvents input as custom schema", schemas.CloudEvents, schemas.Custom, ce},
		{"Event Grid input as custom schema", schemas.EventGrid, schemas.Custom, eg},
		{"unset delivery schema", schemas.Custom, 0, custom},
		{"unset input schema", 0, schemas.EventGrid, eg},
		{"no events", schemas.EventGrid, schemas.EventGrid, nil},
		{"Event Grid input whose Raw has no data", schemas.EventGrid, schemas.CloudEvents, []*schemas.Event{{ID: "x", Type: "T", Raw: []byte(`{"id":"x"}`)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, ct, err := schemas.EncodeBatch([]byte("kept"), tt.in, tt.out, topicID, tt.events)
			if err == nil {
				t.Fatalf("got %s (%s), want an error", body, ct)
			}
		})
	}
}

func TestEncodeBatchTopicFallsBackToSource(t *testing.T) {
	eg, _, _ := encodeInputs(t)
	withTopic, _, err := schemas.EncodeBatch(nil, schemas.EventGrid, schemas.CloudEvents, topicID, eg)
	if err != nil {
		t.Fatal(err)
	}
	fromSource, _, err := schemas.EncodeBatch(nil, schemas.EventGrid, schemas.CloudEvents, "", eg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(withTopic, fromSource) {
		t.Errorf("with an empty topicID the source must come from Event.Source:\n%s\n%s", withTopic, fromSource)
	}
}

func TestMetadataVersion(t *testing.T) {
	tests := []struct {
		out  schemas.Schema
		want string
	}{
		{schemas.EventGrid, "1"},
		{schemas.Custom, "1"},
		{schemas.CloudEvents, "1.0"},
		{0, ""},
	}
	for _, tt := range tests {
		if got := schemas.MetadataVersion(tt.out); got != tt.want {
			t.Errorf("MetadataVersion(%v) = %q, want %q", tt.out, got, tt.want)
		}
	}
}

// An Event Grid event delivered as a CloudEvent carries dataschema "#" followed by its
// dataVersion, as Azure sends it: the converted storage event on
// learn.microsoft.com/azure/event-grid/cloudevents-schema has "dataschema": "#", and the Azure
// delivery quoted in cloudevents/sdk-go#615 too.
func TestConvertedDataSchemaIsHashAndDataVersion(t *testing.T) {
	for _, tt := range []struct {
		name, dataVersion, want string
	}{
		{"empty dataVersion", `dataVersion=""`, `"dataschema":"#"`},
		{"absent dataVersion", `-dataVersion`, `"dataschema":"#"`},
		{"dataVersion 1.0", `dataVersion="1.0"`, `"dataschema":"#1.0"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := schemas.DecodeEventGrid([]byte(array(egEvent(tt.dataVersion))), topicID, schemas.ClassicLimits)
			if err != nil {
				t.Fatal(err)
			}
			body, _, err := schemas.EncodeBatch(nil, schemas.EventGrid, schemas.CloudEvents, topicID, evs)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(body), tt.want) {
				t.Errorf("body %s does not carry %s", body, tt.want)
			}
		})
	}
}

// EncodeOptions.OmitConvertedDataSchema (an egrid extension) leaves dataschema out of converted
// events, for receivers that refuse Azure's "#"+dataVersion (cloudevents/sdk-go#615); the
// dead-letter and native CloudEvents encodings are unaffected.
func TestEncodeOmitConvertedDataSchema(t *testing.T) {
	evs, err := schemas.DecodeEventGrid([]byte(array(egEvent(`dataVersion="1.0"`))), topicID, schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := schemas.EncodeBatchWith(nil, schemas.EventGrid, schemas.CloudEvents, topicID, evs, schemas.EncodeOptions{OmitConvertedDataSchema: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "dataschema") {
		t.Errorf("body %s carries dataschema; want none", body)
	}
}
