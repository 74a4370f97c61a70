package schemas_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

func TestDecodeCloudEventsAccepts(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantRaw []string
		want    []schemas.Event // Raw is checked through wantRaw
	}{
		{
			name:    "single structured event",
			body:    ceEvent(),
			wantRaw: []string{ceEvent()},
			want:    []schemas.Event{{ID: "c1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"}},
		},
		{
			name:    "batch of one",
			body:    " \n" + array(ceEvent()),
			wantRaw: []string{ceEvent()},
			want:    []schemas.Event{{ID: "c1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"}},
		},
		{
			name: "every optional attribute and extensions are kept as published, but for a null one",
			body: array(
				ceEvent(`time="2024-05-01T12:00:00Z"`, `subject="/o/1"`, `datacontenttype="application/json"`, `dataschema="https://schemas.example/o"`, `data={"n":1}`, `traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"`, `comexampleext1="v"`, `n2=42`, `flag=true`, `nothing=null`),
				ceEvent(`id="c2"`, `data_base64="AAEC"`, `datacontenttype="application/octet-stream"`),
			),
			wantRaw: []string{
				ceEvent(`time="2024-05-01T12:00:00Z"`, `subject="/o/1"`, `datacontenttype="application/json"`, `dataschema="https://schemas.example/o"`, `data={"n":1}`, `traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"`, `comexampleext1="v"`, `n2=42`, `flag=true`),
				ceEvent(`id="c2"`, `data_base64="AAEC"`, `datacontenttype="application/octet-stream"`),
			},
			want: []schemas.Event{
				{ID: "c1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0", Time: "2024-05-01T12:00:00Z", Subject: "/o/1", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
				{ID: "c2", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"},
			},
		},
		{
			name:    "whitespace outside strings is compacted",
			body:    "{ \"specversion\" : \"1.0\",\n \"id\": \"c 1\", \"source\": \"/o\", \"type\": \"T\", \"data\": [ 1, \"a b\" ] }",
			wantRaw: []string{`{"specversion":"1.0","id":"c 1","source":"/o","type":"T","data":[1,"a b"]}`},
			want:    []schemas.Event{{ID: "c 1", Source: "/o", Type: "T", SpecVersion: "1.0"}},
		},
		{
			// The CloudEvents JSON format treats a null attribute as absent: it is left out of
			// the event as stored and delivered. A null data is the event's data, and kept.
			name:    "optional attributes sent as null count as absent and are left out",
			body:    ceEvent(`time=null`, `subject=null`, `data=null`),
			wantRaw: []string{ceEvent(`data=null`)},
			want:    []schemas.Event{{ID: "c1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"}},
		},
		{
			name:    "null extensions are left out wherever they stand, whitespace or not",
			body:    "{ \"myext\" : null, \"specversion\":\"1.0\",\"id\":\"c1\",\"other\":null,\"source\":\"/o\",\"type\":\"T\",\"traceparent\":null,\"last\":null}",
			wantRaw: []string{`{"specversion":"1.0","id":"c1","source":"/o","type":"T"}`},
			want:    []schemas.Event{{ID: "c1", Source: "/o", Type: "T", SpecVersion: "1.0"}},
		},
		{
			name:    "a null extension beside a time delivered in another form",
			body:    `{"specversion":"1.0","id":"c1","myext":null,"source":"/o","type":"T","time":"2024-05-01t12:00:00z"}`,
			wantRaw: []string{`{"specversion":"1.0","id":"c1","source":"/o","type":"T","time":"2024-05-01T12:00:00Z"}`},
			want:    []schemas.Event{{ID: "c1", Source: "/o", Type: "T", SpecVersion: "1.0", Time: "2024-05-01T12:00:00Z"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, err := schemas.DecodeCloudEvents([]byte(tt.body), schemas.NamespaceLimits)
			if err != nil {
				t.Fatalf("DecodeCloudEvents: %v", err)
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

func TestDecodeCloudEventsRejects(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []wantProblem
	}{
		{"missing id", ceEvent(`-id`), []wantProblem{{0, "id", "is required"}}},
		{"missing source", ceEvent(`-source`), []wantProblem{{0, "source", "is required"}}},
		{"missing type", ceEvent(`-type`), []wantProblem{{0, "type", "is required"}}},
		{"missing specversion", ceEvent(`-specversion`), []wantProblem{{0, "specversion", "is required"}}},
		{"required attribute sent as null", ceEvent(`source=null`), []wantProblem{{0, "source", "is required"}}},
		{"empty id", ceEvent(`id=""`), []wantProblem{{0, "id", "must not be empty"}}},
		{"empty type", ceEvent(`type=""`), []wantProblem{{0, "type", "must not be empty"}}},
		{"empty subject", ceEvent(`subject=""`), []wantProblem{{0, "subject", "must not be empty"}}},
		{"id is a number", ceEvent(`id=1`), []wantProblem{{0, "id", "must be a string, got number"}}},
		{"specversion is a number", ceEvent(`specversion=1.0`), []wantProblem{{0, "specversion", "must be a string, got number"}}},
		{"specversion 0.3", ceEvent(`specversion="0.3"`), []wantProblem{{0, "specversion", `is "0.3", but only CloudEvents "1.0" is supported`}}},
		{"time is not RFC 3339", ceEvent(`time="May 1st"`), []wantProblem{{0, "time", "not an RFC 3339 date-time"}}},
		{"datacontenttype is an object", ceEvent(`datacontenttype={}`), []wantProblem{{0, "datacontenttype", "got object"}}},
		{"both data and data_base64", ceEvent(`data={}`, `data_base64="AA=="`), []wantProblem{{0, "data_base64", "cannot be sent together with data"}}},
		{"data_base64 is not base64", ceEvent(`data_base64="!!"`), []wantProblem{{0, "data_base64", "is not valid base64"}}},
		{"data_base64 is a number", ceEvent(`data_base64=12`), []wantProblem{{0, "data_base64", "must be a base64 string, got number"}}},
		{"extension name with upper case", ceEvent(`BadExt="x"`), []wantProblem{{0, "BadExt", "extension attribute names are 1 to 20 lower-case letters and digits"}}},
		{"extension name with a dash", ceEvent(`my-ext="x"`), []wantProblem{{0, "my-ext", "is not a valid attribute name"}}},
		{"extension name of 21 characters", ceEvent(`abcdefghijklmnopqrstu="x"`), []wantProblem{{0, "abcdefghijklmnopqrstu", "is not a valid attribute name"}}},
		{"extension value is an object", ceEvent(`ext={"a":1}`), []wantProblem{{0, "ext", "must be a string, number or boolean, got object"}}},
		{"traceparent is an array", ceEvent(`traceparent=[]`), []wantProblem{{0, "traceparent", "got array"}}},
		{"attribute sent twice", `{"specversion":"1.0","id":"a","source":"s","type":"t","id":"b"}`, []wantProblem{{0, "id", "appears more than once"}}},
		{"extension sent twice", `{"specversion":"1.0","id":"a","source":"s","type":"t","ext":1,"ext":2}`, []wantProblem{{0, "ext", "appears more than once"}}},
		{"problems in a batch carry their index", array(ceEvent(), ceEvent(`-id`), `7`), []wantProblem{{1, "id", "is required"}, {2, "", "must be a JSON object, got number"}}},
		{"empty array", `[]`, []wantProblem{{-1, "", "empty JSON array"}}},
		{"body is a string", `"x"`, []wantProblem{{-1, "", "body is a JSON string, but a CloudEvents publish must be a CloudEvent object or a JSON array of them"}}},
		{"body is empty", ``, []wantProblem{{-1, "", "body is empty"}}},
		{"malformed single event", `{"id":`, []wantProblem{{-1, "", "body is not valid JSON: unexpected end of input, expected a value at offset 6"}}},
		{"single event followed by more", ceEvent() + `{}`, []wantProblem{{-1, "", "after the top-level value"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, err := schemas.DecodeCloudEvents([]byte(tt.body), schemas.NamespaceLimits)
			if events != nil {
				t.Errorf("got %d events with an error, want none", len(events))
			}
			checkProblems(t, err, tt.want)
		})
	}
}

func TestDecodeCloudEventsLimits(t *testing.T) {
	sized := func(n int) string {
		e := ceEvent(`data=""`)
		return ceEvent(`data="` + strings.Repeat("x", n-len(e)) + `"`)
	}
	events := func(n int) string {
		es := make([]string, n)
		for i := range es {
			es[i] = ceEvent()
		}
		return array(es...)
	}
	roomy := schemas.Limits{MaxEventBytes: 1 << 20, MaxRequestBytes: 4 << 20, MaxEvents: 1000}
	tests := []struct {
		name         string
		body         string
		lim          schemas.Limits
		wantEvents   int
		wantTooLarge *schemas.TooLargeError
		wantTooMany  *schemas.TooManyEventsError
	}{
		{name: "single event of exactly 1 MB", body: sized(1 << 20), lim: schemas.NamespaceLimits, wantEvents: 1},
		{name: "single event of 1 MB + 1 byte", body: sized(1<<20 + 1), lim: roomy, wantTooLarge: &schemas.TooLargeError{Index: 0, Size: 1<<20 + 1, Limit: 1 << 20}},
		{name: "batched event of 1 MB + 1 byte", body: array(ceEvent(), ceEvent(), sized(1<<20+1)), lim: roomy, wantTooLarge: &schemas.TooLargeError{Index: 2, Size: 1<<20 + 1, Limit: 1 << 20}},
		{name: "request over 1 MB", body: array(sized(1<<20), ceEvent()), lim: schemas.NamespaceLimits, wantTooLarge: &schemas.TooLargeError{Index: -1, Size: len(array(sized(1<<20), ceEvent())), Limit: 1 << 20}},
		{name: "1000 events", body: events(1000), lim: schemas.NamespaceLimits, wantEvents: 1000},
		{name: "1001 events", body: events(1001), lim: schemas.NamespaceLimits, wantTooMany: &schemas.TooManyEventsError{Count: 1001, Limit: 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schemas.DecodeCloudEvents([]byte(tt.body), tt.lim)
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
				t.Fatalf("DecodeCloudEvents: %v", err)
			case len(got) != tt.wantEvents:
				t.Fatalf("got %d events, want %d", len(got), tt.wantEvents)
			}
		})
	}
}

func TestDecodeCloudEventBinary(t *testing.T) {
	attrs := func(changes ...string) map[string]string {
		m := map[string]string{"specversion": "1.0", "id": "b1", "source": "/orders", "type": "Orders.Created"}
		for _, c := range changes {
			if name, ok := strings.CutPrefix(c, "-"); ok {
				delete(m, name)
				continue
			}
			k, v, _ := strings.Cut(c, "=")
			m[k] = v
		}
		return m
	}
	const head = `{"specversion":"1.0","id":"b1","source":"/orders","type":"Orders.Created"`
	tests := []struct {
		name        string
		attrs       map[string]string
		contentType string
		data        string
		wantRaw     string
		want        schemas.Event // Raw is checked through wantRaw
		wantErrs    []wantProblem
	}{
		{
			name:        "JSON data becomes data, compacted",
			attrs:       attrs(),
			contentType: "application/json; charset=utf-8",
			data:        "{ \"n\": [1, 2] }\n",
			wantRaw:     head + `,"datacontenttype":"application/json; charset=utf-8","data":{"n":[1,2]}}`,
			want:        schemas.Event{ID: "b1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"},
		},
		{
			name:        "+json media type is JSON",
			attrs:       attrs(),
			contentType: "application/vnd.orders+json",
			data:        `"just a string"`,
			wantRaw:     head + `,"datacontenttype":"application/vnd.orders+json","data":"just a string"}`,
			want:        schemas.Event{ID: "b1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"},
		},
		{
			name:        "text/json is JSON",
			attrs:       attrs(),
			contentType: "text/json",
			data:        `42`,
			wantRaw:     head + `,"datacontenttype":"text/json","data":42}`,
			want:        schemas.Event{ID: "b1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"},
		},
		{
			name:        "text data becomes a JSON string",
			attrs:       attrs(),
			contentType: "text/plain",
			data:        "line \"one\"\n",
			wantRaw:     head + `,"datacontenttype":"text/plain","data":"line \"one\"\n"}`,
			want:        schemas.Event{ID: "b1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"},
		},
		{
			name:        "text in another charset becomes data_base64",
			attrs:       attrs(),
			contentType: "text/plain; charset=iso-8859-1",
			data:        "caf\xe9",
			wantRaw:     head + `,"datacontenttype":"text/plain; charset=iso-8859-1","data_base64":"Y2Fm6Q=="}`,
			want:        schemas.Event{ID: "b1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"},
		},
		{
			name:        "text that is not UTF-8 becomes data_base64",
			attrs:       attrs(),
			contentType: "text/plain",
			data:        "caf\xe9",
			wantRaw:     head + `,"datacontenttype":"text/plain","data_base64":"Y2Fm6Q=="}`,
			want:        schemas.Event{ID: "b1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"},
		},
		{
			name:        "text longer as a JSON string than in base64 becomes data_base64",
			attrs:       attrs(),
			contentType: "text/plain",
			data:        "\x01\x02\x03",
			wantRaw:     head + `,"datacontenttype":"text/plain","data_base64":"AQID"}`,
			want:        schemas.Event{ID: "b1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"},
		},
		{
			name:        "binary data becomes data_base64",
			attrs:       attrs(),
			contentType: "application/protobuf",
			data:        "\x00\x01\x02",
			wantRaw:     head + `,"datacontenttype":"application/protobuf","data_base64":"AAEC"}`,
			want:        schemas.Event{ID: "b1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"},
		},
		{
			name:    "no Content-Type and no body: no datacontenttype, no data",
			attrs:   attrs(),
			wantRaw: head + `}`,
			want:    schemas.Event{ID: "b1", Source: "/orders", Type: "Orders.Created", SpecVersion: "1.0"},
		},
		{
			name:    "attributes in fixed order, extensions by name, values percent-decoded",
			attrs:   attrs(`source=/orders%2Fa%2520b`, `subject=100%`, `time=2024-05-01T12:00:00Z`, `zext=z`, `aext=caf%C3%A9`, `traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01`, `dataschema=https://s.example/o`),
			wantRaw: `{"specversion":"1.0","id":"b1","source":"/orders/a%20b","type":"Orders.Created","time":"2024-05-01T12:00:00Z","subject":"100%","dataschema":"https://s.example/o","aext":"café","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","zext":"z"}`,
			want:    schemas.Event{ID: "b1", Source: "/orders/a%20b", Type: "Orders.Created", SpecVersion: "1.0", Subject: "100%", Time: "2024-05-01T12:00:00Z", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		},
		{
			name:        "ce-datacontenttype is refused",
			attrs:       attrs(`datacontenttype=application/json`),
			contentType: "application/json",
			data:        `{}`,
			wantErrs:    []wantProblem{{0, "datacontenttype", "must not be sent as a ce-datacontenttype header"}},
		},
		{
			name:     "values that are not UTF-8 once percent-decoded are refused, not replaced",
			attrs:    attrs(`source=/caf%E9`, "subject=caf\xe9", `aext=%C3%A9%FF`),
			wantErrs: []wantProblem{{0, "aext", "not UTF-8"}, {0, "source", "not UTF-8"}, {0, "subject", "not UTF-8"}},
		},
		{
			name:     "missing attributes name their header",
			attrs:    attrs(`-id`, `-type`),
			wantErrs: []wantProblem{{0, "id", "send it as the ce-id header"}, {0, "type", "send it as the ce-type header"}},
		},
		{
			name:     "every problem is reported at once",
			attrs:    attrs(`datacontenttype=text/plain`, `-id`, `Bad=1`),
			wantErrs: []wantProblem{{0, "Bad", "is not a valid attribute name"}, {0, "datacontenttype", "must not be sent"}, {0, "id", "send it as the ce-id header"}},
		},
		{
			name:     "bad specversion",
			attrs:    attrs(`specversion=0.3`),
			wantErrs: []wantProblem{{0, "specversion", `only CloudEvents "1.0"`}},
		},
		{
			name:     "bad time",
			attrs:    attrs(`time=now`),
			wantErrs: []wantProblem{{0, "time", "not an RFC 3339 date-time"}},
		},
		{
			name:     "bad extension name",
			attrs:    attrs(`my-ext=x`),
			wantErrs: []wantProblem{{0, "my-ext", "is not a valid attribute name"}},
		},
		{
			name:     "data is not an attribute",
			attrs:    attrs(`data=x`),
			wantErrs: []wantProblem{{0, "data", "is not a context attribute"}},
		},
		{
			name:        "JSON media type with data that is not JSON",
			attrs:       attrs(),
			contentType: "application/json",
			data:        `{"n":`,
			wantErrs:    []wantProblem{{0, "data", `is not valid JSON, but the Content-Type "application/json" says it is`}},
		},
		{
			name:        "malformed Content-Type",
			attrs:       attrs(),
			contentType: "application/json; charset",
			data:        `{}`,
			wantErrs:    []wantProblem{{0, "data", "is not a valid media type"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := schemas.DecodeCloudEventBinary(tt.attrs, tt.contentType, []byte(tt.data), schemas.NamespaceLimits)
			if tt.wantErrs != nil {
				if e != nil {
					t.Errorf("got an event with an error")
				}
				checkProblems(t, err, tt.wantErrs)
				return
			}
			if err != nil {
				t.Fatalf("DecodeCloudEventBinary: %v", err)
			}
			if string(e.Raw) != tt.wantRaw {
				t.Errorf("Raw:\n got %s\nwant %s", e.Raw, tt.wantRaw)
			}
			got := *e
			got.Raw = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("event = %+v, want %+v", got, tt.want)
			}
			// The structured form must itself be a valid structured-mode event.
			again, err := schemas.DecodeCloudEvents(e.Raw, schemas.NamespaceLimits)
			if err != nil || string(again[0].Raw) != string(e.Raw) {
				t.Errorf("structured form does not decode to itself: %v", err)
			}
		})
	}
}

func TestDecodeCloudEventBinaryLimits(t *testing.T) {
	attrs := map[string]string{"specversion": "1.0", "id": "b1", "source": "/orders", "type": "T"}
	tests := []struct {
		name string
		data int
		lim  schemas.Limits
		want schemas.TooLargeError
	}{
		{"body over the request limit", 1<<20 + 1, schemas.NamespaceLimits, schemas.TooLargeError{Index: -1, Size: 1<<20 + 1, Limit: 1 << 20}},
		{"body and attributes over the event limit", 1 << 20, schemas.Limits{MaxEventBytes: 1 << 20, MaxRequestBytes: 2 << 20}, schemas.TooLargeError{Index: 0, Size: 1<<20 + len("1.0b1/ordersT"), Limit: 1 << 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := schemas.DecodeCloudEventBinary(attrs, "application/octet-stream", make([]byte, tt.data), tt.lim)
			var tooLarge *schemas.TooLargeError
			if !errors.As(err, &tooLarge) || *tooLarge != tt.want {
				t.Fatalf("got %v, want %+v", err, tt.want)
			}
		})
	}
}

// TestDecodeCloudEventBinaryTextIsNotBlownUp: text data is carried as a JSON string only when
// that is at most twice its length, so the stored and delivered event of a binary-mode
// publish is never more than twice its body. As a JSON string, 1 MB of control characters
// (valid UTF-8 text) would become 6 MB, each escaped as \u00XX: over what a store takes for
// one event (the JetStream store's max_payload) and six times the memory. Text whose quotes
// and backslashes double it (quoted CSV fields) stays a string.
func TestDecodeCloudEventBinaryTextIsNotBlownUp(t *testing.T) {
	csv := []byte(`"a","b","c"` + "\n")
	ev, err := schemas.DecodeCloudEventBinary(map[string]string{"specversion": "1.0", "id": "c1", "source": "/orders", "type": "T"}, "text/csv", csv, schemas.NamespaceLimits)
	if err != nil {
		t.Fatal(err)
	}
	var text struct {
		Data *string `json:"data"`
	}
	if err := json.Unmarshal(ev.Raw, &text); err != nil || text.Data == nil || *text.Data != string(csv) {
		t.Fatalf("quoted CSV text: %s (%v); want it as the data string", ev.Raw, err)
	}

	attrs := map[string]string{"specversion": "1.0", "id": "b1", "source": "/orders", "type": "T"}
	data := bytes.Repeat([]byte{0x01, '"', '\\'}, (1<<20-1024)/3)
	ev, err = schemas.DecodeCloudEventBinary(attrs, "text/plain; charset=utf-8", data, schemas.NamespaceLimits)
	if err != nil {
		t.Fatal(err)
	}
	if max := base64.StdEncoding.EncodedLen(len(data)) + 256; len(ev.Raw) > max {
		t.Fatalf("the structured event is %d bytes for %d bytes of data, want at most %d (its base64 form and the attributes)", len(ev.Raw), len(data), max)
	}
	var got struct {
		DataBase64 []byte `json:"data_base64"`
	}
	if err := json.Unmarshal(ev.Raw, &got); err != nil || !bytes.Equal(got.DataBase64, data) {
		t.Fatalf("data_base64 does not hold the data (%v)", err)
	}
}

// TestDecodeCloudEventsManyExtensions: an event of 1 MB holds up to about 100 000 extension
// attributes. Each must be checked against those before it for a name sent twice; comparing
// it with every earlier one took 12 s of CPU for such an event (5·10⁹ comparisons), so one
// publisher could keep the server's cores busy. Duplicates are still found wherever they are.
func TestDecodeCloudEventsManyExtensions(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"specversion":"1.0","id":"a","source":"s","type":"t"`)
	n := 0
	for ; b.Len() < 1<<20-64; n++ {
		fmt.Fprintf(&b, `,"x%x":0`, n)
	}
	ok := b.String() + "}"
	evs, err := schemas.DecodeCloudEvents([]byte(ok), schemas.NamespaceLimits)
	if err != nil || len(evs) != 1 {
		t.Fatalf("an event with %d distinct extension attributes: %v", n, err)
	}
	dup := b.String() + `,"x7":1,"x` + fmt.Sprintf("%x", n-1) + `":2}`
	_, err = schemas.DecodeCloudEvents([]byte(dup), schemas.Limits{MaxEventBytes: 2 << 20, MaxRequestBytes: 2 << 20})
	checkProblems(t, err, []wantProblem{{0, "x7", "appears more than once"}, {0, fmt.Sprintf("x%x", n-1), "appears more than once"}})
}
