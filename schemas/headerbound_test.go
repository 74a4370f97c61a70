package schemas_test

import (
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
)

// Events whose header-bound fields (id, dataVersion, traceparent) cannot be sent as HTTP header
// values are refused at publish, each problem naming the field (SPEC §8).
func TestHeaderBoundFieldsRefusedAtPublish(t *testing.T) {
	const tid = "/subscriptions/s/resourceGroups/g/providers/Microsoft.EventGrid/topics/t"
	long := strings.Repeat("x", schemas.MaxIDBytes+1)
	eg := func(id, dataVersion string) string {
		return `[{"id":"` + id + `","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1,"dataVersion":"` + dataVersion + `"}]`
	}
	ce := func(id, traceparent string) string {
		return `[{"specversion":"1.0","id":"` + id + `","source":"/s","type":"T","traceparent":"` + traceparent + `"}]`
	}
	custom := func(id, v string) string { return `[{"orderId":"` + id + `","kind":"K","v":"` + v + `"}]` }
	mapping := &schemas.InputMapping{
		ID:          schemas.FieldMapping{SourceField: "orderId"},
		EventType:   schemas.FieldMapping{SourceField: "kind"},
		DataVersion: schemas.FieldMapping{SourceField: "v"},
	}
	decode := map[string]func(body string) error{
		"eventgrid": func(b string) error {
			_, err := schemas.DecodeEventGrid([]byte(b), tid, schemas.ClassicLimits)
			return err
		},
		"cloudevents": func(b string) error {
			_, err := schemas.DecodeCloudEvents([]byte(b), schemas.ClassicLimits)
			return err
		},
		"custom": func(b string) error {
			_, err := schemas.DecodeCustom([]byte(b), mapping, tid, schemas.ClassicLimits, func() string { return "g" }, time.Now())
			return err
		},
	}
	tests := []struct {
		name      string
		schema    string
		body      string
		wantField string // "" when the event is accepted
		wantText  string
	}{
		{name: "line feed in an id", schema: "eventgrid", body: eg(`a\nb`, "1"), wantField: "id", wantText: "control character U+000A at byte 1"},
		{name: "carriage return in dataVersion", schema: "eventgrid", body: eg("e1", `1\r`), wantField: "dataVersion", wantText: "U+000D"},
		{name: "NUL in an id", schema: "eventgrid", body: eg(`\u0000`, "1"), wantField: "id", wantText: "U+0000"},
		{name: "tab in an id", schema: "eventgrid", body: eg(`a\tb`, "1"), wantField: "id", wantText: "U+0009"},
		{name: "DEL in an id", schema: "eventgrid", body: eg("a\x7f", "1"), wantField: "id", wantText: "U+007F"},
		{name: "C1 control in an id", schema: "eventgrid", body: eg(`a\u0085`, "1"), wantField: "id", wantText: "U+0085"},
		{name: "id over the limit", schema: "eventgrid", body: eg(long, "1"), wantField: "id", wantText: "over the limit of 1024 bytes"},
		{name: "dataVersion over the limit", schema: "eventgrid", body: eg("e1", long), wantField: "dataVersion", wantText: "over the limit"},
		{name: "id at the limit, non-ASCII letters", schema: "eventgrid", body: eg(strings.Repeat("é", schemas.MaxIDBytes/2), "1")},
		{name: "CloudEvent id with a line feed", schema: "cloudevents", body: ce(`a\nb`, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), wantField: "id", wantText: "U+000A"},
		{name: "CloudEvent traceparent with a line feed", schema: "cloudevents", body: ce("e1", `00-x\r\nX-Injected: 1`), wantField: "traceparent", wantText: "U+000D"},
		{name: "CloudEvent traceparent over the limit", schema: "cloudevents", body: ce("e1", long), wantField: "traceparent", wantText: "over the limit"},
		{name: "CloudEvent with a valid traceparent", schema: "cloudevents", body: ce("e1", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		{name: "custom id with a control character names the source field", schema: "custom", body: custom(`a\u001bb`, "1"), wantField: "orderId", wantText: "U+001B"},
		{name: "custom dataVersion over the limit names the source field", schema: "custom", body: custom("o1", long), wantField: "v", wantText: "over the limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := decode[tt.schema](tt.body)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			ves := schemas.ValidationErrors(err)
			if len(ves) != 1 {
				t.Fatalf("got %v, want one validation error", err)
			}
			if ves[0].Index != 0 || ves[0].Field != tt.wantField || !strings.Contains(ves[0].Reason, tt.wantText) {
				t.Errorf("got %+v, want event 0, field %q, reason containing %q", ves[0], tt.wantField, tt.wantText)
			}
			if len(ves[0].Error()) > 400 {
				t.Errorf("message is %d bytes; it must not repeat the value", len(ves[0].Error()))
			}
		})
	}
}

// A binary-mode CloudEvent's ce-id is percent-decoded, so %0A becomes a line feed: refused.
func TestHeaderBoundBinaryCloudEvent(t *testing.T) {
	_, err := schemas.DecodeCloudEventBinary(map[string]string{
		"specversion": "1.0", "id": "a%0Ab", "source": "/s", "type": "T",
	}, "application/json", []byte(`{}`), schemas.ClassicLimits)
	ves := schemas.ValidationErrors(err)
	if len(ves) != 1 || ves[0].Field != "id" {
		t.Fatalf("got %v, want one problem with field id", err)
	}
}

// A dataVersion defaultValue that could never be sent is refused when the mapping is checked.
func TestInputMappingRefusesUnsendableDataVersionDefault(t *testing.T) {
	m := &schemas.InputMapping{
		EventType:   schemas.FieldMapping{DefaultValue: "T"},
		DataVersion: schemas.FieldMapping{DefaultValue: "1\n"},
	}
	err := m.Validate()
	if err == nil || !strings.Contains(err.Error(), "inputSchemaMapping.dataVersion: defaultValue holds the control character U+000A") {
		t.Fatalf("got %v, want the dataVersion default refused", err)
	}
}

func TestHeaderValueProblem(t *testing.T) {
	for _, tt := range []struct {
		v    string
		max  int
		want string
	}{
		{v: "", want: ""},
		{v: "plain value", max: 11, want: ""},
		{v: "twelve bytes", max: 11, want: "is 12 bytes"},
		{v: "日本", want: ""},
		{v: "\xc2", want: ""}, // a lone lead byte is not a control character
		{v: "x\u009f", want: "U+009F at byte 1"},
		{v: "x\u00a0", want: ""}, // no-break space is not a control character
	} {
		got := schemas.HeaderValueProblem(tt.v, tt.max)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("HeaderValueProblem(%q, %d) = %q, want %q", tt.v, tt.max, got, tt.want)
		}
	}
}
