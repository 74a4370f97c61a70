package filter_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/schemas"
	"go.yaml.in/yaml/v3"
)

// spec decodes a filter written as ARM JSON.
func spec(t testing.TB, js string) filter.Spec {
	t.Helper()
	var s filter.Spec
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatalf("decoding filter %s: %v", js, err)
	}
	return s
}

// manyFilters returns n IsNotNull filters (no values) plus the given ones.
func manyFilters(n int, extra ...filter.AdvancedFilter) []filter.AdvancedFilter {
	var out []filter.AdvancedFilter
	for i := range n {
		out = append(out, filter.AdvancedFilter{OperatorType: "IsNotNull", Key: fmt.Sprintf("data.k%d", i)})
	}
	return append(out, extra...)
}

// strs returns n distinct strings.
func strs(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = fmt.Sprintf("v%d", i)
	}
	return out
}

// TestCompileErrors checks that Compile refuses bad filters with a message naming the filter
// and what to do, and wraps the right sentinel (SPEC.md §3, §8).
func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name   string
		spec   filter.Spec
		schema schemas.Schema
		wantIs error
		want   string // a substring of the message
	}{
		{
			name:   "unknown operator",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"NumberEquals","key":"data.n","value":5}]}`),
			wantIs: filter.ErrUnknownOperator,
			want:   `advancedFilters[0] (NumberEquals on "data.n"): unknown operatorType "NumberEquals": use one of NumberIn, NumberNotIn,`,
		},
		{
			name:   "missing operator",
			spec:   spec(t, `{"advancedFilters":[{"key":"data.n","value":5}]}`),
			wantIs: filter.ErrUnknownOperator,
			want:   `advancedFilters[0] (? on "data.n"): unknown operatorType: operatorType is missing`,
		},
		{
			name:   "missing value",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"numbergreaterthan","key":"data.n"}]}`),
			wantIs: filter.ErrMissingValue,
			want:   `advancedFilters[0] (NumberGreaterThan on "data.n"): missing value: NumberGreaterThan needs "value": a number`,
		},
		{
			name:   "missing values",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"StringIn","key":"subject","values":[]}]}`),
			wantIs: filter.ErrMissingValue,
			want:   `(StringIn on "subject"): missing value: StringIn needs "values": a list of strings`,
		},
		{
			name:   "value where values are needed",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"NumberIn","key":"data.n","value":5}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `NumberIn takes "values" (a list of numbers, such as [5, 10]), not a single "value"`,
		},
		{
			name:   "values where value is needed",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"BoolEquals","key":"data.b","values":[true]}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `BoolEquals takes one "value" (true or false), not a "values" list`,
		},
		{
			name:   "both value and values",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"NumberLessThan","key":"data.n","value":1,"values":[2]}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `NumberLessThan takes only "value"; remove "values"`,
		},
		{
			name:   "number as string",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"NumberGreaterThan","key":"data.n","value":"5"}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `"value" must be a number, got string "5" (write numbers without quotes)`,
		},
		{
			name:   "string among numbers",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"NumberIn","key":"data.n","values":[1,"2"]}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `advancedFilters[0] (NumberIn on "data.n"): invalid value: values[1] must be a number, got string "2"`,
		},
		{
			name:   "bool as string",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"BoolEquals","key":"data.b","value":"true"}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `"value" must be true or false, got string "true"`,
		},
		{
			name:   "number among strings",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"StringContains","key":"data.s","values":["a",5]}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `values[1] must be a string, got number 5`,
		},
		{
			name:   "range that is not a pair",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"NumberInRange","key":"data.n","values":[[1,2,3]]}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `values[0] must be a [low, high] pair of numbers, got a list`,
		},
		{
			name:   "range given as a number",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"NumberNotInRange","key":"data.n","values":[5]}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `values[0] must be a [low, high] pair of numbers, got number 5`,
		},
		{
			name:   "range with a string end",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"NumberInRange","key":"data.n","values":[[0,10],[1,"x"]]}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `values[1][1] must be a number, got string "x"`,
		},
		{
			name:   "range upside down",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"NumberInRange","key":"data.n","values":[[10,5]]}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `values[0]: the low end 10 is above the high end 5; write [low, high]`,
		},
		{
			name:   "value for an operator without one",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"IsNotNull","key":"data.n","value":1}]}`),
			wantIs: filter.ErrInvalidValue,
			want:   `IsNotNull takes no value; remove "value" and "values"`,
		},
		{
			name:   "empty key",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"IsNotNull","key":""}]}`),
			wantIs: filter.ErrInvalidKey,
			want:   `advancedFilters[0] (IsNotNull on ""): invalid key: the key is empty`,
		},
		{
			name:   "empty key segment",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"IsNotNull","key":"data..a"}]}`),
			wantIs: filter.ErrInvalidKey,
			want:   `key "data..a" has an empty segment`,
		},
		{
			name:   "not an Event Grid field",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"StringIn","key":"source","values":["x"]}]}`),
			wantIs: filter.ErrInvalidKey,
			want:   `"source" is not a field of the Event Grid schema; use id, topic, subject, eventType, dataVersion, eventTime, or a data path such as data.key1`,
		},
		{
			name:   "path into an Event Grid envelope string",
			spec:   spec(t, `{"advancedFilters":[{"operatorType":"StringIn","key":"Subject.x","values":["x"]}]}`),
			wantIs: filter.ErrInvalidKey,
			want:   `"Subject" is a string field of the Event Grid envelope`,
		},
		{
			name:   "string value too long",
			spec:   filter.Spec{AdvancedFilters: []filter.AdvancedFilter{{OperatorType: "StringIn", Key: "data.s", Values: []any{"ok", strings.Repeat("x", 513)}}}},
			wantIs: filter.ErrValueTooLong,
			want:   `advancedFilters[0] (StringIn on "data.s"): string value too long: values[1] has 513 characters, at most 512 are allowed`,
		},
		{
			name:   "26 filters",
			spec:   filter.Spec{AdvancedFilters: manyFilters(26)},
			wantIs: filter.ErrTooManyFilters,
			want:   `advancedFilters: too many advanced filters: 26 given, at most 25 are allowed per subscription`,
		},
		{
			name: "26 values",
			spec: filter.Spec{AdvancedFilters: []filter.AdvancedFilter{
				{OperatorType: "StringIn", Key: "data.a", Values: strs(20)},
				{OperatorType: "NumberGreaterThan", Key: "data.b", Value: 1},
				{OperatorType: "StringIn", Key: "data.c", Values: strs(5)},
				{OperatorType: "StringIn", Key: "data.d", Values: strs(2)},
			}},
			wantIs: filter.ErrTooManyValues,
			want:   `advancedFilters[2] (StringIn on "data.c"): too many filter values: this filter's 5 value(s) bring the total to 26, and all advanced filters together have 28; at most 25 are allowed`,
		},
		{
			name:   "empty event type",
			spec:   spec(t, `{"includedEventTypes":["A",""]}`),
			wantIs: filter.ErrInvalidEventType,
			want:   `includedEventTypes[1]: invalid event type: the event type is empty`,
		},
		{
			name:   "unknown schema",
			spec:   filter.Spec{},
			schema: schemas.Schema(9),
			want:   `unknown input schema Schema(9)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			schema := tt.schema
			if schema == 0 {
				schema = schemas.EventGrid
			}
			f, err := filter.Compile(tt.spec, schema)
			if err == nil {
				t.Fatalf("Compile succeeded (%v), want an error containing %q", f, tt.want)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %q does not wrap %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error\n  %s\ndoes not contain\n  %s", err, tt.want)
			}
		})
	}
}

// TestCompileReportsEveryProblem checks that one Compile reports all problems, each as an
// *AdvancedFilterError carrying the filter's index, key and canonical operator name.
func TestCompileReportsEveryProblem(t *testing.T) {
	s := spec(t, `{
		"includedEventTypes": [""],
		"advancedFilters": [
			{"operatorType": "StringIn", "key": "data.ok", "values": ["x"]},
			{"operatorType": "numberin", "key": "data.n", "values": ["1", "2"]},
			{"operatorType": "Nope", "key": ""},
			{"operatorType": "BoolEquals", "key": "data.b"}
		]}`)
	_, err := filter.Compile(s, schemas.EventGrid)
	if err == nil {
		t.Fatal("Compile succeeded, want errors")
	}
	type problem struct {
		index int
		op    string
		key   string
		is    error
	}
	want := []problem{
		{1, "NumberIn", "data.n", filter.ErrInvalidValue}, // values[0]
		{1, "NumberIn", "data.n", filter.ErrInvalidValue}, // values[1]
		{2, "Nope", "", filter.ErrUnknownOperator},
		{2, "Nope", "", filter.ErrInvalidKey},
		{3, "BoolEquals", "data.b", filter.ErrMissingValue},
	}
	var got []problem
	var others int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *filter.AdvancedFilterError
		if !errors.As(e, &fe) {
			others++
			continue
		}
		p := problem{index: fe.Index, op: fe.OperatorType, key: fe.Key}
		for _, s := range []error{filter.ErrInvalidValue, filter.ErrUnknownOperator, filter.ErrInvalidKey, filter.ErrMissingValue} {
			if errors.Is(fe, s) {
				p.is = s
			}
		}
		got = append(got, p)
	}
	if others != 1 || !errors.Is(err, filter.ErrInvalidEventType) {
		t.Errorf("want exactly one includedEventTypes error besides the filter errors; got %d others in\n%v", others, err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("problems =\n  %v\nwant\n  %v\nfull error:\n%v", got, want, err)
	}
}

// TestCompileLimits checks the boundaries of SPEC.md §3: 25 filters, 25 values in total and
// 512 characters per string are allowed.
func TestCompileLimits(t *testing.T) {
	tests := []struct {
		name string
		spec filter.Spec
	}{
		{name: "25 filters", spec: filter.Spec{AdvancedFilters: manyFilters(25)}},
		{name: "25 values across filters", spec: filter.Spec{AdvancedFilters: manyFilters(3,
			filter.AdvancedFilter{OperatorType: "StringIn", Key: "data.a", Values: strs(20)},
			filter.AdvancedFilter{OperatorType: "NumberInRange", Key: "data.b", Values: []any{[]any{0, 1}, []any{2, 3}}},
			filter.AdvancedFilter{OperatorType: "NumberIn", Key: "data.c", Values: []any{1, 2}},
			filter.AdvancedFilter{OperatorType: "BoolEquals", Key: "data.d", Value: true},
		)}},
		{name: "512 characters", spec: filter.Spec{AdvancedFilters: []filter.AdvancedFilter{
			{OperatorType: "StringContains", Key: "data.s", Values: []any{strings.Repeat("x", 512)}},
		}}},
		{name: "512 multi-byte characters", spec: filter.Spec{AdvancedFilters: []filter.AdvancedFilter{
			{OperatorType: "StringContains", Key: "data.s", Values: []any{strings.Repeat("é", 512)}},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := filter.Compile(tt.spec, schemas.EventGrid); err != nil {
				t.Errorf("Compile: %v", err)
			}
		})
	}
}

// TestCompileValueTypes checks the operand types Compile accepts from the decoders and Go
// callers: JSON's float64, YAML's int, Go ints and typed slices, json.Number and
// json.RawMessage.
func TestCompileValueTypes(t *testing.T) {
	ev := egEvent(`{"n":7,"s":"seven","b":true}`)
	tests := []struct {
		name string
		af   filter.AdvancedFilter
	}{
		{"float64", filter.AdvancedFilter{OperatorType: "NumberIn", Key: "data.n", Values: []any{7.0}}},
		{"int", filter.AdvancedFilter{OperatorType: "NumberIn", Key: "data.n", Values: []any{7}}},
		{"uint8", filter.AdvancedFilter{OperatorType: "NumberGreaterThan", Key: "data.n", Value: uint8(6)}},
		{"float32", filter.AdvancedFilter{OperatorType: "NumberLessThan", Key: "data.n", Value: float32(7.5)}},
		{"json.Number", filter.AdvancedFilter{OperatorType: "NumberIn", Key: "data.n", Values: []any{json.Number("7")}}},
		{"json.RawMessage", filter.AdvancedFilter{OperatorType: "NumberIn", Key: "data.n", Values: []any{json.RawMessage(`7`)}}},
		{"json.RawMessage bool", filter.AdvancedFilter{OperatorType: "BoolEquals", Key: "data.b", Value: json.RawMessage(`true`)}},
		{"[]float64 range", filter.AdvancedFilter{OperatorType: "NumberInRange", Key: "data.n", Values: []any{[]float64{6, 8}}}},
		{"[2]int range", filter.AdvancedFilter{OperatorType: "NumberInRange", Key: "data.n", Values: []any{[2]int{7, 7}}}},
		{"json.RawMessage range", filter.AdvancedFilter{OperatorType: "NumberInRange", Key: "data.n", Values: []any{json.RawMessage(`[1, 9]`)}}},
		{"named string type", filter.AdvancedFilter{OperatorType: "StringIn", Key: "data.s", Values: []any{myString("SEVEN")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustCompile(t, filter.Spec{AdvancedFilters: []filter.AdvancedFilter{tt.af}}, schemas.EventGrid)
			if !f.Match(ev) {
				t.Errorf("filter %+v does not match data %s", tt.af, ev.Raw)
			}
		})
	}
	for _, af := range []filter.AdvancedFilter{
		{OperatorType: "StringIn", Key: "data.s", Values: []any{json.Number("7")}},
		{OperatorType: "NumberIn", Key: "data.n", Values: []any{json.RawMessage(`"7"`)}},
		{OperatorType: "NumberIn", Key: "data.n", Values: []any{json.RawMessage(`{`)}},
		{OperatorType: "NumberIn", Key: "data.n", Values: []any{math.NaN()}},
		{OperatorType: "NumberLessThan", Key: "data.n", Value: math.Inf(1)},
	} {
		if _, err := filter.Compile(filter.Spec{AdvancedFilters: []filter.AdvancedFilter{af}}, schemas.EventGrid); !errors.Is(err, filter.ErrInvalidValue) {
			t.Errorf("Compile(%+v) error = %v, want ErrInvalidValue", af, err)
		}
	}
}

type myString string

// TestCompileEmpty checks that a spec without conditions compiles to All, that the legacy
// includedEventTypes ["All"] means every type, and that All and a nil *Filter match everything.
func TestCompileEmpty(t *testing.T) {
	for _, s := range []filter.Spec{
		{},
		{IncludedEventTypes: []string{}},
		{IncludedEventTypes: []string{"all"}},
		{IsSubjectCaseSensitive: true, EnableAdvancedFilteringOnArrays: true},
	} {
		for _, schema := range []schemas.Schema{0, schemas.EventGrid, schemas.CloudEvents, schemas.Custom} {
			if f := mustCompile(t, s, schema); f != filter.All {
				t.Errorf("Compile(%+v, %v) is not filter.All", s, schema)
			}
		}
	}
	ev := &schemas.Event{Type: "x", Subject: "y", Raw: []byte("not json")}
	if !filter.All.Match(ev) {
		t.Error("All does not match")
	}
	var nilFilter *filter.Filter
	if !nilFilter.Match(ev) {
		t.Error("a nil *Filter does not match")
	}
}

// TestSpecDecoding checks the ARM JSON and YAML names of Spec and that decoded specs compile.
func TestSpecDecoding(t *testing.T) {
	const armJSON = `{
		"includedEventTypes": ["Orders.Created"],
		"subjectBeginsWith": "/orders/",
		"subjectEndsWith": "/1",
		"isSubjectCaseSensitive": null,
		"enableAdvancedFilteringOnArrays": true,
		"advancedFilters": [
			{"operatorType": "NumberInRange", "key": "data.n", "values": [[1, 10]]},
			{"operatorType": "BoolEquals", "key": "data.b", "value": false}
		]}`
	const yamlText = `
includedEventTypes: [Orders.Created]
subjectBeginsWith: /orders/
subjectEndsWith: /1
enableAdvancedFilteringOnArrays: true
advancedFilters:
  - operatorType: NumberInRange
    key: data.n
    values: [[1, 10]]
  - operatorType: BoolEquals
    key: data.b
    value: false
`
	fromJSON := spec(t, armJSON)
	var fromYAML filter.Spec
	if err := yaml.Unmarshal([]byte(yamlText), &fromYAML); err != nil {
		t.Fatal(err)
	}
	want := `{"includedEventTypes":["Orders.Created"],"subjectBeginsWith":"/orders/","subjectEndsWith":"/1",` +
		`"enableAdvancedFilteringOnArrays":true,"advancedFilters":[{"operatorType":"NumberInRange","key":"data.n","values":[[1,10]]},` +
		`{"operatorType":"BoolEquals","key":"data.b","value":false}]}`
	for name, s := range map[string]filter.Spec{"json": fromJSON, "yaml": fromYAML} {
		t.Run(name, func(t *testing.T) {
			out, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != want {
				t.Errorf("re-encoded spec\n  %s\nwant\n  %s", out, want)
			}
			f := mustCompile(t, s, schemas.EventGrid)
			if !f.Match(egEvent(`{"n":[0,4],"b":false}`)) {
				t.Error("decoded spec does not match an event it should")
			}
			if f.Match(egEvent(`{"n":[0,40],"b":false}`)) {
				t.Error("decoded spec matches an event outside the range")
			}
		})
	}
}
