package filter_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/filter"
	"github.com/egridio/egrid/schemas"
)

// allocsPerMatch returns the allocations of one Match of ev, which must give want.
func allocsPerMatch(t *testing.T, f *filter.Filter, ev *schemas.Event, want bool) float64 {
	t.Helper()
	return testing.AllocsPerRun(10, func() {
		if f.Match(ev) != want {
			t.Fatalf("Match = %v, want %v", !want, want)
		}
	})
}

// A value read by many StringContains or StringNotContains filters is case-folded once per
// Match (each array element once), not once per filter: 25 filters cost the allocations one
// does. Folding "é" allocates (its canonical form is "É"), so every extra fold would show.
func TestMatchFoldsEachValueOnce(t *testing.T) {
	long := strings.Repeat("é", 1000)
	tests := []struct {
		name   string
		key    string
		arrays bool
		ev     *schemas.Event
	}{
		{name: "data string", key: "data.s", ev: egEvent(`{"s":"` + long + `"}`)},
		{name: "array elements", key: "data.s", arrays: true, ev: egEvent(`{"s":["` + long + `","x` + long + `",1,"` + long + `y"]}`)},
		{name: "subject", key: "subject", ev: func() *schemas.Event {
			ev := egEvent(`{}`)
			ev.Subject = long
			return ev
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			one := allocsPerMatch(t, mustCompile(t, notContainsSpec(1, tt.key, tt.arrays), schemas.EventGrid), tt.ev, true)
			many := allocsPerMatch(t, mustCompile(t, notContainsSpec(filter.MaxAdvancedFilters, tt.key, tt.arrays), schemas.EventGrid), tt.ev, true)
			if many != one {
				t.Errorf("%d StringNotContains filters on %s allocate %v times per Match, one allocates %v: the value is folded per filter",
					filter.MaxAdvancedFilters, tt.key, many, one)
			}
		})
	}
}

// With array filtering on, an array is tested element by element as it is read, so however
// long it is Match holds no copy of it: a 1 MB array of 512k numbers costs a few allocations
// and a few bytes, where collecting the elements first took 170 MB.
func TestMatchLargeArrayAllocatesLittle(t *testing.T) {
	ev := largeEvent("a", "[%s]", "0", ",")
	for _, tt := range []struct {
		filter string
		want   bool
	}{
		{filter: `{"operatorType":"NumberNotIn","key":"data.a","values":[1]}`, want: true}, // reads every element
		{filter: `{"operatorType":"NumberIn","key":"data.a","values":[0]}`, want: true},    // decided by the first
		{filter: `{"operatorType":"NumberGreaterThan","key":"data.a","value":0}`},
	} {
		f := mustCompile(t, filter.Spec{EnableAdvancedFilteringOnArrays: true,
			AdvancedFilters: []filter.AdvancedFilter{advanced(t, tt.filter)}}, schemas.EventGrid)
		if n := allocsPerMatch(t, f, ev, tt.want); n > 2 {
			t.Errorf("%s on a 1 MB array: %v allocations per Match, want at most 2", tt.filter, n)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		const runs = 3
		for range runs {
			f.Match(ev)
		}
		runtime.ReadMemStats(&after)
		if perMatch := (after.TotalAlloc - before.TotalAlloc) / runs; perMatch > 64<<10 {
			t.Errorf("%s on a 1 MB array: %d bytes allocated per Match, want at most 64 KiB", tt.filter, perMatch)
		}
	}
}

// Several filters on one array share its single reading: each gets the answer it gets alone.
func TestMatchArrayFiltersShareOneReading(t *testing.T) {
	filters := []string{
		`{"operatorType":"NumberIn","key":"data.a","values":[1]}`,
		`{"operatorType":"NumberNotIn","key":"data.a","values":[2]}`,
		`{"operatorType":"StringContains","key":"data.a","values":["É"]}`,
		`{"operatorType":"StringNotBeginsWith","key":"data.a","values":["x"]}`,
		`{"operatorType":"BoolEquals","key":"data.a","value":true}`,
		`{"operatorType":"IsNotNull","key":"data.a"}`,
		`{"operatorType":"NumberLessThan","key":"data.A","value":0}`,
		`{"operatorType":"StringIn","key":"data.b","values":["x"]}`,
	}
	for _, data := range []string{
		`{"a":[1,"été",true]}`,
		`{"a":[2,"x",false],"b":"x"}`,
		`{"a":[],"b":["y","x"]}`,
		`{"a":[1,1,1,1,"é",true,true,-1],"A":[-1]}`,
		`{"a":[{"a":1},[1],null,"X"],"b":[["x"]]}`,
	} {
		ev := egEvent(data)
		var spec filter.Spec
		spec.EnableAdvancedFilteringOnArrays = true
		want := true
		for _, js := range filters {
			a := advanced(t, js)
			one := mustCompile(t, filter.Spec{EnableAdvancedFilteringOnArrays: true, AdvancedFilters: []filter.AdvancedFilter{a}}, schemas.EventGrid)
			want = want && one.Match(ev)
			spec.AdvancedFilters = append(spec.AdvancedFilters, a)
			if got := mustCompile(t, spec, schemas.EventGrid).Match(ev); got != want {
				t.Errorf("data %s, the first %d filters: Match = %v, each alone gives %v", data, len(spec.AdvancedFilters), got, want)
			}
		}
	}
}
