package filter_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/schemas"
)

// egEvent builds an Event Grid schema event whose data is the JSON text data.
func egEvent(data string) *schemas.Event {
	raw := fmt.Sprintf(`{"id":"id-1","topic":"/subscriptions/x/topics/orders","subject":"/orders/1",`+
		`"eventType":"Orders.Created","eventTime":"2024-05-01T10:00:00Z","dataVersion":"1.0",`+
		`"metadataVersion":"1","data":%s}`, data)
	return &schemas.Event{
		ID:          "id-1",
		Type:        "Orders.Created",
		Subject:     "/orders/1",
		Time:        "2024-05-01T10:00:00Z",
		DataVersion: "1.0",
		Source:      "/subscriptions/x/topics/orders",
		Raw:         []byte(raw),
	}
}

// advanced decodes one advanced filter written as ARM JSON.
func advanced(t testing.TB, js string) filter.AdvancedFilter {
	t.Helper()
	var a filter.AdvancedFilter
	if err := json.Unmarshal([]byte(js), &a); err != nil {
		t.Fatalf("decoding advanced filter %s: %v", js, err)
	}
	return a
}

func mustCompile(t testing.TB, s filter.Spec, schema schemas.Schema) *filter.Filter {
	t.Helper()
	f, err := filter.Compile(s, schema)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return f
}

// opCase is one event tested against one advanced filter on the key data.k.
type opCase struct {
	name   string
	data   string // the event's data object
	arrays bool   // enableAdvancedFilteringOnArrays
	want   bool
}

