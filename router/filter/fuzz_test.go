package filter_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/schemas"
)

var sentinels = []error{
	filter.ErrUnknownOperator, filter.ErrMissingValue, filter.ErrInvalidValue, filter.ErrValueTooLong,
	filter.ErrInvalidKey, filter.ErrTooManyFilters, filter.ErrTooManyValues, filter.ErrInvalidEventType,
}

// FuzzCompile compiles arbitrary JSON specs: Compile never panics, every reported problem
// wraps a sentinel, the limits are always enforced, and a compiled filter matches without
// panicking.
func FuzzCompile(f *testing.F) {
	f.Add([]byte(`{"includedEventTypes":["A"],"subjectBeginsWith":"/a","advancedFilters":[{"operatorType":"NumberIn","key":"data.n","values":[1,2]}]}`), uint8(1))
	f.Add([]byte(`{"advancedFilters":[{"operatorType":"NumberInRange","key":"data.n","values":[[1,2],[3]]},{"operatorType":"IsNotNull","key":"x"}]}`), uint8(2))
	f.Add([]byte(`{"advancedFilters":[{"operatorType":"stringcontains","key":"a.b","values":["x",null,{"a":1}]},{"operatorType":"BoolEquals","key":"data","value":[true]}]}`), uint8(3))
	f.Add([]byte(`{"advancedFilters":[{"operatorType":"x"}],"includedEventTypes":["","All"]}`), uint8(0))
	events := []*schemas.Event{
		egEvent(`{"n":1,"a":{"b":"x"},"x":[1,"x",true,null]}`),
		{Type: "A", Subject: "/a", Raw: []byte(`{"data":{"n":[1,2]},"x":null,"a":{"b":["X"]}}`)},
		{Raw: []byte(`not json`)},
	}
	f.Fuzz(func(t *testing.T, data []byte, schemaByte uint8) {
		var s filter.Spec
		if json.Unmarshal(data, &s) != nil {
			return
		}
		schema := schemas.Schema(schemaByte % 4) // 0 means the default, Event Grid
		compiled, err := filter.Compile(s, schema)
		values := 0
		for _, a := range s.AdvancedFilters {
			values += len(a.Values)
			if a.Value != nil {
				values++
			}
		}
		if len(s.AdvancedFilters) > filter.MaxAdvancedFilters && !errors.Is(err, filter.ErrTooManyFilters) {
			t.Errorf("%d filters compiled without ErrTooManyFilters (err %v)", len(s.AdvancedFilters), err)
		}
		if values > filter.MaxFilterValues && !errors.Is(err, filter.ErrTooManyValues) {
			t.Errorf("%d values compiled without ErrTooManyValues (err %v)", values, err)
		}
		if err != nil {
			if compiled != nil {
				t.Errorf("Compile returned a filter and an error %v", err)
			}
			joined, ok := err.(interface{ Unwrap() []error })
			if !ok {
				t.Fatalf("Compile error %v is not a joined error", err)
			}
			for _, e := range joined.Unwrap() {
				wraps := false
				for _, s := range sentinels {
					wraps = wraps || errors.Is(e, s)
				}
				if !wraps {
					t.Errorf("problem %q wraps none of the sentinels", e)
				}
			}
			return
		}
		if compiled == nil {
			t.Fatal("Compile returned neither a filter nor an error")
		}
		for _, ev := range events {
			compiled.Match(ev)
		}
	})
}

// pair is an operator and its negation on one key: for any event, with array filtering on,
// exactly one of them matches (or, for the string operators that fail on a missing key,
// neither when the key is missing or null).
type pair struct {
	pos, neg *filter.Filter
	absent   *filter.Filter // IsNullOrUndefined on the same key
	bothFail bool           // both fail when the key is missing or null
}

