package schemas_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// objectOrArrayDecoders are the decoders that take one event object as well as an array, for
// the input schemas whose publish API takes only arrays; each with a valid event whose JSON
// is exactly n bytes long (n >= 200).
var objectOrArrayDecoders = []struct {
	name   string
	decode func(body []byte, lim schemas.Limits) ([]*schemas.Event, error)
	sized  func(n int) string
}{
	{
		name: "EventGrid",
		decode: func(body []byte, lim schemas.Limits) ([]*schemas.Event, error) {
			return schemas.DecodeEventGridObjectOrArray(body, topicID, lim)
		},
		sized: func(n int) string {
			e := egEvent(`data=""`)
			return egEvent(`data="` + strings.Repeat("x", n-len(e)) + `"`)
		},
	},
	{
		name: "Custom",
		decode: func(body []byte, lim schemas.Limits) ([]*schemas.Event, error) {
			m := &schemas.InputMapping{ID: schemas.FieldMapping{SourceField: "id"}, EventType: schemas.FieldMapping{DefaultValue: "T"}}
			return schemas.DecodeCustomObjectOrArray(body, m, topicID, lim, ids(), customNow)
		},
		sized: func(n int) string {
			e := `{"id":"e1","pad":""}`
			return `{"id":"e1","pad":"` + strings.Repeat("x", n-len(e)) + `"}`
		},
	},
}

// A message a source reads may hold one event object: it is decoded as that event, measured
// as itself, and must be the whole message.
func TestDecodeObjectOrArray(t *testing.T) {
	for _, d := range objectOrArrayDecoders {
		t.Run(d.name, func(t *testing.T) {
			ev := d.sized(200)
			tight := schemas.Limits{MaxEventBytes: 300, MaxRequestBytes: 400}
			tests := []struct {
				name       string
				body       string
				lim        schemas.Limits
				wantEvents int
				wantErr    error  // compared with reflect.DeepEqual
				wantReason string // a request-level ValidationError's reason contains it
			}{
				{name: "one object", body: ev, lim: schemas.ClassicLimits, wantEvents: 1},
				{name: "one object among white space", body: " \n" + ev + "\r\n\t", lim: schemas.ClassicLimits, wantEvents: 1},
				{name: "an array", body: array(ev, ev), lim: schemas.ClassicLimits, wantEvents: 2},
				{name: "an object of exactly the request limit", body: d.sized(1 << 20), lim: schemas.ClassicLimits, wantEvents: 1},
				{name: "an object over the request limit", body: d.sized(1<<20 + 1), lim: schemas.ClassicLimits, wantErr: &schemas.TooLargeError{Index: -1, Size: 1<<20 + 1, Limit: 1 << 20}},
				{name: "an object over the event limit", body: " " + d.sized(301), lim: tight, wantErr: &schemas.TooLargeError{Index: 0, Size: 301, Limit: 300}},
				{name: "two objects separated by a comma", body: ev + "," + ev, lim: schemas.ClassicLimits, wantReason: "body is not valid JSON: unexpected ',' after the top-level value at offset 200"},
				{name: "an object followed by anything", body: ev + " x", lim: schemas.ClassicLimits, wantReason: "body is not valid JSON: unexpected 'x' after the top-level value"},
				{name: "an unfinished object", body: ev[:100], lim: schemas.ClassicLimits, wantReason: "body is not valid JSON"},
				{name: "a number", body: "42", lim: schemas.ClassicLimits, wantReason: "schema message must be an event object or a JSON array of"},
				{name: "nothing", body: " ", lim: schemas.ClassicLimits, wantReason: "body is empty"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					got, err := d.decode([]byte(tt.body), tt.lim)
					switch {
					case tt.wantErr != nil:
						if !reflect.DeepEqual(err, tt.wantErr) {
							t.Fatalf("got %v, want %v", err, tt.wantErr)
						}
					case tt.wantReason != "":
						var ve *schemas.ValidationError
						if !errors.As(err, &ve) || ve.Index != -1 || !strings.Contains(ve.Reason, tt.wantReason) {
							t.Fatalf("got %v, want a request-level error saying %q", err, tt.wantReason)
						}
					case err != nil:
						t.Fatal(err)
					case len(got) != tt.wantEvents:
						t.Fatalf("got %d events, want %d", len(got), tt.wantEvents)
					}
					if err != nil && got != nil {
						t.Fatal("events returned with an error")
					}
				})
			}
		})
	}
}

// The publish API of the Event Grid and custom schemas stays array-only, as Azure's is: a
// single object is refused with the advice to wrap it.
func TestDecodePublishStaysArrayOnly(t *testing.T) {
	m := &schemas.InputMapping{EventType: schemas.FieldMapping{DefaultValue: "T"}}
	for name, decode := range map[string]func([]byte) ([]*schemas.Event, error){
		"EventGrid": func(b []byte) ([]*schemas.Event, error) {
			return schemas.DecodeEventGrid(b, topicID, schemas.ClassicLimits)
		},
		"Custom": func(b []byte) ([]*schemas.Event, error) {
			return schemas.DecodeCustom(b, m, topicID, schemas.ClassicLimits, ids(), customNow)
		},
	} {
		_, err := decode([]byte(egEvent()))
		if err == nil || !strings.Contains(err.Error(), "wrap a single event in [ ]") {
			t.Errorf("%s: a single object gave %v; want it refused with the advice to wrap it", name, err)
		}
	}
}

// A message holding one object decodes as the publish of that object in an array would, and
// is refused whenever that publish would be; an array decodes exactly as a publish.
func FuzzDecodeEventGridObjectOrArray(f *testing.F) {
	f.Add([]byte(egEvent()))
	f.Add([]byte(egEvent() + "," + egEvent()))
	f.Add([]byte(" " + egEvent(`eventType=1`) + " "))
	f.Add([]byte(array(egEvent())))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := schemas.DecodeEventGridObjectOrArray(body, topicID, schemas.Limits{})
		if err != nil {
			if got != nil {
				t.Fatal("events returned with an error")
			}
			checkDecodeError(t, err)
		}
		if strings.HasPrefix(strings.TrimLeft(string(body), " \t\r\n"), "{") {
			wrapped, werr := schemas.DecodeEventGrid([]byte("["+string(body)+"]"), topicID, schemas.Limits{})
			if err == nil && werr != nil {
				t.Fatalf("accepted %q, whose publish in [ ] is refused: %v", body, werr)
			}
			if err == nil && (len(got) != 1 || len(wrapped) != 1 || string(got[0].Raw) != string(wrapped[0].Raw)) {
				t.Fatalf("%q decodes to %d events, its publish in [ ] to %d", body, len(got), len(wrapped))
			}
			if err == nil && !json.Valid(body) {
				t.Fatalf("accepted invalid JSON %q", body)
			}
			return
		}
		want, werr := schemas.DecodeEventGrid(body, topicID, schemas.Limits{})
		if (err == nil) != (werr == nil) || len(got) != len(want) {
			t.Fatalf("%q: got %d events, %v; its publish gives %d events, %v", body, len(got), err, len(want), werr)
		}
	})
}
