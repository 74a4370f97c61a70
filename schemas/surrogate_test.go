package schemas_test

import (
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
)

// A \u escape holding half of a UTF-16 surrogate pair without its other half names no
// character: decoded, "a\ud800" and "a\ud801" would both be "a\uFFFD", so two events with
// different ids would share one id (and one delivery history) while their Raw kept the
// escapes. .NET's Utf8JsonReader.GetString, which Event Grid reads events with, refuses such
// a string as invalid UTF-16; egrid refuses it in every member it decodes, naming the member,
// and leaves data as it is.
func TestLoneSurrogatesRefused(t *testing.T) {
	const tid = "/subscriptions/s/resourceGroups/g/providers/Microsoft.EventGrid/topics/t"
	eg := func(members string) string {
		return `[{"id":"e1","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1,` + members + `}]`
	}
	ce := func(members string) string {
		return `[{"specversion":"1.0","source":"/s","type":"T",` + members + `}]`
	}
	mapping := &schemas.InputMapping{
		ID:        schemas.FieldMapping{SourceField: "orderId"},
		EventType: schemas.FieldMapping{SourceField: "kind"},
		EventTime: schemas.FieldMapping{SourceField: "meta.ts"},
	}
	decode := map[string]func(body string) ([]*schemas.Event, error){
		"eventgrid": func(b string) ([]*schemas.Event, error) {
			return schemas.DecodeEventGrid([]byte(b), tid, schemas.ClassicLimits)
		},
		"cloudevents": func(b string) ([]*schemas.Event, error) {
			return schemas.DecodeCloudEvents([]byte(b), schemas.ClassicLimits)
		},
		"custom": func(b string) ([]*schemas.Event, error) {
			return schemas.DecodeCustom([]byte(b), mapping, tid, schemas.ClassicLimits, func() string { return "g" }, time.Now())
		},
	}
	tests := []struct {
		name      string
		schema    string
		body      string
		wantField string // "" when the event is accepted
		wantText  string
		wantID    string // the accepted event's id
	}{
		{name: "high surrogate at the end of an id", schema: "eventgrid", body: `[{"id":"a\ud800","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1}]`, wantField: "id", wantText: `holds the escape \ud800, half of a UTF-16 surrogate pair`},
		{name: "low surrogate alone", schema: "eventgrid", body: `[{"id":"\uDC00b","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1}]`, wantField: "id", wantText: `\uDC00`},
		{name: "high surrogate before a letter", schema: "eventgrid", body: `[{"id":"\ud800\u0041","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1}]`, wantField: "id", wantText: `\ud800`},
		{name: "two high surrogates", schema: "eventgrid", body: `[{"id":"x\ud83d\ud83d\ude00","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1}]`, wantField: "id", wantText: `\ud83d`},
		{name: "subject", schema: "eventgrid", body: `[{"id":"e1","subject":"/a/\udfff","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1}]`, wantField: "subject", wantText: `\udfff`},
		{name: "dataVersion", schema: "eventgrid", body: eg(`"dataVersion":"\ud800"`), wantField: "dataVersion", wantText: `\ud800`},
		{name: "topic is one problem", schema: "eventgrid", body: eg(`"topic":"\ud800"`), wantField: "topic", wantText: `\ud800`},
		{name: "eventTime is one problem", schema: "eventgrid", body: `[{"id":"e1","subject":"s","eventType":"T","eventTime":"\ud800","data":1}]`, wantField: "eventTime", wantText: `\ud800`},
		{name: "a pair in an id", schema: "eventgrid", body: `[{"id":"a\ud83d\ude00","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1}]`, wantID: "a\U0001F600"},
		{name: "an escaped backslash before ud800", schema: "eventgrid", body: `[{"id":"a\\ud800","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1}]`, wantID: `a\ud800`},
		{name: "data is left as it is", schema: "eventgrid", body: `[{"id":"e1","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":{"k":"\ud800"}}]`, wantID: "e1"},
		{name: "CloudEvent id", schema: "cloudevents", body: ce(`"id":"a\ud801"`), wantField: "id", wantText: `\ud801`},
		{name: "CloudEvent specversion is one problem", schema: "cloudevents", body: `[{"specversion":"\ud800","id":"e1","source":"/s","type":"T"}]`, wantField: "specversion", wantText: `\ud800`},
		{name: "CloudEvent traceparent", schema: "cloudevents", body: ce(`"id":"e1","traceparent":"00-\ud800"`), wantField: "traceparent", wantText: `\ud800`},
		{name: "CloudEvent extension", schema: "cloudevents", body: ce(`"id":"e1","tenant":"\ud800"`), wantField: "tenant", wantText: `\ud800`},
		{name: "CloudEvent data is left as it is", schema: "cloudevents", body: ce(`"id":"e1","data":"\ud800"`), wantID: "e1"},
		{name: "custom id names the source field", schema: "custom", body: `[{"orderId":"o\ud800","kind":"K"}]`, wantField: "orderId", wantText: `is mapped to id and holds the escape \ud800`},
		{name: "custom eventTime is one problem", schema: "custom", body: `[{"orderId":"o1","kind":"K","meta":{"ts":"\ud800"}}]`, wantField: "meta.ts", wantText: `\ud800`},
		{name: "custom unmapped fields are left as they are", schema: "custom", body: `[{"orderId":"o1","kind":"K","note":"\ud800"}]`, wantID: "o1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, err := decode[tt.schema](tt.body)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if events[0].ID != tt.wantID {
					t.Errorf("id %q, want %q", events[0].ID, tt.wantID)
				}
				return
			}
			ves := schemas.ValidationErrors(err)
			if len(ves) != 1 {
				t.Fatalf("got %v, want one validation error", err)
			}
			if ves[0].Index != 0 || ves[0].Field != tt.wantField || !strings.Contains(ves[0].Reason, tt.wantText) ||
				!strings.Contains(ves[0].Reason, `surrogate pair such as "\ud83d\ude00"`) {
				t.Errorf("got %+v, want event 0, field %q, reason containing %q and what to send", ves[0], tt.wantField, tt.wantText)
			}
		})
	}
}
