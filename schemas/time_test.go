package schemas_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// eventTimes are published times and what is delivered ("" for refused). noColon is the
// delivered form where an offset without colon is taken (Event Grid's eventTime and a custom
// schema's mapped one, as Azure takes them), for CloudEvents' time it is refused.
var eventTimes = []struct {
	v, want string
	noColon bool // taken only where "+0000" offsets are
}{
	{v: "2026-01-01T00:00:00Z", want: "2026-01-01T00:00:00Z"},
	{v: "2026-01-01T00:00:00.5Z", want: "2026-01-01T00:00:00.5Z"},
	{v: "2026-01-01T00:00:00.5111403Z", want: "2026-01-01T00:00:00.5111403Z"},
	{v: "2026-01-01T00:00:00+01:00", want: "2026-01-01T00:00:00+01:00"},
	{v: "2026-01-01T00:00:00-05:30", want: "2026-01-01T00:00:00-05:30"},
	{v: "2026-01-01T00:00:00-00:00", want: "2026-01-01T00:00:00-00:00"},
	{v: "2024-02-29T23:59:59.999Z", want: "2024-02-29T23:59:59.999Z"},
	// RFC 3339 §5.6 allows lower-case "t" and "z"; they are delivered upper-case, as Go's
	// time.Parse (the CloudEvents Go SDK) and ECMAScript's date format want them.
	{v: "2026-01-01t00:00:00z", want: "2026-01-01T00:00:00Z"},
	{v: "2026-01-01t00:00:00.25Z", want: "2026-01-01T00:00:00.25Z"},
	{v: "2026-01-01T00:00:00z", want: "2026-01-01T00:00:00Z"},
	{v: "2026-01-01t10:00:00+02:00", want: "2026-01-01T10:00:00+02:00"},
	{v: "2026-01-01T10:00:00+0000", want: "2026-01-01T10:00:00+00:00", noColon: true},
	{v: "2026-01-01t10:00:00.5-0130", want: "2026-01-01T10:00:00.5-01:30", noColon: true},

	{v: "2026-01-01T00:00:00,5Z"},
	{v: "2026-01-01t00:00:00,5z"},
	{v: "2026-01-01T00:00:00,5+0000"},
	{v: "2026-01-01 00:00:00Z"},
	{v: "2026-01-01T00:00:00"},
	{v: "2026-01-01T00:00Z"},
	{v: "2026-01-01"},
	{v: "2026-1-01T00:00:00Z"},
	{v: "2026-02-30T00:00:00Z"},
	{v: "2026-13-01T00:00:00Z"},
	{v: "2026-01-01T24:00:00Z"},
	{v: "2026-01-01T23:59:60Z"},
	{v: "2026-01-01T00:00:00.Z"},
	{v: "2026-01-01T00:00:00+01"},
	{v: "2026-01-01T00:00:00+24:00"},
	{v: "2026-01-01T00:00:00+01:60"},
	{v: "2026-01-01T00:00:00+2400"},
	{v: "2026-01-01T00:00:00Zjunk"},
	{v: "2026-01-01T00:00:00ZZ"},
	{v: "2026-01-01T00:00:00UTC"},
	{v: "+2026-01-01T00:00:00Z"},
	{v: "20260-01-01T00:00:00Z"},
	{v: "x"},
	{v: ""},
}

// TestEventTimeIsRFC3339 checks every published time against RFC 3339's grammar (§5.6), in
// Event Grid's eventTime, CloudEvents' time (structured and binary) and a custom schema's
// mapped eventTime, and what each delivers.
func TestEventTimeIsRFC3339(t *testing.T) {
	mapping := &schemas.InputMapping{EventTime: schemas.FieldMapping{SourceField: "ts"}, EventType: schemas.FieldMapping{DefaultValue: "T"}}
	for _, tt := range eventTimes {
		t.Run(tt.v, func(t *testing.T) {
			decoders := map[string]func() ([]*schemas.Event, error){
				"eventgrid": func() ([]*schemas.Event, error) {
					return schemas.DecodeEventGrid([]byte(array(egEvent(`eventTime=`+jsonString(tt.v)))), topicID, schemas.ClassicLimits)
				},
				"custom": func() ([]*schemas.Event, error) {
					return schemas.DecodeCustom([]byte(`[{"ts":`+jsonString(tt.v)+`}]`), mapping, topicID, schemas.ClassicLimits, ids(), customNow)
				},
				"cloudevents": func() ([]*schemas.Event, error) {
					return schemas.DecodeCloudEvents([]byte(array(ceEvent(`time=`+jsonString(tt.v)))), schemas.NamespaceLimits)
				},
				"binary": func() ([]*schemas.Event, error) {
					ev, err := schemas.DecodeCloudEventBinary(map[string]string{"specversion": "1.0", "id": "b1", "source": "/s", "type": "T", "time": strings.ReplaceAll(tt.v, " ", "%20")}, "", nil, schemas.NamespaceLimits)
					if err != nil {
						return nil, err
					}
					return []*schemas.Event{ev}, nil
				},
			}
			for name, decode := range decoders {
				want := tt.want
				if tt.noColon && (name == "cloudevents" || name == "binary") {
					want = ""
				}
				if tt.v == "" && name != "eventgrid" {
					continue // an empty optional time is another check
				}
				events, err := decode()
				if want == "" {
					ves := schemas.ValidationErrors(err)
					if len(ves) != 1 || !strings.Contains(ves[0].Reason, "RFC 3339 date-time") {
						t.Errorf("%s: got %v, want one problem saying it is not an RFC 3339 date-time", name, err)
					}
					if strings.Contains(tt.v, ",") && (len(ves) != 1 || !strings.Contains(ves[0].Reason, "'.'")) {
						t.Errorf("%s: %v does not say to write the fraction with '.'", name, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v, want the event accepted", name, err)
					continue
				}
				if events[0].Time != want {
					t.Errorf("%s: Time %q, want %q", name, events[0].Time, want)
				}
				// What is delivered carries the time as Time says.
				var raw map[string]any
				if err := json.Unmarshal(events[0].Raw, &raw); err != nil {
					t.Fatalf("%s: Raw %s: %v", name, events[0].Raw, err)
				}
				member := map[string]string{"eventgrid": "eventTime", "custom": "ts", "cloudevents": "time", "binary": "time"}[name]
				if got, _ := raw[member].(string); name != "custom" && got != want {
					t.Errorf("%s: Raw has %s %q, want %q: %s", name, member, got, want, events[0].Raw)
				}
			}
		})
	}
}

// A time in a structured CloudEvent written with escapes and white space around it is
// delivered upper-cased in the compacted object, the rest as published.
func TestCloudEventsLowerCaseTimeInRaw(t *testing.T) {
	body := "{ \"specversion\": \"1.0\", \"id\": \"a\",\n \"source\": \"/s\", \"type\": \"T\", \"time\": \"2026-01-01\\u0074 00:00:00z\", \"data\": [ 1 ] }"
	body = strings.Replace(body, `\u0074 `, `\u0074`, 1)
	events, err := schemas.DecodeCloudEvents([]byte(body), schemas.NamespaceLimits)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"specversion":"1.0","id":"a","source":"/s","type":"T","time":"2026-01-01T00:00:00Z","data":[1]}`
	if string(events[0].Raw) != want || events[0].Time != "2026-01-01T00:00:00Z" {
		t.Errorf("Raw %s Time %q, want %s", events[0].Raw, events[0].Time, want)
	}
}
