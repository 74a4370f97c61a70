package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
)

// The last line of a dead-lettered event whose record was dropped unwritten says it was
// dropped after being dead-lettered, not that it had no dead-letter destination; the drop's
// step prints with its why.
func TestExplainPrintsADroppedDeadLetter(t *testing.T) {
	var buf bytes.Buffer
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	printExplanation(env{Stdout: &buf}, &router.Explanation{
		EventID: "m1", Topic: "orders", Subscription: "billing", State: router.EventDropped,
		Reason: "DeadLetterDestinationUnavailable", AttemptsMade: 1, MaxDeliveryAttempts: 30,
		Attempts: []router.ExplainedAttempt{
			{Attempt: 1, Time: at, Outcome: "BadRequest", StatusCode: 400, Decision: "DeadLetter", Explanation: "400: never retried → DeadLetter (UndeliverableDueToHttpBadRequest)"},
			{Attempt: 1, Time: at.Add(4 * time.Hour), Step: router.StepDeadLetterDropped, Decision: "Drop",
				Explanation: "the dead-letter record was dropped unwritten: the dead-letter destination was unavailable for 4h0m0s"},
		},
	})
	out := buf.String()
	if !strings.Contains(out, "DeadLetterDropped → the dead-letter record was dropped unwritten: the dead-letter destination was unavailable for 4h0m0s") ||
		!strings.Contains(out, "state      dropped: DeadLetterDestinationUnavailable after 1 attempts (dead-lettered, then its record was dropped unwritten") ||
		strings.Contains(out, "no dead-letter destination") {
		t.Errorf("explain:\n%s\nwant the drop step and a last line saying the dead letter was dropped", out)
	}
}
