package schemas_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
)

// ids returns a newID function giving gen-1, gen-2, ...
func ids() func() string {
	n := 0
	return func() string {
		n++
		return "gen-" + strconv.Itoa(n)
	}
}

var customNow = time.Date(2024, 5, 1, 14, 30, 0, 500_000_000, time.FixedZone("CEST", 2*3600))

// ordersMapping maps every field, with defaults where Event Grid allows them.
var ordersMapping = &schemas.InputMapping{
	ID:          schemas.FieldMapping{SourceField: "orderId"},
	Topic:       schemas.FieldMapping{SourceField: "topicId"},
	EventTime:   schemas.FieldMapping{SourceField: "ts"},
	EventType:   schemas.FieldMapping{SourceField: "kind", DefaultValue: "Orders.Unknown"},
	Subject:     schemas.FieldMapping{SourceField: "path", DefaultValue: "/orders"},
	DataVersion: schemas.FieldMapping{SourceField: "v", DefaultValue: "1.0"},
}

func TestDecodeCustomAccepts(t *testing.T) {
	tests := []struct {
		name    string
		mapping *schemas.InputMapping
		body    string
		want    []schemas.Event // Raw must be the published object
	}{
		{
			name:    "every field from its source field",
			mapping: ordersMapping,
			body:    `[{"orderId": "o-1", "topicId": "` + topicID + `", "ts": "2024-05-01T12:00:00Z", "kind": "Orders.Created", "path": "/orders/1", "v": "2.0", "other": {"x": [1, 2]}}]`,
			want:    []schemas.Event{{ID: "o-1", Type: "Orders.Created", Subject: "/orders/1", Time: "2024-05-01T12:00:00Z", DataVersion: "2.0", Source: topicID}},
		},
		{
			name:    "absent fields take defaults, a generated id and now in UTC",
			mapping: ordersMapping,
			body:    `[{"total": 3}, {"orderId": null, "kind": null, "path": ""}]`,
			want: []schemas.Event{
				{ID: "gen-1", Type: "Orders.Unknown", Subject: "/orders", Time: "2024-05-01T12:30:00.5Z", DataVersion: "1.0", Source: topicID},
				{ID: "gen-2", Type: "Orders.Unknown", Subject: "/orders", Time: "2024-05-01T12:30:00.5Z", DataVersion: "1.0", Source: topicID},
			},
		},
		{
			name:    "numbers and booleans are taken as their JSON text",
			mapping: ordersMapping,
			body:    `[{"orderId": 12, "kind": true, "v": 2.50}]`,
			want:    []schemas.Event{{ID: "12", Type: "true", Subject: "/orders", Time: "2024-05-01T12:30:00.5Z", DataVersion: "2.50", Source: topicID}},
		},
		{
			name: "dotted paths select nested members, a literal member with the dotted name wins",
			mapping: &schemas.InputMapping{
				ID:        schemas.FieldMapping{SourceField: "meta.id"},
				EventType: schemas.FieldMapping{SourceField: "meta.type.name"},
				Subject:   schemas.FieldMapping{SourceField: "meta.missing", DefaultValue: "/d"},
			},
			body: `[{"meta": {"id": "nested", "type": {"name": "T.Nested"}}}, {"meta.id": "literal", "meta": {"id": "nested", "type": {"name": "T"}}}]`,
			want: []schemas.Event{
				{ID: "nested", Type: "T.Nested", Subject: "/d", Time: "2024-05-01T12:30:00.5Z", Source: topicID},
				{ID: "literal", Type: "T", Subject: "/d", Time: "2024-05-01T12:30:00.5Z", Source: topicID},
			},
		},
		{
			// `date +%Y-%m-%dT%H:%M:%S%z` prints "+0000", which the Event Grid schema takes and
			// delivers as "+00:00" (eventgrid_test.go); a mapped eventTime is taken the same way.
			name:    "an eventTime offset without its colon",
			mapping: ordersMapping,
			body:    `[{"orderId": "o-1", "ts": "2024-05-01T12:00:00+0000"}, {"orderId": "o-2", "ts": "2024-05-01T12:00:00.5-0730"}]`,
			want: []schemas.Event{
				{ID: "o-1", Type: "Orders.Unknown", Subject: "/orders", Time: "2024-05-01T12:00:00+00:00", DataVersion: "1.0", Source: topicID},
				{ID: "o-2", Type: "Orders.Unknown", Subject: "/orders", Time: "2024-05-01T12:00:00.5-07:30", DataVersion: "1.0", Source: topicID},
			},
		},
		{
			name:    "only defaults",
			mapping: &schemas.InputMapping{EventType: schemas.FieldMapping{DefaultValue: "T"}, Subject: schemas.FieldMapping{DefaultValue: "/s"}},
			body:    `[{"eventType": "ignored", "id": "ignored"}]`,
			want:    []schemas.Event{{ID: "gen-1", Type: "T", Subject: "/s", Time: "2024-05-01T12:30:00.5Z", Source: topicID}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, err := schemas.DecodeCustom([]byte(tt.body), tt.mapping, topicID, schemas.ClassicLimits, ids(), customNow)
			if err != nil {
				t.Fatalf("DecodeCustom: %v", err)
			}
			var published []json.RawMessage
			if err := json.Unmarshal([]byte(tt.body), &published); err != nil {
				t.Fatal(err)
			}
			if len(events) != len(tt.want) {
				t.Fatalf("got %d events, want %d", len(events), len(tt.want))
			}
			for i, e := range events {
				if string(e.Raw) != string(published[i]) {
					t.Errorf("event %d Raw = %s, want the published object %s", i, e.Raw, published[i])
				}
				got := *e
				got.Raw = nil
				if !reflect.DeepEqual(got, tt.want[i]) {
					t.Errorf("event %d = %+v, want %+v", i, got, tt.want[i])
				}
			}
		})
	}
}

