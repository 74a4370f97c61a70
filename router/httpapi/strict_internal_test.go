package httpapi

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// hostileStrictBodies are bodies shaped to make checkStrictJSON's work grow faster than the
// body: n is about the body's size in bytes. Each is valid JSON that checkStrictJSON finds no
// problem in, so the walk goes to the end, but the last, whose problem is at its end.
var hostileStrictBodies = []struct {
	name    string
	body    func(n int) []byte
	problem string // what checkStrictJSON's problem says, "" for none
}{
	// Many members in one object: each name is compared with the earlier ones.
	{"members", func(n int) []byte {
		var b strings.Builder
		b.WriteString(`{"properties":{}`)
		for i := 0; b.Len() < n; i++ {
			fmt.Fprintf(&b, `,"k%d":0`, i)
		}
		b.WriteString("}")
		return []byte(b.String())
	}, ""},
	// A settle body that only needs a topic key to be read.
	{"settle members", func(n int) []byte {
		var b strings.Builder
		b.WriteString(`{"lockTokens":["x"]`)
		for i := 0; b.Len() < n; i++ {
			fmt.Fprintf(&b, `,"K%d":0`, i)
		}
		b.WriteString("}")
		return []byte(b.String())
	}, ""},
	// A long member name over a long array: a path built per element copies the name.
	{"long name over an array", func(n int) []byte {
		return []byte(`{"` + strings.Repeat("k", n/2) + `":[0` + strings.Repeat(",0", n/4) + `]}`)
	}, ""},
	// Nesting with long names: a path built per level copies every level above it.
	{"deep nesting", func(n int) []byte {
		key := strings.Repeat("k", 16)
		depth := n / 20
		return []byte(strings.Repeat(`{"`+key+`":`, depth) + "0" + strings.Repeat("}", depth))
	}, ""},
	// The same with a member sent twice at the bottom: its path names every level.
	{"deep nesting, a member sent twice", func(n int) []byte {
		key := strings.Repeat("k", 16)
		depth := n / 20
		return []byte(strings.Repeat(`{"`+key+`":`, depth) + `{"a":0,"a":1}` + strings.Repeat("}", depth))
	}, "the member is sent twice"},
}

// bytesAllocated returns the fewest bytes one of a few runs of f allocated on the heap.
func bytesAllocated(f func()) uint64 {
	least := ^uint64(0)
	var before, after runtime.MemStats
	for range 3 {
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// TestCheckStrictJSONLinear: the memory checkStrictJSON allocates grows with its body's size,
// not with its square. A path string built for every member and array element copied the
// whole path above it, so a 1 MB body of a long name over a long array took tens of seconds.
// Measured in bytes allocated for a body ten times larger, which is exact and does not
// depend on the machine's speed: linear work allocates about ten times as much, quadratic a
// hundred.
func TestCheckStrictJSONLinear(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations; run without -race")
	}
	const small = 4 << 10
	for _, tc := range hostileStrictBodies {
		t.Run(tc.name, func(t *testing.T) {
			var got [2]uint64
			for i, n := range []int{small, 10 * small} {
				body := tc.body(n)
				err := checkStrictJSON(body, "the definition")
				if tc.problem == "" && err != nil || tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)) {
					t.Fatalf("checkStrictJSON(%d bytes) = %v; want %q", len(body), err, tc.problem)
				}
				// The body's size plus a little: a slice or a map grows by doubling.
				got[i] = bytesAllocated(func() { _ = checkStrictJSON(body, "the definition") }) + uint64(len(body))
			}
			if ratio := float64(got[1]) / float64(got[0]); ratio > 15 {
				t.Errorf("checking a body 10 times larger allocates %.0f times as much (%d bytes, then %d); want at most 15 times", ratio, got[0], got[1])
			}
		})
	}
}

