package bench

import (
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestCountEvents(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"one object", `{"id":"1"}`, 1},
		{"empty array", `[]`, 0},
		{"bench events", string(eventBody(3, "e", "/bench")), 3},
		{"nested objects and arrays", ` [{"a":{"b":[{},{}]}},{"c":[1,2]}] `, 2},
		{"brackets in strings", `[{"s":"[{\"x\":{}}]"},{"t":"}]"}]`, 2},
		{"escaped quote", `[{"s":"\"{"},{}]`, 2},
		{"escaped backslash before the closing quote", `[{"s":"a\\"},{"t":"\\\\"},{"u":"\\\"{"}]`, 3},
		{"unterminated string", `[{"s":"{{{`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := countEvents([]byte(tc.body)); got != tc.want {
				t.Errorf("countEvents(%s) = %d, want %d", tc.body, got, tc.want)
			}
			var evs []json.RawMessage
			if tc.body[0] == ' ' || tc.body[0] == '[' {
				if err := json.Unmarshal([]byte(tc.body), &evs); err == nil && len(evs) != tc.want {
					t.Errorf("encoding/json reads %d elements, the test wants %d", len(evs), tc.want)
				}
			}
		})
	}
}

func TestLatencyMarks(t *testing.T) {
	body := []byte(`[{"id":"l-1","data":{"pad":"xx","n":1,"sent":1764171234000000001}},` +
		`{"id":"l-2","data":{"n":"two","pad":"yy","n":2,"sent":42}},{"id":"l-3","data":{"n":3,"sent":"late"}}]`)
	var got []mark
	for m := range latencyMarks(body) {
		got = append(got, m)
	}
	if want := []mark{{1, 1764171234000000001}, {2, 42}}; !slices.Equal(got, want) {
		t.Errorf("latencyMarks = %v, want %v", got, want)
	}
	for range latencyMarks(body) {
		break // stopping early must not panic
	}
}

func TestAfterAnswer(t *testing.T) {
	answered := make([]atomic.Int64, 4)
	answered[0].Store(1000)
	answered[2].Store(5000) // request 1 failed: no answer; request 3 was never sent
	arrivals := []arrival{{n: 2, at: 4000}, {n: 0, at: 3500}, {n: 1, at: 9000}, {n: 7, at: 1}, {n: -1, at: 1}}
	if got, want := afterAnswer(arrivals, answered), []time.Duration{-1000, 2500}; !slices.Equal(got, want) {
		t.Errorf("afterAnswer = %v, want %v", got, want)
	}
}
