package sinks_test

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/sinks"
)

const secret = "s3cr3t-value-never-shown"

func TestHeaderMappingsValidate(t *testing.T) {
	eleven := make(sinks.HeaderMappings, 11)
	for i := range eleven {
		eleven[i] = sinks.HeaderMapping{Name: fmt.Sprintf("X-H%d", i), Value: "v"}
	}
	tests := []struct {
		name     string
		mappings sinks.HeaderMappings
		problems []string // substrings, one per expected problem, in order
	}{
		{name: "none"},
		{name: "static and dynamic", mappings: sinks.HeaderMappings{{Name: "Authorization", Value: "Bearer " + secret}, {Name: "X-Tenant", SourceField: "data.tenant"}}},
		{name: "exactly 4096 bytes", mappings: sinks.HeaderMappings{{Name: "X-Big", Value: strings.Repeat("a", sinks.MaxHeaderValueBytes)}}},
		{name: "too many", mappings: eleven, problems: []string{"11 headers; at most 10"}},
		{name: "aeg- prefix in any case", mappings: sinks.HeaderMappings{{Name: "AEG-Custom", Value: secret}}, problems: []string{`[0] "AEG-Custom": names starting with "aeg-" are reserved`}},
		{name: "protocol header", mappings: sinks.HeaderMappings{{Name: "content-type", Value: "text/plain"}}, problems: []string{"sets this header itself"}},
		{name: "not a token", mappings: sinks.HeaderMappings{{Name: "X Bad", Value: secret}}, problems: []string{"not a valid HTTP header name"}},
		{name: "empty name", mappings: sinks.HeaderMappings{{Value: secret}}, problems: []string{"[0]: the header name is empty"}},
		{name: "repeated ignoring case", mappings: sinks.HeaderMappings{{Name: "X-A", Value: "1"}, {Name: "x-a", SourceField: "id"}}, problems: []string{`[1] "x-a": the header is mapped more than once`}},
		{name: "value too long", mappings: sinks.HeaderMappings{{Name: "X-Big", Value: strings.Repeat("a", sinks.MaxHeaderValueBytes+1)}}, problems: []string{"4097 bytes; at most 4096"}},
		{name: "empty static value", mappings: sinks.HeaderMappings{{Name: "X-A"}}, problems: []string{"the static value is empty"}},
		{name: "line break in value", mappings: sinks.HeaderMappings{{Name: "X-A", Value: secret + "\r\nX-Injected: 1"}}, problems: []string{"control characters"}},
		{name: "bad path", mappings: sinks.HeaderMappings{{Name: "X-A", SourceField: "data..key"}}, problems: []string{"empty segment"}},
		{name: "every problem at once", mappings: append(eleven[:10:10], sinks.HeaderMapping{Name: "aeg-x", Value: secret}, sinks.HeaderMapping{Name: "X-Y", SourceField: ".x"}),
			problems: []string{"12 headers", `[10] "aeg-x"`, `[11] "X-Y": sourceField ".x"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.mappings.Validate()
			var got []string
			if err != nil {
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					var he *sinks.HeaderMappingError
					if !errors.As(e, &he) {
						t.Errorf("problem %v is a %T, want *sinks.HeaderMappingError", e, e)
					}
					got = append(got, e.Error())
				}
			}
			if len(got) != len(tt.problems) {
				t.Fatalf("Validate() = %q; want %d problems %q", got, len(tt.problems), tt.problems)
			}
			for i, want := range tt.problems {
				if !strings.Contains(got[i], want) {
					t.Errorf("problem %d = %q; want it to mention %q", i, got[i], want)
				}
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("Validate() = %q shows a static value", err)
			}
		})
	}
}

func TestHeaderMappingsResolve(t *testing.T) {
	ev := &schemas.Event{ID: "1", Raw: []byte(`{"id":"1","subject":"/orders/7","Data":{"tenant":"contoso","n":42.50,"ok":true,"off":false,` +
		`"nil":null,"obj":{"a":1},"arr":[1],"deep":{"er":{"x":"y"}},"quote":"a \"b\" \u00e9","big":"` + strings.Repeat("x", sinks.MaxHeaderValueBytes+1) + `"},` +
		`"data":{"tenant":"exact"}}`)}
	tests := []struct {
		name  string
		path  string
		want  string
		found bool
	}{
		{name: "string", path: "data.tenant", want: "exact", found: true},
		{name: "case folded when no exact name: the last such", path: "DATA.tenant", want: "exact", found: true},
		{name: "number as written", path: "Data.n", want: "42.50", found: true},
		{name: "true", path: "Data.ok", want: "true", found: true},
		{name: "false", path: "Data.off", want: "false", found: true},
		{name: "envelope field", path: "subject", want: "/orders/7", found: true},
		{name: "nested", path: "Data.deep.er.x", want: "y", found: true},
		{name: "escapes decoded", path: "Data.quote", want: `a "b" é`, found: true},
		{name: "null is left out", path: "Data.nil"},
		{name: "object is left out", path: "Data.obj"},
		{name: "array is left out", path: "Data.arr"},
		{name: "missing is left out", path: "Data.none"},
		{name: "path through a scalar", path: "Data.n.x"},
		{name: "over 4096 bytes is left out", path: "Data.big"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hm := sinks.HeaderMappings{{Name: "X-Static", Value: secret}, {Name: "X-Dyn", SourceField: tt.path}}
			got := hm.Resolve(ev, schemas.EventGrid)
			want := map[string]string{"X-Static": secret}
			if tt.found {
				want["X-Dyn"] = tt.want
			}
			if !maps.Equal(got, want) {
				t.Errorf("Resolve() = %q; want %q", got, want)
			}
		})
	}
	if got := (sinks.HeaderMappings{{Name: "X-Dyn", SourceField: "id"}, {Name: "X-S", Value: "v"}}).Resolve(nil, schemas.EventGrid); !maps.Equal(got, map[string]string{"X-S": "v"}) {
		t.Errorf("Resolve(nil) = %v; want the static header only", got)
	}
	if got := (sinks.HeaderMappings{{Name: "X-Dyn", SourceField: "id"}}).Resolve(&schemas.Event{Raw: []byte(`{"id":`)}, schemas.EventGrid); len(got) != 0 {
		t.Errorf("Resolve(malformed) = %v; want nothing", got)
	}
}

func TestHeaderMappingStringHidesStaticValue(t *testing.T) {
	for _, m := range []sinks.HeaderMapping{{Name: "Authorization", Value: secret}, {Name: "X-T", SourceField: "data.t"}} {
		if s := fmt.Sprintf("%v %s %+v", m, m, m); strings.Contains(s, secret) {
			t.Errorf("formatting %s shows the static value: %s", m.Name, s)
		}
	}
	if s := fmt.Sprint(sinks.HeaderMappings{{Name: "Authorization", Value: secret}}); strings.Contains(s, secret) {
		t.Errorf("formatting HeaderMappings shows the static value: %s", s)
	}
}

// A dynamic value that no header can carry (a line break in the event's field) is left out, so
// it cannot break the request of any sink; the other headers are still resolved.
func TestHeaderMappingsResolveLeavesOutControlCharacters(t *testing.T) {
	hm := sinks.HeaderMappings{{Name: "X-Note", SourceField: "data.note"}, {Name: "X-Tier", SourceField: "data.tier"}}
	ev := &schemas.Event{Raw: []byte(`{"data":{"note":"line\r\nX-Injected: 1","tier":"gold\tplus"}}`)}
	if got := hm.Resolve(ev, schemas.EventGrid); !maps.Equal(got, map[string]string{"X-Tier": "gold\tplus"}) {
		t.Errorf("Resolve() = %q; want X-Tier only", got)
	}
}

// On a custom-schema topic a dynamic header reads the event as Event Grid sees it, as filter
// keys do: data is the published object and an envelope name is its mapped value, so a
// mapping copied from Azure (sourceField data.key1) finds the object's key1; other paths
// read the object as published.
func TestHeaderMappingsResolveCustomSchema(t *testing.T) {
	ev := &schemas.Event{ID: "m-1", Subject: "/users/1", Type: "Created", Time: "2026-01-01T00:00:00Z", DataVersion: "2", Source: "/topics/t",
		Raw: []byte(`{"resource":"/users/1","siteName":"north","subject":"raw subject","data":{"siteName":"inner"},"n":7}`)}
	for _, tt := range []struct {
		path, want string
		found      bool
	}{
		{path: "data.siteName", want: "north", found: true},
		{path: "Data.n", want: "7", found: true},
		{path: "data.data.siteName", want: "inner", found: true},
		{path: "subject", want: "/users/1", found: true},
		{path: "EventType", want: "Created", found: true},
		{path: "id", want: "m-1", found: true},
		{path: "topic", want: "/topics/t", found: true},
		{path: "dataVersion", want: "2", found: true},
		{path: "siteName", want: "north", found: true},
		{path: "data"},
	} {
		hm := sinks.HeaderMappings{{Name: "X-Dyn", SourceField: tt.path}}
		got := hm.Resolve(ev, schemas.Custom)
		want := map[string]string{}
		if tt.found {
			want["X-Dyn"] = tt.want
		}
		if !maps.Equal(got, want) {
			t.Errorf("custom schema, sourceField %q: Resolve() = %q; want %q", tt.path, got, want)
		}
	}
}

// A member name repeated in the event resolves to its last value, as filters and receivers'
// JSON readers take it.
func TestHeaderMappingsResolveTakesTheLastOfARepeatedName(t *testing.T) {
	ev := &schemas.Event{Raw: []byte(`{"data":{"tier":"free","Tier":"x","tier":"gold","TIER":"y"}}`)}
	hm := sinks.HeaderMappings{{Name: "X-Tier", SourceField: "data.tier"}, {Name: "X-Folded", SourceField: "data.tIer"}}
	if got := hm.Resolve(ev, schemas.EventGrid); !maps.Equal(got, map[string]string{"X-Tier": "gold", "X-Folded": "y"}) {
		t.Errorf("Resolve() = %q; want the last exact value and the last case-folded one", got)
	}
}