// TestOperators checks every operator of eventgrid-behaviour.md §4.5 (SPEC.md §3): match, no
// match, missing key, null, wrong JSON type (numbers as strings and the like), arrays with
// array filtering off and on, and case-insensitivity of strings.
func TestOperators(t *testing.T) {
	tests := []struct {
		filter string
		cases  []opCase
	}{
		{
			filter: `{"operatorType":"NumberIn","key":"data.k","values":[5, 7.5]}`,
			cases: []opCase{
				{name: "equal", data: `{"k":5}`, want: true},
				{name: "equal second value", data: `{"k":7.5}`, want: true},
				{name: "equal written as float", data: `{"k":5.0}`, want: true},
				{name: "equal with exponent", data: `{"k":0.5e1}`, want: true},
				{name: "not equal", data: `{"k":6}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "number as string", data: `{"k":"5"}`},
				{name: "bool", data: `{"k":true}`},
				{name: "array off", data: `{"k":[1,5]}`},
				{name: "array on, element equal", data: `{"k":[1,5]}`, arrays: true, want: true},
				{name: "array on, none equal", data: `{"k":[1,2]}`, arrays: true},
				{name: "array on, strings ignored", data: `{"k":["5",true,null,{"a":5},[5]]}`, arrays: true},
				{name: "array on, mixed types", data: `{"k":["x",5]}`, arrays: true, want: true},
				{name: "array on, empty", data: `{"k":[]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"NumberNotIn","key":"data.k","values":[5, 7.5]}`,
			cases: []opCase{
				{name: "not equal", data: `{"k":6}`, want: true},
				{name: "equal", data: `{"k":5}`},
				{name: "equal second value", data: `{"k":7.5}`},
				{name: "missing matches", data: `{}`, want: true},
				{name: "null matches", data: `{"k":null}`, want: true},
				{name: "number as string is no number", data: `{"k":"5"}`, want: true},
				{name: "array off", data: `{"k":[1,2]}`},
				{name: "array on, none equal", data: `{"k":[1,2]}`, arrays: true, want: true},
				{name: "array on, one equal", data: `{"k":[1,5]}`, arrays: true},
				{name: "array on, only strings", data: `{"k":["5"]}`, arrays: true, want: true},
				{name: "array on, empty", data: `{"k":[]}`, arrays: true, want: true},
			},
		},
		{
			filter: `{"operatorType":"NumberLessThan","key":"data.k","value":5}`,
			cases: []opCase{
				{name: "less", data: `{"k":4.99}`, want: true},
				{name: "negative", data: `{"k":-100}`, want: true},
				{name: "equal", data: `{"k":5}`},
				{name: "greater", data: `{"k":6}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "number as string", data: `{"k":"4"}`},
				{name: "overflowing negative number", data: `{"k":-1e400}`, want: true},
				{name: "array off", data: `{"k":[4]}`},
				{name: "array on, one less", data: `{"k":[9,4]}`, arrays: true, want: true},
				{name: "array on, none less", data: `{"k":[9,5]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"NumberGreaterThan","key":"data.k","value":5}`,
			cases: []opCase{
				{name: "greater", data: `{"k":5.01}`, want: true},
				{name: "equal", data: `{"k":5}`},
				{name: "less", data: `{"k":-6}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "number as string", data: `{"k":"6"}`},
				{name: "overflowing number", data: `{"k":1e400}`, want: true},
				{name: "array off", data: `{"k":[6]}`},
				{name: "array on, one greater", data: `{"k":[1,6]}`, arrays: true, want: true},
				{name: "array on, none greater", data: `{"k":[1,5]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"NumberLessThanOrEquals","key":"data.k","value":5}`,
			cases: []opCase{
				{name: "equal", data: `{"k":5}`, want: true},
				{name: "less", data: `{"k":0}`, want: true},
				{name: "greater", data: `{"k":5.0000001}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "number as string", data: `{"k":"5"}`},
				{name: "array off", data: `{"k":[5]}`},
				{name: "array on, one equal", data: `{"k":[7,5]}`, arrays: true, want: true},
				{name: "array on, none", data: `{"k":[7,6]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"NumberGreaterThanOrEquals","key":"data.k","value":5}`,
			cases: []opCase{
				{name: "equal", data: `{"k":5}`, want: true},
				{name: "greater", data: `{"k":50}`, want: true},
				{name: "less", data: `{"k":4.99}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "number as string", data: `{"k":"5"}`},
				{name: "array off", data: `{"k":[5]}`},
				{name: "array on, one equal", data: `{"k":[1,5]}`, arrays: true, want: true},
				{name: "array on, none", data: `{"k":[1,4]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"NumberInRange","key":"data.k","values":[[0,10],[20,30]]}`,
			cases: []opCase{
				{name: "low end inclusive", data: `{"k":0}`, want: true},
				{name: "high end inclusive", data: `{"k":10}`, want: true},
				{name: "second range", data: `{"k":25}`, want: true},
				{name: "between ranges", data: `{"k":15}`},
				{name: "below", data: `{"k":-1}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "number as string", data: `{"k":"5"}`},
				{name: "array off", data: `{"k":[5]}`},
				{name: "array on, one inside", data: `{"k":[15,25]}`, arrays: true, want: true},
				{name: "array on, none inside", data: `{"k":[15,35]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"NumberNotInRange","key":"data.k","values":[[0,10],[20,30]]}`,
			cases: []opCase{
				{name: "between ranges", data: `{"k":15}`, want: true},
				{name: "on an end", data: `{"k":10}`},
				{name: "inside second", data: `{"k":20.5}`},
				{name: "missing matches, like NumberNotIn", data: `{}`, want: true},
				{name: "null matches", data: `{"k":null}`, want: true},
				{name: "number as string is no number", data: `{"k":"5"}`, want: true},
				{name: "array off", data: `{"k":[15]}`},
				{name: "array on, none inside", data: `{"k":[15,35]}`, arrays: true, want: true},
				{name: "array on, one inside", data: `{"k":[15,25]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"BoolEquals","key":"data.k","value":true}`,
			cases: []opCase{
				{name: "equal", data: `{"k":true}`, want: true},
				{name: "not equal", data: `{"k":false}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "bool as string", data: `{"k":"true"}`},
				{name: "number one", data: `{"k":1}`},
				{name: "array off", data: `{"k":[true]}`},
				{name: "array on, one equal", data: `{"k":[false,true]}`, arrays: true, want: true},
				{name: "array on, none equal", data: `{"k":[false,"true"]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"BoolEquals","key":"data.k","value":false}`,
			cases: []opCase{
				{name: "equal false", data: `{"k":false}`, want: true},
				{name: "true", data: `{"k":true}`},
				{name: "missing is not false", data: `{}`},
				{name: "null is not false", data: `{"k":null}`},
			},
		},
		{
			filter: `{"operatorType":"StringIn","key":"data.k","values":["Blue","red"]}`,
			cases: []opCase{
				{name: "equal ignoring case", data: `{"k":"blue"}`, want: true},
				{name: "second value upper case", data: `{"k":"RED"}`, want: true},
				{name: "different", data: `{"k":"green"}`},
				{name: "prefix only", data: `{"k":"blu"}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "number is no string", data: `{"k":5}`},
				{name: "array off", data: `{"k":["blue"]}`},
				{name: "array on, one equal", data: `{"k":["green","BLUE"]}`, arrays: true, want: true},
				{name: "array on, none equal", data: `{"k":["green",5]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"StringNotIn","key":"data.k","values":["Blue","red"]}`,
			cases: []opCase{
				{name: "different", data: `{"k":"green"}`, want: true},
				{name: "equal ignoring case", data: `{"k":"BLUE"}`},
				{name: "missing matches", data: `{}`, want: true},
				{name: "null matches", data: `{"k":null}`, want: true},
				{name: "number is no string", data: `{"k":5}`, want: true},
				{name: "array off", data: `{"k":["green"]}`},
				{name: "array on, none equal", data: `{"k":["green","pink"]}`, arrays: true, want: true},
				{name: "array on, one equal", data: `{"k":["green","Red"]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"StringContains","key":"data.k","values":["needle","οδυσσευς"]}`,
			cases: []opCase{
				{name: "contains ignoring case", data: `{"k":"hay with NEEDLE inside"}`, want: true},
				{name: "contains whole", data: `{"k":"needle"}`, want: true},
				{name: "greek final sigma folds", data: `{"k":"Ο ΟΔΥΣΣΕΥΣ ΗΡΘΕ"}`, want: true},
				{name: "does not contain", data: `{"k":"haystack"}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "number", data: `{"k":7}`},
				{name: "array off", data: `{"k":["needle"]}`},
				{name: "array on, one contains", data: `{"k":["x","aNeedleB"]}`, arrays: true, want: true},
				{name: "array on, none contains", data: `{"k":["x","y"]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"StringNotContains","key":"data.k","values":["needle"]}`,
			cases: []opCase{
				{name: "does not contain", data: `{"k":"hay"}`, want: true},
				{name: "contains ignoring case", data: `{"k":"xNEEDLEx"}`},
				{name: "missing does not match, as documented", data: `{}`},
				{name: "null does not match", data: `{"k":null}`},
				{name: "number is no string", data: `{"k":7}`, want: true},
				{name: "array off", data: `{"k":["hay"]}`},
				{name: "array on, none contains", data: `{"k":["a","b"]}`, arrays: true, want: true},
				{name: "array on, one contains", data: `{"k":["a","needles"]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"StringBeginsWith","key":"data.k","values":["/A/","x"]}`,
			cases: []opCase{
				{name: "begins ignoring case", data: `{"k":"/a/b"}`, want: true},
				{name: "second value", data: `{"k":"Xylophone"}`, want: true},
				{name: "elsewhere", data: `{"k":"/b/a/"}`},
				{name: "shorter than value", data: `{"k":"/a"}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "array off", data: `{"k":["/a/b"]}`},
				{name: "array on, one begins", data: `{"k":["/b","/A/y"]}`, arrays: true, want: true},
				{name: "array on, none begins", data: `{"k":["/b","/c"]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"StringNotBeginsWith","key":"data.k","values":["/A/"]}`,
			cases: []opCase{
				{name: "does not begin", data: `{"k":"/b/a/"}`, want: true},
				{name: "begins ignoring case", data: `{"k":"/a/b"}`},
				{name: "missing does not match, as documented", data: `{}`},
				{name: "null does not match", data: `{"k":null}`},
				{name: "bool is no string", data: `{"k":false}`, want: true},
				{name: "array off", data: `{"k":["/b"]}`},
				{name: "array on, none begins", data: `{"k":["/b","/c"]}`, arrays: true, want: true},
				{name: "array on, one begins", data: `{"k":["/b","/a/c"]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"StringEndsWith","key":"data.k","values":[".JPG",".png"]}`,
			cases: []opCase{
				{name: "ends ignoring case", data: `{"k":"cat.jpg"}`, want: true},
				{name: "second value", data: `{"k":"DOG.PNG"}`, want: true},
				{name: "different", data: `{"k":"cat.gif"}`},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "array off", data: `{"k":["a.jpg"]}`},
				{name: "array on, one ends", data: `{"k":["a.gif","b.Jpg"]}`, arrays: true, want: true},
				{name: "array on, none ends", data: `{"k":["a.gif"]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"StringNotEndsWith","key":"data.k","values":[".jpg"]}`,
			cases: []opCase{
				{name: "does not end", data: `{"k":"cat.gif"}`, want: true},
				{name: "ends ignoring case", data: `{"k":"cat.JPG"}`},
				{name: "missing does not match, as documented", data: `{}`},
				{name: "null does not match", data: `{"k":null}`},
				{name: "array off", data: `{"k":["a.gif"]}`},
				{name: "array on, none ends", data: `{"k":["a.gif"]}`, arrays: true, want: true},
				{name: "array on, one ends", data: `{"k":["a.gif","b.jpg"]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"IsNullOrUndefined","key":"data.k"}`,
			cases: []opCase{
				{name: "missing", data: `{}`, want: true},
				{name: "null", data: `{"k":null}`, want: true},
				{name: "zero", data: `{"k":0}`},
				{name: "empty string", data: `{"k":""}`},
				{name: "false", data: `{"k":false}`},
				{name: "object", data: `{"k":{}}`},
				{name: "parent is not an object", data: `"a string"`, want: true},
				{name: "array off is present", data: `{"k":[]}`},
				{name: "array on of nulls is present", data: `{"k":[null]}`, arrays: true},
			},
		},
		{
			filter: `{"operatorType":"IsNotNull","key":"data.k"}`,
			cases: []opCase{
				{name: "present", data: `{"k":0}`, want: true},
				{name: "empty string", data: `{"k":""}`, want: true},
				{name: "object", data: `{"k":{"a":null}}`, want: true},
				{name: "missing", data: `{}`},
				{name: "null", data: `{"k":null}`},
				{name: "array off is present", data: `{"k":[1]}`, want: true},
				{name: "empty array on is present", data: `{"k":[]}`, arrays: true, want: true},
			},
		},
	}
	tested := map[filter.Operator]bool{}
	for _, tt := range tests {
		a := advanced(t, tt.filter)
		op, err := filter.ParseOperator(a.OperatorType)
		if err != nil {
			t.Fatal(err)
		}
		tested[op] = true
		t.Run(a.OperatorType, func(t *testing.T) {
			for _, c := range tt.cases {
				t.Run(c.name, func(t *testing.T) {
					f := mustCompile(t, filter.Spec{
						EnableAdvancedFilteringOnArrays: c.arrays,
						AdvancedFilters:                 []filter.AdvancedFilter{a},
					}, schemas.EventGrid)
					if got := f.Match(egEvent(c.data)); got != c.want {
						t.Errorf("%s with data %s (arrays %v): Match = %v, want %v", tt.filter, c.data, c.arrays, got, c.want)
					}
				})
			}
		})
	}
	for o := filter.NumberIn; o <= filter.IsNotNull; o++ {
		if !tested[o] {
			t.Errorf("TestOperators has no cases for %v", o)
		}
	}
}

// TestParseOperator checks that operator names parse back and ignore case, as ARM does.
func TestParseOperator(t *testing.T) {
	for o := filter.NumberIn; o <= filter.IsNotNull; o++ {
		for _, name := range []string{o.String(), strings.ToUpper(o.String()), strings.ToLower(o.String())} {
			if got, err := filter.ParseOperator(name); err != nil || got != o {
				t.Errorf("ParseOperator(%q) = %v, %v; want %v", name, got, err, o)
			}
		}
	}
	if _, err := filter.ParseOperator("NumberEquals"); !errors.Is(err, filter.ErrUnknownOperator) {
		t.Errorf("ParseOperator(NumberEquals) error = %v, want ErrUnknownOperator", err)
	}
	if got := filter.Operator(0).String(); got != "Operator(0)" {
		t.Errorf("Operator(0).String() = %q, want Operator(0)", got)
	}
}