func TestDecodeCustomRejects(t *testing.T) {
	noDefault := &schemas.InputMapping{EventType: schemas.FieldMapping{SourceField: "kind"}}
	tests := []struct {
		name    string
		mapping *schemas.InputMapping
		body    string
		want    []wantProblem
	}{
		{"eventTime is not RFC 3339", ordersMapping, `[{"ts": "yesterday"}]`, []wantProblem{{0, "ts", "is mapped to eventTime and must be an RFC 3339 date-time string"}}},
		{"eventTime is a number", ordersMapping, `[{"ts": 1714564800}]`, []wantProblem{{0, "ts", "must be an RFC 3339 date-time string"}}},
		{"mapped field is an object", ordersMapping, `[{"kind": {"name": "x"}}]`, []wantProblem{{0, "kind", "is mapped to eventType and must be a string, number or boolean, got object"}}},
		{"mapped field is an array", ordersMapping, `[{"orderId": [1]}]`, []wantProblem{{0, "orderId", "got array"}}},
		{"topic of another topic", ordersMapping, `[{"topicId": "/other"}]`, []wantProblem{{0, "topicId", `is mapped to topic and is "/other"`}}},
		{"eventType absent without a default", noDefault, `[{"kind": "T"}, {"x": 1}]`, []wantProblem{{1, "kind", "the event does not have it and the mapping has no defaultValue"}}},
		{"element is not an object", ordersMapping, `[{}, "x", 3]`, []wantProblem{{1, "", "must be a JSON object, got string"}, {2, "", "got number"}}},
		{"body is an object", ordersMapping, `{"kind": "T"}`, []wantProblem{{-1, "", "body is a JSON object, but a custom schema publish must be a JSON array of events"}}},
		{"empty array", ordersMapping, `[]`, []wantProblem{{-1, "", "empty JSON array"}}},
		{"malformed", ordersMapping, `[{"kind": "T"`, []wantProblem{{-1, "", "body is not valid JSON"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, err := schemas.DecodeCustom([]byte(tt.body), tt.mapping, topicID, schemas.ClassicLimits, ids(), customNow)
			if events != nil {
				t.Errorf("got events with an error")
			}
			checkProblems(t, err, tt.want)
		})
	}
}

func TestDecodeCustomLimits(t *testing.T) {
	m := &schemas.InputMapping{EventType: schemas.FieldMapping{DefaultValue: "T"}}
	tests := []struct {
		name string
		body string
		lim  schemas.Limits
		want error
	}{
		{"5001 events", "[{}" + strings.Repeat(",{}", 5000) + "]", schemas.ClassicLimits, &schemas.TooManyEventsError{Count: 5001, Limit: 5000}},
		{"request over 1 MB", `[{"x":"` + strings.Repeat("a", 1<<20) + `"}]`, schemas.ClassicLimits, &schemas.TooLargeError{Index: -1, Size: 1<<20 + 10, Limit: 1 << 20}},
		{"event over 1 MB", `[{},{"x":"` + strings.Repeat("a", 1<<20) + `"}]`, schemas.Limits{MaxEventBytes: 1 << 20, MaxRequestBytes: 2 << 20}, &schemas.TooLargeError{Index: 1, Size: 1<<20 + 8, Limit: 1 << 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := schemas.DecodeCustom([]byte(tt.body), m, topicID, tt.lim, ids(), customNow)
			if !reflect.DeepEqual(err, tt.want) {
				t.Fatalf("got %#v, want %#v", err, tt.want)
			}
		})
	}
}

func TestDecodeCustomConfigurationErrors(t *testing.T) {
	tests := []struct {
		name    string
		mapping *schemas.InputMapping
		newID   func() string
	}{
		{"nil mapping gives no eventType", nil, ids()},
		{"invalid mapping", &schemas.InputMapping{ID: schemas.FieldMapping{DefaultValue: "x"}, EventType: schemas.FieldMapping{DefaultValue: "T"}}, ids()},
		{"nil newID", ordersMapping, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := schemas.DecodeCustom([]byte(`[{}]`), tt.mapping, topicID, schemas.ClassicLimits, tt.newID, customNow)
			if err == nil {
				t.Fatal("got no error")
			}
			if len(schemas.ValidationErrors(err)) != 0 {
				t.Errorf("a configuration problem must not look like bad input (400): %v", err)
			}
		})
	}
}

