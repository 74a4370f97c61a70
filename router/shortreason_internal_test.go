package router

import (
	"fmt"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// TestShortReasonCountsEveryProblem: the shortened reason a poisoned broker message carries
// counts every problem of its payload, not only those the decoder lists: a payload of 5 000
// bad events said "and 19 more problems".
func TestShortReasonCountsEveryProblem(t *testing.T) {
	var b strings.Builder
	b.WriteByte('[')
	for i := range 5000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"e%d","subject":"/s","eventType":"T","eventTime":"x","data":{}}`, i)
	}
	b.WriteByte(']')
	_, err := schemas.DecodeEventGrid([]byte(b.String()), "t", schemas.Limits{})
	if err == nil {
		t.Fatal("5 000 events with a bad eventTime decoded")
	}
	if got := shortReason(err); !strings.Contains(got, "and 4999 more problems") {
		t.Errorf("short reason %q; want it to count the 4999 problems after the first", got)
	}
}
