package schemas_test

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

func TestDecodeEventGridAccepts(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantRaw []string
		want    []schemas.Event // Raw is checked through wantRaw
	}{
		{
			name:    "minimal event is normalised with topic, dataVersion and metadataVersion stamped",
			body:    array(egEvent()),
			wantRaw: []string{`{"id":"e1","topic":"` + topicID + `","subject":"/orders/1","eventType":"Orders.Created","eventTime":"2024-05-01T12:00:00Z","data":{"n":1},"dataVersion":"","metadataVersion":"1"}`},
			want:    []schemas.Event{{ID: "e1", Subject: "/orders/1", Type: "Orders.Created", Time: "2024-05-01T12:00:00Z", Source: topicID}},
		},
		{
			name:    "members in any order, written in canonical order",
			body:    `[{"data":[1,"two"],"eventTime":"2024-05-01T12:00:00.1234567+02:00","dataVersion":"2.0","eventType":"T","subject":"","id":"x","metadataVersion":"1"}]`,
			wantRaw: []string{`{"id":"x","topic":"` + topicID + `","subject":"","eventType":"T","eventTime":"2024-05-01T12:00:00.1234567+02:00","data":[1,"two"],"dataVersion":"2.0","metadataVersion":"1"}`},
			want:    []schemas.Event{{ID: "x", Subject: "", Type: "T", Time: "2024-05-01T12:00:00.1234567+02:00", DataVersion: "2.0", Source: topicID}},
		},
		{
			name:    "topic equal to the topic ID in another case is accepted and stamped in canonical form",
			body:    array(egEvent(`topic="` + strings.ToUpper(topicID) + `"`)),
			wantRaw: []string{`{"id":"e1","topic":"` + topicID + `","subject":"/orders/1","eventType":"Orders.Created","eventTime":"2024-05-01T12:00:00Z","data":{"n":1},"dataVersion":"","metadataVersion":"1"}`},
			want:    []schemas.Event{{ID: "e1", Subject: "/orders/1", Type: "Orders.Created", Time: "2024-05-01T12:00:00Z", Source: topicID}},
		},
		{
			name:    "optional members sent as null count as absent",
			body:    array(egEvent(`topic=null`, `dataVersion=null`, `metadataVersion=null`)),
			wantRaw: []string{`{"id":"e1","topic":"` + topicID + `","subject":"/orders/1","eventType":"Orders.Created","eventTime":"2024-05-01T12:00:00Z","data":{"n":1},"dataVersion":"","metadataVersion":"1"}`},
			want:    []schemas.Event{{ID: "e1", Subject: "/orders/1", Type: "Orders.Created", Time: "2024-05-01T12:00:00Z", Source: topicID}},
		},
		{
			name:    "data null is present and delivered as null",
			body:    array(egEvent(`data=null`)),
			wantRaw: []string{`{"id":"e1","topic":"` + topicID + `","subject":"/orders/1","eventType":"Orders.Created","eventTime":"2024-05-01T12:00:00Z","data":null,"dataVersion":"","metadataVersion":"1"}`},
			want:    []schemas.Event{{ID: "e1", Subject: "/orders/1", Type: "Orders.Created", Time: "2024-05-01T12:00:00Z", Source: topicID}},
		},
		{
			name: "data of every kind is kept, whitespace outside strings compacted",
			body: "[\n  " + egEvent(`data="text"`) + ",\n  " + egEvent(`data=-1.5e3`) + ",\n  " + egEvent("data={ \"a\" : \"x  y\\\" }\" ,\n \"b\": [ 1, 2 ] }") + "\n]\n",
			wantRaw: []string{
				`{"id":"e1","topic":"` + topicID + `","subject":"/orders/1","eventType":"Orders.Created","eventTime":"2024-05-01T12:00:00Z","data":"text","dataVersion":"","metadataVersion":"1"}`,
				`{"id":"e1","topic":"` + topicID + `","subject":"/orders/1","eventType":"Orders.Created","eventTime":"2024-05-01T12:00:00Z","data":-1.5e3,"dataVersion":"","metadataVersion":"1"}`,
				`{"id":"e1","topic":"` + topicID + `","subject":"/orders/1","eventType":"Orders.Created","eventTime":"2024-05-01T12:00:00Z","data":{"a":"x  y\" }","b":[1,2]},"dataVersion":"","metadataVersion":"1"}`,
			},
			want: []schemas.Event{
				{ID: "e1", Subject: "/orders/1", Type: "Orders.Created", Time: "2024-05-01T12:00:00Z", Source: topicID},
				{ID: "e1", Subject: "/orders/1", Type: "Orders.Created", Time: "2024-05-01T12:00:00Z", Source: topicID},
				{ID: "e1", Subject: "/orders/1", Type: "Orders.Created", Time: "2024-05-01T12:00:00Z", Source: topicID},
			},
		},
		{
			name:    "escaped strings are decoded in the fields and kept verbatim in Raw",
			body:    array(egEvent(`id="a\u0062\/\ud83d\ude00"`, `subject="/caf\u00e9"`)),
			wantRaw: []string{`{"id":"a\u0062\/\ud83d\ude00","topic":"` + topicID + `","subject":"/caf\u00e9","eventType":"Orders.Created","eventTime":"2024-05-01T12:00:00Z","data":{"n":1},"dataVersion":"","metadataVersion":"1"}`},
			want:    []schemas.Event{{ID: "ab/😀", Subject: "/café", Type: "Orders.Created", Time: "2024-05-01T12:00:00Z", Source: topicID}},
		},
		{
			// Microsoft's curl quickstart for custom topics builds eventTime with
			// `date +%Y-%m-%dT%H:%M:%S%z` ("+0000") and Azure delivers it
			// (learn.microsoft.com/azure/event-grid/custom-event-quickstart).
			name: "eventTime with an ISO 8601 offset without colon is accepted and delivered as RFC 3339",
			body: array(egEvent(`eventTime="2024-05-01T12:00:00+0000"`), egEvent(`eventTime="2024-05-01T12:00:00.5-0730"`)),
			wantRaw: []string{
				`{"id":"e1","topic":"` + topicID + `","subject":"/orders/1","eventType":"Orders.Created","eventTime":"2024-05-01T12:00:00+00:00","data":{"n":1},"dataVersion":"","metadataVersion":"1"}`,
				`{"id":"e1","topic":"` + topicID + `","subject":"/orders/1","eventType":"Orders.Created","eventTime":"2024-05-01T12:00:00.5-07:30","data":{"n":1},"dataVersion":"","metadataVersion":"1"}`,
			},
			want: []schemas.Event{
				{ID: "e1", Subject: "/orders/1", Type: "Orders.Created", Time: "2024-05-01T12:00:00+00:00", Source: topicID},
				{ID: "e1", Subject: "/orders/1", Type: "Orders.Created", Time: "2024-05-01T12:00:00.5-07:30", Source: topicID},
			},
		},
		{
			name:    "escaped member names are recognised",
			body:    `[{"\u0069d":"e1","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1}]`,
			wantRaw: []string{`{"id":"e1","topic":"` + topicID + `","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1,"dataVersion":"","metadataVersion":"1"}`},
			want:    []schemas.Event{{ID: "e1", Subject: "s", Type: "T", Time: "2024-05-01T12:00:00Z", Source: topicID}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, err := schemas.DecodeEventGrid([]byte(tt.body), topicID, schemas.ClassicLimits)
			if err != nil {
				t.Fatalf("DecodeEventGrid: %v", err)
			}
			if len(events) != len(tt.want) {
				t.Fatalf("got %d events, want %d", len(events), len(tt.want))
			}
			for i, e := range events {
				if string(e.Raw) != tt.wantRaw[i] {
					t.Errorf("event %d Raw:\n got %s\nwant %s", i, e.Raw, tt.wantRaw[i])
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

func TestDecodeEventGridRejects(t *testing.T) {
	manyBad := make([]string, 25)
	for i := range manyBad {
		manyBad[i] = egEvent(`-id`)
	}
	wantTwenty := make([]wantProblem, 20)
	for i := range wantTwenty {
		wantTwenty[i] = wantProblem{i, "id", "is required"}
	}
	tests := []struct {
		name string
		body string
		want []wantProblem
	}{
		{"missing id", array(egEvent(`-id`)), []wantProblem{{0, "id", "is required"}}},
		{"missing subject", array(egEvent(`-subject`)), []wantProblem{{0, "subject", "is required"}}},
		{"missing eventType", array(egEvent(`-eventType`)), []wantProblem{{0, "eventType", "is required"}}},
		{"missing eventTime", array(egEvent(`-eventTime`)), []wantProblem{{0, "eventTime", "is required"}}},
		{"missing data", array(egEvent(`-data`)), []wantProblem{{0, "data", "is required"}}},
		{"required member sent as null", array(egEvent(`id=null`)), []wantProblem{{0, "id", "is required"}}},
		{"empty id", array(egEvent(`id=""`)), []wantProblem{{0, "id", "must not be empty"}}},
		{"empty eventType", array(egEvent(`eventType=""`)), []wantProblem{{0, "eventType", "must not be empty"}}},
		{"id is a number", array(egEvent(`id=5`)), []wantProblem{{0, "id", "must be a string, got number"}}},
		{"subject is a boolean", array(egEvent(`subject=true`)), []wantProblem{{0, "subject", "must be a string, got boolean"}}},
		{"eventType is an object", array(egEvent(`eventType={}`)), []wantProblem{{0, "eventType", "must be a string, got object"}}},
		{"eventTime is a number", array(egEvent(`eventTime=1714564800`)), []wantProblem{{0, "eventTime", "must be a string, got number"}}},
		{"dataVersion is a number", array(egEvent(`dataVersion=2`)), []wantProblem{{0, "dataVersion", "must be a string, got number"}}},
		{"topic is an array", array(egEvent(`topic=[]`)), []wantProblem{{0, "topic", "must be a string, got array"}}},
		{"metadataVersion is a number", array(egEvent(`metadataVersion=1`)), []wantProblem{{0, "metadataVersion", "must be a string, got number"}}},
		{"eventTime is not RFC 3339", array(egEvent(`eventTime="yesterday"`)), []wantProblem{{0, "eventTime", `"yesterday", not an RFC 3339 date-time`}}},
		{"eventTime without a time zone", array(egEvent(`eventTime="2024-05-01T12:00:00"`)), []wantProblem{{0, "eventTime", "not an RFC 3339 date-time"}}},
		{"topic of another topic", array(egEvent(`topic="/subscriptions/x/topics/other"`)), []wantProblem{{0, "topic", `is "/subscriptions/x/topics/other", but this topic's resource ID is "` + topicID + `"`}}},
		{"metadataVersion other than 1", array(egEvent(`metadataVersion="2"`)), []wantProblem{{0, "metadataVersion", `the only metadata version is "1"`}}},
		{"member sent twice", `[{"id":"a","id":"b","subject":"s","eventType":"T","eventTime":"2024-05-01T12:00:00Z","data":1}]`, []wantProblem{{0, "id", "appears more than once"}}},
		{"member name in the wrong case", array(egEvent(`-eventType`, `EventType="T"`)), []wantProblem{{0, "eventType", `is required (the event has "EventType": member names are case-sensitive)`}}},
		// Azure answers 400 InputJsonInvalid "This resource is configured for 'EventGridEvent'
		// schema. Received unexpected property 'sas_url' ..." (quoted in microsoft/onefuzz#3285).
		{"unexpected property", array(egEvent(`sas_url="https://x"`)), []wantProblem{{0, "sas_url", "unexpected property: this topic is configured for 'EventGridEvent' schema"}}},
		{"unexpected CloudEvents property", array(egEvent(`source="/s"`, `specversion="1.0"`)), []wantProblem{{0, "source", "unexpected property"}, {0, "specversion", "unexpected property"}}},
		{"optional member name in the wrong case", array(egEvent(`DataVersion="1"`)), []wantProblem{{0, "DataVersion", `unexpected property: member names are case-sensitive: send it as "dataVersion"`}}},
		{"eventTime with a malformed offset", array(egEvent(`eventTime="2024-05-01T12:00:00+00"`)), []wantProblem{{0, "eventTime", "not an RFC 3339 date-time"}}},
		{"element is not an object", array(egEvent(), `"e2"`, `[1]`), []wantProblem{{1, "", "must be a JSON object, got string"}, {2, "", "must be a JSON object, got array"}}},
		{
			name: "every problem of every event is reported with its index",
			body: array(egEvent(), egEvent(`-id`, `eventTime="x"`), egEvent(), egEvent(`data=null`, `subject=1`, `-eventType`)),
			want: []wantProblem{{1, "id", "is required"}, {1, "eventTime", "not an RFC 3339"}, {3, "subject", "got number"}, {3, "eventType", "is required"}},
		},
		{"at most 20 problems are reported", array(manyBad...), wantTwenty},
		{"body is an object", egEvent(), []wantProblem{{-1, "", "body is a JSON object, but an Event Grid schema publish must be a JSON array of events: wrap a single event in [ ]"}}},
		{"body is a string", `"hello"`, []wantProblem{{-1, "", "body is a JSON string"}}},
		{"body is empty", ``, []wantProblem{{-1, "", "body is empty"}}},
		{"body is whitespace", " \n\t", []wantProblem{{-1, "", "body is empty"}}},
		{"empty array", ` [ ] `, []wantProblem{{-1, "", "empty JSON array"}}},
		{"malformed: trailing comma", `[` + egEvent() + `,]`, []wantProblem{{-1, "", "body is not valid JSON: invalid character ']', expected a value at offset " + strconv.Itoa(1+len(egEvent())+1)}}},
		{"malformed: unterminated array", `[` + egEvent(), []wantProblem{{-1, "", "unexpected end of input, expected ',' or ']'"}}},
		{"malformed: data after the array", array(egEvent()) + ` x`, []wantProblem{{-1, "", "unexpected 'x' after the top-level value at offset " + strconv.Itoa(len(array(egEvent()))+1)}}},
		{"malformed: unterminated string", `[{"id":"e1`, []wantProblem{{-1, "", "unterminated string at offset 7"}}},
		{"malformed: control character in a string", "[{\"id\":\"a\tb\"}]", []wantProblem{{-1, "", "control character"}}},
		{"malformed: invalid escape", `[{"id":"a\qb"}]`, []wantProblem{{-1, "", "invalid escape 'q'"}}},
		{"malformed: invalid UTF-8", "[{\"id\":\"a\xffb\"}]", []wantProblem{{-1, "", "invalid UTF-8 in string at offset 9"}}},
		{"malformed: leading zero", array(egEvent(`data=01`)), []wantProblem{{-1, "", "body is not valid JSON"}}},
		{"malformed: bare word", array(egEvent(`data=nul`)), []wantProblem{{-1, "", `expected "null"`}}},
		{"malformed: unquoted member name", `[{id:"e1"}]`, []wantProblem{{-1, "", "expected a string naming an object member at offset 2"}}},
		{"malformed: not JSON at all", `<xml/>`, []wantProblem{{-1, "", "invalid character '<', expected '[' at offset 0"}}},
		{"malformed after bad events: the syntax error wins", array(egEvent(`-id`)) + `]`, []wantProblem{{-1, "", "body is not valid JSON"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, err := schemas.DecodeEventGrid([]byte(tt.body), topicID, schemas.ClassicLimits)
			if events != nil {
				t.Errorf("got %d events with an error, want none", len(events))
			}
			checkProblems(t, err, tt.want)
		})
	}
}

func TestDecodeEventGridLimits(t *testing.T) {
	// sized returns an event whose JSON is exactly n bytes long.
	sized := func(n int) string {
		e := egEvent(`data=""`)
		return egEvent(`data="` + strings.Repeat("x", n-len(e)) + `"`)
	}
	events := func(n int) string {
		es := make([]string, n)
		for i := range es {
			es[i] = egEvent()
		}
		return array(es...)
	}
	roomy := schemas.Limits{MaxEventBytes: 1 << 20, MaxRequestBytes: 4 << 20, MaxEvents: 5000}
	tests := []struct {
		name         string
		body         string
		lim          schemas.Limits
		wantEvents   int
		wantTooLarge *schemas.TooLargeError
		wantTooMany  *schemas.TooManyEventsError
	}{
		{name: "event of exactly 1 MB", body: array(egEvent(), sized(1<<20)), lim: roomy, wantEvents: 2},
		{name: "event of 1 MB + 1 byte", body: array(egEvent(), sized(1<<20+1)), lim: roomy, wantTooLarge: &schemas.TooLargeError{Index: 1, Size: 1<<20 + 1, Limit: 1 << 20}},
		{name: "request of 1 MB + 1 byte", body: array(sized(1<<20 - 1)), lim: schemas.ClassicLimits, wantTooLarge: &schemas.TooLargeError{Index: -1, Size: 1<<20 + 1, Limit: 1 << 20}},
		{name: "5000 events", body: events(5000), lim: schemas.ClassicLimits, wantEvents: 5000},
		{name: "5001 events", body: events(5001), lim: schemas.ClassicLimits, wantTooMany: &schemas.TooManyEventsError{Count: 5001, Limit: 5000}},
		{name: "1001 events to a namespace topic", body: events(1001), lim: schemas.NamespaceLimits, wantTooMany: &schemas.TooManyEventsError{Count: 1001, Limit: 1000}},
		{name: "zero limits mean no limit", body: events(6000), lim: schemas.Limits{}, wantEvents: 6000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schemas.DecodeEventGrid([]byte(tt.body), topicID, tt.lim)
			var tooLarge *schemas.TooLargeError
			var tooMany *schemas.TooManyEventsError
			switch {
			case tt.wantTooLarge != nil:
				if !errors.As(err, &tooLarge) || *tooLarge != *tt.wantTooLarge {
					t.Fatalf("got %v, want %+v", err, tt.wantTooLarge)
				}
			case tt.wantTooMany != nil:
				if !errors.As(err, &tooMany) || *tooMany != *tt.wantTooMany {
					t.Fatalf("got %v, want %+v", err, tt.wantTooMany)
				}
			case err != nil:
				t.Fatalf("DecodeEventGrid: %v", err)
			case len(got) != tt.wantEvents:
				t.Fatalf("got %d events, want %d", len(got), tt.wantEvents)
			}
			if err != nil && got != nil {
				t.Errorf("got events with an error")
			}
		})
	}
}