func TestInputMappingValidate(t *testing.T) {
	tests := []struct {
		name    string
		mapping schemas.InputMapping
		want    []schemas.MappingError // Field exactly; Reason compared by prefix of the words below
	}{
		{
			name:    "full mapping is valid",
			mapping: *ordersMapping,
		},
		{
			name:    "default eventType alone is valid",
			mapping: schemas.InputMapping{EventType: schemas.FieldMapping{DefaultValue: "T"}},
		},
		{
			name: "every problem is reported",
			mapping: schemas.InputMapping{
				ID:        schemas.FieldMapping{SourceField: "a", DefaultValue: "x"},
				Topic:     schemas.FieldMapping{DefaultValue: "x"},
				EventTime: schemas.FieldMapping{SourceField: "b..c", DefaultValue: "x"},
				Subject:   schemas.FieldMapping{SourceField: ".s"},
			},
			want: []schemas.MappingError{
				{Field: "id", Reason: "defaultValue is not allowed"},
				{Field: "topic", Reason: "defaultValue is not allowed"},
				{Field: "eventTime", Reason: "defaultValue is not allowed"},
				{Field: "eventTime", Reason: `sourceField "b..c" has an empty path segment`},
				{Field: "subject", Reason: `sourceField ".s" has an empty path segment`},
				{Field: "eventType", Reason: "needs a sourceField or a defaultValue"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.mapping.Validate()
			var got []*schemas.MappingError
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					var me *schemas.MappingError
					if !errors.As(e, &me) {
						t.Fatalf("error %v is not a *MappingError", e)
					}
					got = append(got, me)
				}
			} else if err != nil {
				t.Fatalf("Validate returned %T %v, want errors.Join of *MappingError", err, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d problems, want %d: %v", len(got), len(tt.want), err)
			}
			for i, w := range tt.want {
				if got[i].Field != w.Field || len(got[i].Reason) < len(w.Reason) || got[i].Reason[:len(w.Reason)] != w.Reason {
					t.Errorf("problem %d = %+v, want field %q and reason starting %q", i, *got[i], w.Field, w.Reason)
				}
			}
		})
	}
}

func TestInputMappingJSONShape(t *testing.T) {
	// The properties object of an ARM inputSchemaMapping.
	const arm = `{"id":{"sourceField":"orderId"},"eventTime":{"sourceField":"ts"},"eventType":{"sourceField":"kind","defaultValue":"Orders.Unknown"},"subject":{"defaultValue":"/orders"}}`
	var m schemas.InputMapping
	if err := json.Unmarshal([]byte(arm), &m); err != nil {
		t.Fatal(err)
	}
	want := schemas.InputMapping{
		ID:        schemas.FieldMapping{SourceField: "orderId"},
		EventTime: schemas.FieldMapping{SourceField: "ts"},
		EventType: schemas.FieldMapping{SourceField: "kind", DefaultValue: "Orders.Unknown"},
		Subject:   schemas.FieldMapping{DefaultValue: "/orders"},
	}
	if m != want {
		t.Fatalf("decoded %+v, want %+v", m, want)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != arm {
		t.Errorf("encoded %s, want %s (unset fields left out)", out, arm)
	}
}
