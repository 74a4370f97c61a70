package filter_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/schemas"
)

// TestEventTypes checks includedEventTypes (eventgrid-behaviour.md §4.2): exact match ignoring
// case; absent, empty or ["All"] means every type.
func TestEventTypes(t *testing.T) {
	tests := []struct {
		name      string
		types     []string
		eventType string
		want      bool
	}{
		{name: "listed", types: []string{"A.Created", "Orders.Created"}, eventType: "Orders.Created", want: true},
		{name: "listed, other case", types: []string{"orders.created"}, eventType: "Orders.Created", want: true},
		{name: "not listed", types: []string{"Orders.Deleted"}, eventType: "Orders.Created"},
		{name: "prefix is not a match", types: []string{"Orders"}, eventType: "Orders.Created"},
		{name: "absent", types: nil, eventType: "Anything", want: true},
		{name: "legacy All", types: []string{"All"}, eventType: "Anything", want: true},
		{name: "legacy All among others", types: []string{"Orders.Deleted", "ALL"}, eventType: "Anything", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustCompile(t, filter.Spec{IncludedEventTypes: tt.types}, schemas.EventGrid)
			ev := egEvent(`{}`)
			ev.Type = tt.eventType
			if got := f.Match(ev); got != tt.want {
				t.Errorf("types %q, event type %q: Match = %v, want %v", tt.types, tt.eventType, got, tt.want)
			}
		})
	}
}

// TestSubject checks subjectBeginsWith, subjectEndsWith and isSubjectCaseSensitive
// (eventgrid-behaviour.md §4.3).
func TestSubject(t *testing.T) {
	const blob = "/blobServices/default/containers/images/blobs/cat.JPG"
	tests := []struct {
		name          string
		begins, ends  string
		caseSensitive bool
		subject       string
		want          bool
	}{
		{name: "prefix", begins: "/blobServices/default/containers/images/", subject: blob, want: true},
		{name: "prefix ignoring case", begins: "/BLOBSERVICES/default/", subject: blob, want: true},
		{name: "prefix, case-sensitive, same case", begins: "/blobServices/", caseSensitive: true, subject: blob, want: true},
		{name: "prefix, case-sensitive, other case", begins: "/BLOBSERVICES/", caseSensitive: true, subject: blob},
		{name: "prefix without leading slash", begins: "blobServices/", subject: blob},
		{name: "prefix longer than subject", begins: blob + "/x", subject: blob},
		{name: "suffix ignoring case", ends: ".jpg", subject: blob, want: true},
		{name: "suffix, case-sensitive, other case", ends: ".jpg", caseSensitive: true, subject: blob},
		{name: "suffix, case-sensitive, same case", ends: ".JPG", caseSensitive: true, subject: blob, want: true},
		{name: "suffix mismatch", ends: ".png", subject: blob},
		{name: "both", begins: "/blobServices/", ends: ".jpg", subject: blob, want: true},
		{name: "both, suffix fails", begins: "/blobServices/", ends: ".png", subject: blob},
		{name: "no wildcards", begins: "/blobServices/*/containers", subject: blob},
		{name: "Kelvin sign folds to k", begins: "/\u212aelvin", subject: "/kelvin/1", want: true},
		{name: "non-ASCII suffix", ends: "/ÉTÉ", subject: "/saisons/été", want: true},
		{name: "non-ASCII suffix, case-sensitive", ends: "/ÉTÉ", caseSensitive: true, subject: "/saisons/été"},
		{name: "empty subject", begins: "/a", subject: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustCompile(t, filter.Spec{
				SubjectBeginsWith:      tt.begins,
				SubjectEndsWith:        tt.ends,
				IsSubjectCaseSensitive: tt.caseSensitive,
			}, schemas.EventGrid)
			ev := egEvent(`{}`)
			ev.Subject = tt.subject
			if got := f.Match(ev); got != tt.want {
				t.Errorf("begins %q ends %q (case-sensitive %v), subject %q: Match = %v, want %v",
					tt.begins, tt.ends, tt.caseSensitive, tt.subject, got, tt.want)
			}
		})
	}
}