func compilePairs(t testing.TB, schema schemas.Schema, keys []string) []pair {
	var out []pair
	ops := []struct {
		pos, neg string
		values   string
		bothFail bool
	}{
		{"NumberIn", "NumberNotIn", `[1, -2.5, 1e3]`, false},
		{"NumberInRange", "NumberNotInRange", `[[0, 1], [10, 20]]`, false},
		{"StringIn", "StringNotIn", `["x", "Hello", "ß"]`, false},
		{"StringContains", "StringNotContains", `["ab", "K"]`, true},
		{"StringBeginsWith", "StringNotBeginsWith", `["/a", "é"]`, true},
		{"StringEndsWith", "StringNotEndsWith", `["z", ".JPG"]`, true},
	}
	for _, key := range keys {
		absent := mustCompile(t, filter.Spec{AdvancedFilters: []filter.AdvancedFilter{{OperatorType: "IsNullOrUndefined", Key: key}}}, schema)
		present := mustCompile(t, filter.Spec{AdvancedFilters: []filter.AdvancedFilter{{OperatorType: "IsNotNull", Key: key}}}, schema)
		out = append(out, pair{pos: present, neg: absent, absent: absent})
		for _, op := range ops {
			mk := func(name string) *filter.Filter {
				a := advanced(t, `{"operatorType":"`+name+`","key":"`+key+`","values":`+op.values+`}`)
				return mustCompile(t, filter.Spec{EnableAdvancedFilteringOnArrays: true, AdvancedFilters: []filter.AdvancedFilter{a}}, schema)
			}
			out = append(out, pair{pos: mk(op.pos), neg: mk(op.neg), absent: absent, bothFail: op.bothFail})
		}
	}
	return out
}

// FuzzMatch matches arbitrary event JSON against fixed filters for each schema: Match never
// panics, and every operator and its negation disagree, as eventgrid-behaviour.md §4.5 implies.
func FuzzMatch(f *testing.F) {
	f.Add([]byte(`{"data":{"a":1,"b":[1,"x",true]},"a":"Hello"}`), "/a/b", "Type")
	f.Add([]byte(`{"data":{"a":{"b":null}},"a":[["x"],{"y":1}]}`), "", "")
	f.Add([]byte(`{"data":"text","a":"abK.jpg"}`), "/é", "x")
	f.Add([]byte(`{"A":1e999,"a":-0,"data":{"A":[15,"/a"]}}`), "x", "y")
	schemaKeys := map[schemas.Schema][]string{
		schemas.EventGrid:   {"data.a", "data", "data.a.b", "subject", "eventType"},
		schemas.CloudEvents: {"a", "data.a", "subject", "comexampleext"},
		schemas.Custom:      {"a", "data.a", "A.b", "data", "data.data.a", "subject", "eventType"},
	}
	pairs := map[schemas.Schema][]pair{}
	for schema, keys := range schemaKeys {
		pairs[schema] = compilePairs(f, schema, keys)
	}
	all := mustCompile(f, spec(f, `{"includedEventTypes":["Type","x"],"subjectEndsWith":"b","enableAdvancedFilteringOnArrays":true,
		"advancedFilters":[
			{"operatorType":"NumberGreaterThan","key":"data.a","value":0},
			{"operatorType":"NumberLessThanOrEquals","key":"data.a","value":100},
			{"operatorType":"BoolEquals","key":"data.b","value":true},
			{"operatorType":"StringNotIn","key":"data.c","values":["q"]}]}`), schemas.EventGrid)
	f.Fuzz(func(t *testing.T, raw []byte, subject, typ string) {
		ev := &schemas.Event{ID: "1", Type: typ, Subject: subject, Time: "t", Source: "/s", SpecVersion: "1.0", Raw: raw}
		all.Match(ev)
		for schema, ps := range pairs {
			for i, p := range ps {
				pos, neg := p.pos.Match(ev), p.neg.Match(ev)
				if p.bothFail && p.absent.Match(ev) {
					if pos || neg {
						t.Errorf("%v pair %d: key missing, but Match gives %v and %v; want both false", schema, i, pos, neg)
					}
					continue
				}
				if pos == neg {
					t.Errorf("%v pair %d on %q: an operator and its negation both gave %v", schema, i, raw, pos)
				}
			}
		}
	})
}
