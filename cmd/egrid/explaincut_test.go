package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
)

// An attempt a shutdown cut is printed as an attempt, and the last line counts it apart: the
// "N of M" is what counted against maxDeliveryAttempts, never more attempts than the limit.
func TestExplainPrintsACutAttemptApart(t *testing.T) {
	var buf bytes.Buffer
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	printExplanation(env{Stdout: &buf}, &router.Explanation{
		EventID: "s5", Topic: "orders", Subscription: "sub", State: router.EventDelivered,
		AttemptsMade: 1, MaxDeliveryAttempts: 1, CutAttempts: 1,
		Attempts: []router.ExplainedAttempt{
			{Attempt: 1, Time: at, Duration: 5 * time.Second, Outcome: "Canceled", Decision: "Retry", Rule: "Stopped",
				Response:    "the subscription stopped before the destination answered",
				Explanation: "Canceled: cut when the subscription stopped (a shutdown, an update, a move to another node) before the answer; not counted against maxDeliveryAttempts, attempted again when it runs again"},
			{Attempt: 1, Time: at.Add(time.Minute), Outcome: "Delivered", StatusCode: 200, Explanation: "delivered"},
		},
	})
	out := buf.String()
	for _, want := range []string{
		"#1   12:00:00  5s       Canceled           -    → Canceled: cut when the subscription stopped",
		"#1   12:01:00  0s       Delivered          200  → delivered",
		"state      delivered after 1 of 1 attempts (1 more cut when the subscription stopped, not counted)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain:\n%s\nwant a line with %q", out, want)
		}
	}
}