// TestKindsAreANDed checks that every kind of condition must pass, and that values inside one
// filter are ORed (SPEC.md §3).
func TestKindsAreANDed(t *testing.T) {
	f := mustCompile(t, spec(t, `{
		"includedEventTypes": ["Orders.Created"],
		"subjectBeginsWith": "/orders/",
		"advancedFilters": [
			{"operatorType": "NumberIn", "key": "data.n", "values": [1, 2]},
			{"operatorType": "StringIn", "key": "data.s", "values": ["a", "b"]}
		]}`), schemas.EventGrid)
	tests := []struct {
		name    string
		typ     string
		subject string
		data    string
		want    bool
	}{
		{name: "all pass", typ: "Orders.Created", subject: "/orders/1", data: `{"n":2,"s":"a"}`, want: true},
		{name: "other values of each filter", typ: "Orders.Created", subject: "/orders/1", data: `{"n":1,"s":"B"}`, want: true},
		{name: "type fails", typ: "Orders.Deleted", subject: "/orders/1", data: `{"n":2,"s":"a"}`},
		{name: "subject fails", typ: "Orders.Created", subject: "/users/1", data: `{"n":2,"s":"a"}`},
		{name: "first advanced fails", typ: "Orders.Created", subject: "/orders/1", data: `{"n":3,"s":"a"}`},
		{name: "second advanced fails", typ: "Orders.Created", subject: "/orders/1", data: `{"n":1,"s":"c"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := egEvent(tt.data)
			ev.Type, ev.Subject = tt.typ, tt.subject
			if got := f.Match(ev); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

// keyCase is one advanced filter tested against one event.
type keyCase struct {
	name   string
	filter string // the advanced filter as ARM JSON
	want   bool
}

func runKeyCases(t *testing.T, schema schemas.Schema, ev *schemas.Event, cases []keyCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := mustCompile(t, filter.Spec{AdvancedFilters: []filter.AdvancedFilter{advanced(t, c.filter)}}, schema)
			if got := f.Match(ev); got != c.want {
				t.Errorf("%s on %s: Match = %v, want %v", c.filter, ev.Raw, got, c.want)
			}
		})
	}
}

// TestEventGridKeys checks the Event Grid schema keys (eventgrid-behaviour.md §4.4): the
// envelope fields, ignoring case, and data paths.
func TestEventGridKeys(t *testing.T) {
	ev := egEvent(`{"Key1":"v1","a":{"b":{"c":3}},"list":[{"x":1}]}`)
	runKeyCases(t, schemas.EventGrid, ev, []keyCase{
		{name: "id", filter: `{"operatorType":"StringIn","key":"ID","values":["id-1"]}`, want: true},
		{name: "topic", filter: `{"operatorType":"StringEndsWith","key":"Topic","values":["/topics/orders"]}`, want: true},
		{name: "subject", filter: `{"operatorType":"StringBeginsWith","key":"subject","values":["/ORDERS/"]}`, want: true},
		{name: "eventType", filter: `{"operatorType":"StringIn","key":"EventType","values":["orders.created"]}`, want: true},
		{name: "eventType mismatch", filter: `{"operatorType":"StringIn","key":"eventtype","values":["Orders.Deleted"]}`},
		{name: "dataVersion", filter: `{"operatorType":"StringIn","key":"DataVersion","values":["1.0"]}`, want: true},
		{name: "eventTime", filter: `{"operatorType":"StringBeginsWith","key":"eventTime","values":["2024-05"]}`, want: true},
		{name: "data path, other case", filter: `{"operatorType":"StringIn","key":"Data.key1","values":["V1"]}`, want: true},
		{name: "nested path", filter: `{"operatorType":"NumberIn","key":"data.a.b.c","values":[3]}`, want: true},
		{name: "path past a scalar", filter: `{"operatorType":"IsNullOrUndefined","key":"data.a.b.c.d"}`, want: true},
		{name: "path into an array of objects is not walked", filter: `{"operatorType":"IsNullOrUndefined","key":"data.list.x"}`, want: true},
		{name: "data itself", filter: `{"operatorType":"IsNotNull","key":"data"}`, want: true},
	})
	t.Run("data that is a string", func(t *testing.T) {
		runKeyCases(t, schemas.EventGrid, egEvent(`"Hello"`), []keyCase{
			{name: "data", filter: `{"operatorType":"StringIn","key":"data","values":["hello"]}`, want: true},
		})
	})
	t.Run("empty dataVersion is present", func(t *testing.T) {
		ev := egEvent(`{}`)
		ev.DataVersion = ""
		runKeyCases(t, schemas.EventGrid, ev, []keyCase{
			{name: "IsNotNull", filter: `{"operatorType":"IsNotNull","key":"dataVersion"}`, want: true},
		})
	})
}

// TestEnvelopeKeysDoNotReadRaw checks that envelope keys come from the decoded event, so the
// raw JSON is not read (here it is not even JSON) unless a data path needs it.
func TestEnvelopeKeysDoNotReadRaw(t *testing.T) {
	ev := egEvent(`{}`)
	ev.Raw = []byte("not json")
	f := mustCompile(t, spec(t, `{"advancedFilters":[
		{"operatorType":"StringIn","key":"subject","values":["/orders/1"]},
		{"operatorType":"StringIn","key":"eventType","values":["Orders.Created"]}]}`), schemas.EventGrid)
	if !f.Match(ev) {
		t.Error("envelope filters do not match an event whose raw JSON is unreadable")
	}
}

// TestInvalidRaw checks that raw JSON that is not a valid JSON object yields no data keys
// when the fault comes before the key, and never panics. (The scan stops once it has every
// key it needs, so a fault after them goes unseen; ingress only accepts valid JSON.)
func TestInvalidRaw(t *testing.T) {
	in := mustCompile(t, spec(t, `{"advancedFilters":[{"operatorType":"NumberIn","key":"data.k","values":[5]}]}`), schemas.EventGrid)
	notIn := mustCompile(t, spec(t, `{"advancedFilters":[{"operatorType":"NumberNotIn","key":"data.k","values":[5]}]}`), schemas.EventGrid)
	for _, raw := range []string{
		``,
		`{`,
		`[{"data":{"k":5}}]`,
		`"data"`,
		`{"data":{"bad":"\x","k":5}}`,
		`{"data":{"s":"` + "\x01" + `","k":5}}`,
		`{"x":05,"data":{"k":5}}`,
		`{"x":1,,"data":{"k":5}}`,
		`{"x":[1,],"data":{"k":5}}`,
		`{"x":nul,"data":{"k":5}}`,
		`{"data":{"K":5}} trailing`, // found only ignoring case, so the scan reads on to the fault
	} {
		ev := egEvent(`{}`)
		ev.Raw = []byte(raw)
		if in.Match(ev) {
			t.Errorf("NumberIn matches invalid raw %q", raw)
		}
		if !notIn.Match(ev) {
			t.Errorf("NumberNotIn does not match invalid raw %q, whose keys should all be missing", raw)
		}
	}
}

// TestDataPaths checks how data paths find values in JSON: exact names win over
// case-insensitive ones, the last of a repeated name wins as in receivers' decoders, escapes
// are decoded, and one event can feed
// several filters on related paths.
func TestDataPaths(t *testing.T) {
	tests := []struct {
		name   string
		data   string
		filter string
		want   bool
	}{
		{name: "exact name preferred", data: `{"Key":1,"key":2}`, filter: `{"operatorType":"NumberIn","key":"data.key","values":[2]}`, want: true},
		{name: "exact name preferred, other order", data: `{"key":2,"Key":1}`, filter: `{"operatorType":"NumberIn","key":"data.key","values":[2]}`, want: true},
		{name: "exact upper case preferred", data: `{"Key":1,"key":2}`, filter: `{"operatorType":"NumberIn","key":"data.Key","values":[1]}`, want: true},
		{name: "later exact name beats earlier case-insensitive one", data: `{"KEY":1,"key":2}`, filter: `{"operatorType":"NumberIn","key":"data.key","values":[2]}`, want: true},
		{name: "case-insensitive fallback", data: `{"KEY":1}`, filter: `{"operatorType":"NumberIn","key":"data.key","values":[1]}`, want: true},
		{name: "last case-insensitive match wins", data: `{"KEY":1,"Key":2}`, filter: `{"operatorType":"NumberIn","key":"data.key","values":[2]}`, want: true},
		{name: "earlier case-insensitive match loses", data: `{"KEY":1,"Key":2}`, filter: `{"operatorType":"NumberIn","key":"data.key","values":[1]}`},
		{name: "last duplicate wins", data: `{"k":1,"k":2}`, filter: `{"operatorType":"NumberIn","key":"data.k","values":[2]}`, want: true},
		{name: "earlier duplicate loses", data: `{"k":1,"k":2}`, filter: `{"operatorType":"NumberIn","key":"data.k","values":[1]}`},
		{name: "receiver's amount is compared", data: `{"amount":1,"amount":1000000}`, filter: `{"operatorType":"NumberLessThan","key":"data.amount","value":100}`},
		{name: "escaped duplicate wins", data: `{"k":1,"\u006b":2}`, filter: `{"operatorType":"NumberIn","key":"data.k","values":[2]}`, want: true},
		{name: "exact name beats a later duplicate case-insensitive one", data: `{"k":1,"K":2,"K":3}`, filter: `{"operatorType":"NumberIn","key":"data.k","values":[1]}`, want: true},
		{name: "earlier duplicate object's members are gone", data: `{"o":{"k":1},"o":{"j":2}}`, filter: `{"operatorType":"IsNullOrUndefined","key":"data.o.k"}`, want: true},
		{name: "earlier duplicate object's members do not match", data: `{"o":{"k":1},"o":{"j":2}}`, filter: `{"operatorType":"NumberLessThan","key":"data.o.k","value":100}`},
		{name: "later duplicate object's members are read", data: `{"o":{"j":2},"o":{"k":1}}`, filter: `{"operatorType":"NumberIn","key":"data.o.k","values":[1]}`, want: true},
		{name: "duplicate data", data: `{"k":1},"data":{"k":2}`, filter: `{"operatorType":"NumberIn","key":"data.k","values":[2]}`, want: true},
		{name: "escaped key", data: `{"\u006b":5}`, filter: `{"operatorType":"NumberIn","key":"data.k","values":[5]}`, want: true},
		{name: "escaped string", data: `{"k":"\u0041b\"c\\"}`, filter: `{"operatorType":"StringIn","key":"data.k","values":["ab\"c\\"]}`, want: true},
		{name: "non-ASCII key ignoring case", data: `{"ÉTÉ":1}`, filter: `{"operatorType":"NumberIn","key":"data.été","values":[1]}`, want: true},
		{name: "key with a dot cannot be addressed", data: `{"a.b":1}`, filter: `{"operatorType":"IsNullOrUndefined","key":"data.a.b"}`, want: true},
		{name: "number forms", data: `{"k":-0.5E+1}`, filter: `{"operatorType":"NumberIn","key":"data.k","values":[-5]}`, want: true},
		{name: "whitespace", data: " {\n\t\"k\" :\r 5 } ", filter: `{"operatorType":"NumberIn","key":"data.k","values":[5]}`, want: true},
		{name: "deep nesting elsewhere", data: `{"deep":` + nested(5000) + `,"k":5}`, filter: `{"operatorType":"NumberIn","key":"data.k","values":[5]}`, want: true},
		{name: "nesting past the limit is invalid", data: `{"deep":` + nested(20000) + `,"k":5}`, filter: `{"operatorType":"NumberIn","key":"data.k","values":[5]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustCompile(t, filter.Spec{AdvancedFilters: []filter.AdvancedFilter{advanced(t, tt.filter)}}, schemas.EventGrid)
			if got := f.Match(egEvent(tt.data)); got != tt.want {
				t.Errorf("%s on data %.80s: Match = %v, want %v", tt.filter, tt.data, got, tt.want)
			}
		})
	}

	t.Run("related paths in one event", func(t *testing.T) {
		f := mustCompile(t, spec(t, `{"enableAdvancedFilteringOnArrays":true,"advancedFilters":[
			{"operatorType":"IsNotNull","key":"data.a"},
			{"operatorType":"NumberGreaterThan","key":"data.a.b","value":1},
			{"operatorType":"NumberLessThan","key":"data.a.b","value":10},
			{"operatorType":"StringIn","key":"data.a.tags","values":["x"]},
			{"operatorType":"StringIn","key":"subject","values":["/orders/1"]}]}`), schemas.EventGrid)
		if !f.Match(egEvent(`{"a":{"tags":["y","x"],"b":5}}`)) {
			t.Error("does not match an event that passes every filter")
		}
		if f.Match(egEvent(`{"a":{"tags":["y","x"],"b":50}}`)) {
			t.Error("matches an event with data.a.b out of range")
		}
	})
}

// nested returns n nested arrays.
func nested(n int) string {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, '[')
	}
	for range n {
		b = append(b, ']')
	}
	return string(b)
}