// TestFoldSet: a foldSet finds a member name sent twice exactly as comparing it with every
// earlier name by strings.EqualFold does, and names the earlier one, also once it has
// switched to a map: past maxListedNames names it looks a name up instead of comparing it
// with all of them, which made an object of 100 000 members cost seconds of CPU to check.
func TestFoldSet(t *testing.T) {
	// Letters whose cases fold in more than pairs or outside ASCII: K, k and the Kelvin
	// sign; S, s and the long s; the three sigmas; dotted and dotless i; the three forms of
	// the DŽ digraph; ß, whose capital ẞ folds to it.
	alphabet := []rune("kK\u212AsS\u017FσςΣiIİıǄǅǆßẞéÉ0.")
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var s foldSet
		var names []string
		for i := range 4 * maxListedNames {
			var b strings.Builder
			for range 1 + rng.IntN(3) {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			name := b.String()
			want, wantSeen := "", false
			for _, e := range names {
				if strings.EqualFold(e, name) {
					want, wantSeen = e, true
					break
				}
			}
			got, seen := s.add(name)
			if got != want || seen != wantSeen {
				t.Fatalf("round %d, name %d: add(%q) = %q, %v after %q; want %q, %v", round, i, name, got, seen, names, want, wantSeen)
			}
			if !seen {
				names = append(names, name)
			}
		}
		if len(names) > maxListedNames && (s.set == nil || len(s.list) != 0) {
			t.Fatalf("round %d: after %d different names the set still compares them one by one (%d listed); want a map", round, len(names), len(s.list))
		}
	}
}

// TestCheckStrictJSONPaths: a problem names its member's path however deep it is and
// whether the object's names were compared one by one or looked up.
func TestCheckStrictJSONPaths(t *testing.T) {
	many := ""
	for i := range 2 * maxListedNames {
		many += fmt.Sprintf(`"m%d":0,`, i)
	}
	for _, tc := range []struct {
		name, body, want string
	}{
		{"in arrays", `{"a":[0,{"b":[1,{"x":1,"X":2}]}]}`, `"a[1].b[1].x": the member is sent twice in one object, as "x" and "X" (names match ignoring case): send it once`},
		{"looked up", `{"p":[{` + many + `"k":1,"q":{},"\u212A":2}]}`, `"p[0].k": the member is sent twice in one object, as "k" and "` + "\u212a" + `" (names match ignoring case): send it once`},
		{"looked up, same case", `{"p":{` + many + `"m3":1}}`, `"p.m3": the member is sent twice in one object: send it once`},
		{"a value after a deep one", `{"a":{"b":{"c":[[0]]}},"d":["x\ud800"]}`, `"d[0]" holds the escape \ud800`},
		{"a name in an array", `[0,{"\udc00":1}]`, `"[1]" holds the escape \udc00`},
		{"an empty name", `{"":{"x":0,"x":1}}`, `"x": the member is sent twice in one object: send it once`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkStrictJSON([]byte(tc.body), "the definition")
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("checkStrictJSON(%s) = %v; want %s", tc.body, err, tc.want)
			}
		})
	}
}

// BenchmarkCheckStrictJSON measures checkStrictJSON on 1 MB bodies of the shapes that made
// it quadratic, and on a usual subscription definition.
func BenchmarkCheckStrictJSON(b *testing.B) {
	bodies := []struct {
		name string
		body []byte
	}{{"definition", []byte(`{"properties":{"destination":{"endpointType":"WebHook","properties":{"endpointUrl":"https://example.com/hook","maxEventsPerBatch":10}},"filter":{"includedEventTypes":["a","b"],"advancedFilters":[{"operatorType":"StringIn","key":"data.a","values":["x","y"]}]},"retryPolicy":{"maxDeliveryAttempts":10,"eventTimeToLiveInMinutes":60},"labels":["l1","l2"]}}`)}}
	for _, h := range hostileStrictBodies {
		bodies = append(bodies, struct {
			name string
			body []byte
		}{h.name, h.body(1 << 20)})
	}
	for _, bb := range bodies {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(int64(len(bb.body)))
			b.ReportAllocs()
			for b.Loop() {
				_ = checkStrictJSON(bb.body, "the definition")
			}
		})
	}
}
