package bench

import (
	"encoding/json"
	"slices"
	"testing"
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

func TestSentTimes(t *testing.T) {
	body := []byte(`[{"id":"l-1","data":{"pad":"xx","sent":1764171234000000001}},` +
		`{"id":"l-2","data":{"sent":42,"pad":"yy"}},{"id":"l-3","data":{"sent":"late"}}]`)
	var got []int64
	for sent := range sentTimes(body) {
		got = append(got, sent)
	}
	if want := []int64{1764171234000000001, 42}; !slices.Equal(got, want) {
		t.Errorf("sentTimes = %v, want %v", got, want)
	}
	for range sentTimes(body) {
		break // stopping early must not panic
	}
}