// ceEvent builds a CloudEvents event from its structured JSON form.
func ceEvent(t testing.TB, raw string) *schemas.Event {
	t.Helper()
	var a struct {
		ID, Type, Subject, Time, Source, SpecVersion string
	}
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		t.Fatal(err)
	}
	return &schemas.Event{ID: a.ID, Type: a.Type, Subject: a.Subject, Time: a.Time, Source: a.Source, SpecVersion: a.SpecVersion, Raw: []byte(raw)}
}

// TestCloudEventsKeys checks the CloudEvents keys (eventgrid-behaviour.md §4.4): attributes,
// extension attributes by name, and dotted paths from the top level.
func TestCloudEventsKeys(t *testing.T) {
	ev := ceEvent(t, `{"specversion":"1.0","type":"Contoso.Items.ItemReceived","source":"/contoso/items",
		"id":"ce-1","time":"2024-05-01T10:00:00Z","dataschema":"#1","datacontenttype":"application/json",
		"comexampleextension1":"value","comexampleothervalue":5,"data":{"appinfoA":"abc","appinfoB":123}}`)
	runKeyCases(t, schemas.CloudEvents, ev, []keyCase{
		{name: "id", filter: `{"operatorType":"StringIn","key":"id","values":["CE-1"]}`, want: true},
		{name: "source", filter: `{"operatorType":"StringBeginsWith","key":"Source","values":["/contoso/"]}`, want: true},
		{name: "type", filter: `{"operatorType":"StringIn","key":"type","values":["contoso.items.itemreceived"]}`, want: true},
		{name: "specversion", filter: `{"operatorType":"StringIn","key":"specversion","values":["1.0"]}`, want: true},
		{name: "time", filter: `{"operatorType":"StringBeginsWith","key":"time","values":["2024"]}`, want: true},
		{name: "subject absent", filter: `{"operatorType":"IsNullOrUndefined","key":"subject"}`, want: true},
		{name: "subject absent, StringNotIn", filter: `{"operatorType":"StringNotIn","key":"subject","values":["x"]}`, want: true},
		{name: "dataschema", filter: `{"operatorType":"StringIn","key":"dataschema","values":["#1"]}`, want: true},
		{name: "datacontenttype", filter: `{"operatorType":"StringContains","key":"datacontenttype","values":["json"]}`, want: true},
		{name: "string extension", filter: `{"operatorType":"StringIn","key":"comexampleextension1","values":["value"]}`, want: true},
		{name: "number extension", filter: `{"operatorType":"NumberIn","key":"comexampleothervalue","values":[5]}`, want: true},
		{name: "extension name ignoring case", filter: `{"operatorType":"NumberIn","key":"ComExampleOtherValue","values":[5]}`, want: true},
		{name: "absent extension", filter: `{"operatorType":"IsNullOrUndefined","key":"comexamplemissing"}`, want: true},
		{name: "data path", filter: `{"operatorType":"StringIn","key":"data.appinfoA","values":["ABC"]}`, want: true},
		{name: "data number", filter: `{"operatorType":"NumberGreaterThan","key":"data.appinfoB","value":100}`, want: true},
	})
	t.Run("subject present", func(t *testing.T) {
		ev := ceEvent(t, `{"specversion":"1.0","type":"T","source":"/s","id":"1","subject":"/orders/1"}`)
		runKeyCases(t, schemas.CloudEvents, ev, []keyCase{
			{name: "IsNotNull", filter: `{"operatorType":"IsNotNull","key":"subject"}`, want: true},
			{name: "StringIn", filter: `{"operatorType":"StringIn","key":"Subject","values":["/ORDERS/1"]}`, want: true},
		})
	})
}

