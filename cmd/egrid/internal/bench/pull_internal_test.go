package bench

import (
	"slices"
	"testing"
)

// TestLockTokensReadsAReceiveAnswer checks the load generator's token picker on the shape
// router/httpapi answers.
func TestLockTokensReadsAReceiveAnswer(t *testing.T) {
	raw := []byte(`{"value":[{"brokerProperties":{"lockToken":"a1","deliveryCount":1},"event":{"id":"x","data":{"pad":"\"q\""}}},` +
		`{"brokerProperties":{"lockToken":"b-2","deliveryCount":3},"event":{"id":"y"}}]}`)
	if got := lockTokens(raw); !slices.Equal(got, []string{"a1", "b-2"}) {
		t.Errorf("lockTokens = %q, want a1, b-2", got)
	}
	if got := lockTokens([]byte(`{"value":[]}`)); len(got) != 0 {
		t.Errorf("lockTokens of an empty answer = %q", got)
	}
}