// TestCustomKeys checks custom-schema keys (eventgrid-behaviour.md §2.3, §4.4): data is the
// whole published object, the envelope names are the mapped fields, and egrid's extension
// reads any other key as a top-level member of the object. A member named data or like an
// envelope field is reached only through data.
func TestCustomKeys(t *testing.T) {
	ev := &schemas.Event{
		ID: "generated", Type: "mapped.type", Subject: "/mapped", Time: "2024-05-01T12:00:00Z",
		DataVersion: "2.0", Source: "/subscriptions/s/resourceGroups/g/providers/Microsoft.EventGrid/topics/orders",
		Raw: []byte(`{"siteName":"north","subject":"raw subject","eventType":"raw.type","data":{"siteName":"inner"},"reading":{"temp":21.5,"ok":true}}`),
	}
	runKeyCases(t, schemas.Custom, ev, []keyCase{
		{name: "data path", filter: `{"operatorType":"StringIn","key":"data.siteName","values":["NORTH"]}`, want: true},
		{name: "data path, other case", filter: `{"operatorType":"StringIn","key":"Data.SiteName","values":["north"]}`, want: true},
		{name: "nested data path", filter: `{"operatorType":"NumberInRange","key":"data.reading.temp","values":[[20,22]]}`, want: true},
		{name: "data itself is the object", filter: `{"operatorType":"IsNotNull","key":"data"}`, want: true},
		{name: "a member named data is data.data", filter: `{"operatorType":"StringIn","key":"data.data.siteName","values":["inner"]}`, want: true},
		{name: "data.siteName is not the member data's", filter: `{"operatorType":"StringNotIn","key":"data.siteName","values":["inner"]}`, want: true},
		{name: "subject is the mapped subject", filter: `{"operatorType":"StringIn","key":"subject","values":["/mapped"]}`, want: true},
		{name: "subject is not the member", filter: `{"operatorType":"StringIn","key":"Subject","values":["raw subject"]}`},
		{name: "the member subject is data.subject", filter: `{"operatorType":"StringIn","key":"data.subject","values":["raw subject"]}`, want: true},
		{name: "eventType is the mapped type", filter: `{"operatorType":"StringIn","key":"EventType","values":["Mapped.Type"]}`, want: true},
		{name: "id is the generated id", filter: `{"operatorType":"StringIn","key":"id","values":["generated"]}`, want: true},
		{name: "topic", filter: `{"operatorType":"StringEndsWith","key":"topic","values":["/topics/orders"]}`, want: true},
		{name: "eventTime", filter: `{"operatorType":"StringBeginsWith","key":"eventTime","values":["2024-05"]}`, want: true},
		{name: "dataVersion", filter: `{"operatorType":"StringIn","key":"dataVersion","values":["2.0"]}`, want: true},
		// egrid's extension, kept for definitions stored before data paths read the root.
		{name: "top-level field", filter: `{"operatorType":"StringIn","key":"siteName","values":["NORTH"]}`, want: true},
		{name: "nested number", filter: `{"operatorType":"NumberInRange","key":"reading.temp","values":[[20,22]]}`, want: true},
		{name: "nested bool", filter: `{"operatorType":"BoolEquals","key":"reading.ok","value":true}`, want: true},
		{name: "envelope name with a path", filter: `{"operatorType":"IsNullOrUndefined","key":"subject.x"}`, want: true},
	})
	// One filter reading the object itself, paths below it (both ways) and the envelope: a
	// key for the whole object must not hide the paths below it, nor they it.
	t.Run("together", func(t *testing.T) {
		f := mustCompile(t, spec(t, `{"advancedFilters":[
			{"operatorType":"IsNotNull","key":"data"},
			{"operatorType":"StringIn","key":"data.siteName","values":["north"]},
			{"operatorType":"StringIn","key":"siteName","values":["north"]},
			{"operatorType":"StringIn","key":"data.data.siteName","values":["inner"]},
			{"operatorType":"StringIn","key":"subject","values":["/mapped"]},
			{"operatorType":"StringIn","key":"data.eventType","values":["raw.type"]}]}`), schemas.Custom)
		if !f.Match(ev) {
			t.Errorf("Match = false on %s, want true", ev.Raw)
		}
	})
}

// TestCustomKeysOfADecodedEvent is the case of an ARM definition copied from Azure onto a topic
// with a custom input schema: its filters read the mapped envelope and data paths, and agree
// with subjectBeginsWith, which reads the mapped subject. All but the subject filter failed
// when keys read only the published object.
func TestCustomKeysOfADecodedEvent(t *testing.T) {
	m := &schemas.InputMapping{
		Subject:   schemas.FieldMapping{SourceField: "resource"},
		EventType: schemas.FieldMapping{DefaultValue: "Created"},
	}
	events, err := schemas.DecodeCustom([]byte(`[{"resource":"/users/1","siteName":"north"}]`), m, "/topics/users",
		schemas.ClassicLimits, func() string { return "id-1" }, time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	ev := events[0]
	for _, tt := range []struct {
		name, filter string
		want         bool
	}{
		{"subjectBeginsWith", `{"subjectBeginsWith":"/users/"}`, true},
		{"subject", `{"advancedFilters":[{"operatorType":"StringBeginsWith","key":"subject","values":["/users/"]}]}`, true},
		{"eventType", `{"advancedFilters":[{"operatorType":"StringIn","key":"eventType","values":["Created"]}]}`, true},
		{"data path", `{"advancedFilters":[{"operatorType":"StringIn","key":"data.siteName","values":["north"]}]}`, true},
		{"Not operator on a data path", `{"advancedFilters":[{"operatorType":"StringNotIn","key":"data.siteName","values":["north"]}]}`, false},
		{"id", `{"advancedFilters":[{"operatorType":"StringIn","key":"id","values":["id-1"]}]}`, true},
		{"eventTime", `{"advancedFilters":[{"operatorType":"StringBeginsWith","key":"eventTime","values":["2024-05-01T12:00:00"]}]}`, true},
	} {
		if got := mustCompile(t, spec(t, tt.filter), schemas.Custom).Match(ev); got != tt.want {
			t.Errorf("%s: %s on %s (subject %q, eventType %q): Match = %v, want %v", tt.name, tt.filter, ev.Raw, ev.Subject, ev.Type, got, tt.want)
		}
	}
}

// TestMatchConcurrent checks that one Filter can be used from many goroutines at once (run
// with -race).
func TestMatchConcurrent(t *testing.T) {
	f := mustCompile(t, spec(t, `{"subjectBeginsWith":"/orders/","advancedFilters":[
		{"operatorType":"NumberGreaterThan","key":"data.n","value":10},
		{"operatorType":"StringContains","key":"data.s","values":["x"]}]}`), schemas.EventGrid)
	events := []*schemas.Event{egEvent(`{"n":11,"s":"aXb"}`), egEvent(`{"n":9,"s":"x"}`)}
	want := []bool{true, false}
	var wg sync.WaitGroup
	errs := make(chan string, 8*1000)
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				k := (g + i) % len(events)
				if f.Match(events[k]) != want[k] {
					errs <- string(events[k].Raw)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("concurrent Match gave the wrong answer for %s", e)
	}
}

// TestNilEventMatchesNothing: a nil event (which no store should hand out) is refused by
// every compiled filter rather than dereferenced.
func TestNilEventMatchesNothing(t *testing.T) {
	for _, spec := range []filter.Spec{{}, {IncludedEventTypes: []string{"Orders.Created"}}, {SubjectBeginsWith: "/a", IsSubjectCaseSensitive: true}} {
		if mustCompile(t, spec, schemas.EventGrid).Match(nil) {
			t.Errorf("filter %+v matched a nil event", spec)
		}
	}
}
