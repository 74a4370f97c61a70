package main

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
)

// explainCommand is `egrid explain`: an event's delivery history on one subscription.
func explainCommand(e env) *cli.Command {
	return &cli.Command{
		Name:  "explain",
		Usage: "show why an event went where it did: its attempts, the rule behind each next step, and where it ended",
		Description: `Shows an event's delivery history on one event subscription: when it was published, its
latest attempts (time, duration, outcome, status, an excerpt of the answer), the retry rule that
decided each next step, time held back by a probation, attempts and time to live left, and where
it ended: delivered, dead-lettered (with the object's key once written) or dropped, and why.
On a queue subscription it shows the event's pull steps instead: each receipt (with its
delivery count and lock expiry), acknowledgement, release, rejection, lock renewed or expired,
and the end.
Histories are kept for the event's life plus the server's history.retention (default 24h).

Example:
   egrid explain --topic orders --subscription billing --event-id 6f1c...`,
		Flags: append(serverFlags(), outputFlag(),
			&cli.StringFlag{Name: "topic", Usage: "topic name", Required: true},
			&cli.StringFlag{Name: "subscription", Aliases: []string{"s"}, Usage: "event subscription name", Required: true},
			&cli.StringFlag{Name: "event-id", Usage: "the event's id", Required: true}),
		Action: func(c *cli.Context) error {
			path := subscriptionPath(c.String("topic"), c.String("subscription")) + "/events/" + pathSegment(c.String("event-id"))
			var ex router.Explanation
			if err := newClient(c, e).do(http.MethodGet, path, nil, &ex); err != nil {
				return err
			}
			if c.String("output") == "json" {
				return printJSON(e.Stdout, ex)
			}
			printExplanation(e, &ex)
			return nil
		},
	}
}

func printExplanation(e env, ex *router.Explanation) {
	w := e.Stdout
	// The history is partly the destination's text (its answer) and the publisher's (the
	// event's id): every string goes through termSafe.
	fmt.Fprintf(w, "event %s on %s/%s\n", termSafe(ex.EventID), termSafe(ex.Topic), termSafe(ex.Subscription))
	fmt.Fprintf(w, "published  %s\n", ex.PublishTime.UTC().Format(time.RFC3339Nano))
	if ex.EarlierAttempts > 0 {
		fmt.Fprintf(w, "(%d earlier attempts not kept)\n", ex.EarlierAttempts)
	}
	for _, a := range ex.Attempts {
		if a.Step != "" { // a queue subscription's pull step; Attempt is the delivery count
			fmt.Fprintf(w, "#%-3d %s  %-12s → %s\n", a.Attempt, a.Time.UTC().Format(time.TimeOnly), termSafe(a.Step), termSafe(a.Explanation))
			continue
		}
		if a.NoAttempt {
			fmt.Fprintf(w, "%s  came due, no attempt: %s\n", a.Time.UTC().Format(time.TimeOnly), termSafe(a.Explanation))
			continue
		}
		status := "-"
		if a.StatusCode != 0 {
			status = fmt.Sprint(a.StatusCode)
		}
		fmt.Fprintf(w, "#%-3d %s  %-8s %-18s %-4s → %s\n", a.Attempt, a.Time.UTC().Format(time.TimeOnly),
			a.Duration.Round(time.Millisecond), termSafe(a.Outcome), status, termSafe(a.Explanation))
		if a.HeldBack > 0 {
			note := "held back %s past its due time (probation or the in-flight limit)\n"
			if a.Probe {
				note = "held back %s past its due time by a probation; sent as the probe\n"
			}
			fmt.Fprintf(w, "     "+note, a.HeldBack.Round(time.Millisecond))
		}
		if a.Response != "" {
			fmt.Fprintf(w, "     response: %s\n", termSafe(a.Response))
		}
	}
	// Attempts a stop cut are not counted in AttemptsMade nor against the limit: told apart.
	cut := ""
	if ex.CutAttempts > 0 {
		cut = fmt.Sprintf(" (%d more cut when the subscription stopped, not counted)", ex.CutAttempts)
	}
	var end string
	switch ex.State {
	case router.EventRetrying:
		end = fmt.Sprintf("retrying: next attempt %s; %d of %d attempts left%s, time to live left %s",
			ex.NextAttempt.UTC().Format(time.RFC3339), ex.AttemptsLeft, ex.MaxDeliveryAttempts, cut, ex.TimeToLiveLeft.Round(time.Second))
	case router.EventDelivered:
		end = fmt.Sprintf("delivered after %d of %d attempts%s", ex.AttemptsMade, ex.MaxDeliveryAttempts, cut)
	case router.EventDeadLettered:
		obj := "not written yet (waiting in the outbox)"
		switch {
		case ex.DeadLetterObject != "":
			obj = termSafe(ex.DeadLetterObject)
		case ex.DeadLetterSearch != "":
			obj = termSafe(ex.DeadLetterSearch)
		}
		end = fmt.Sprintf("dead-lettered: %s after %d attempts%s; object %s", termSafe(string(ex.Reason)), ex.AttemptsMade, cut, obj)
	case router.EventDropped:
		why := "no dead-letter destination"
		if n := len(ex.Attempts); n > 0 && ex.Attempts[n-1].Step == router.StepDeadLetterDropped {
			why = "dead-lettered, then its record was dropped unwritten: see the last step"
		}
		end = fmt.Sprintf("dropped: %s after %d attempts%s (%s)", termSafe(string(ex.Reason)), ex.AttemptsMade, cut, why)
	case router.EventInFlight:
		end = fmt.Sprintf("in flight: attempt %d of %d started %s, not answered yet; time to live left %s",
			ex.AttemptsMade+1, ex.MaxDeliveryAttempts, ex.AttemptStarted.UTC().Format(time.RFC3339), ex.TimeToLiveLeft.Round(time.Second))
	case router.EventPending:
		end = fmt.Sprintf("pending: taken in, waiting for its next attempt (behind other events, the in-flight limit or a probation); %d of %d attempts left, time to live left %s",
			ex.AttemptsLeft, ex.MaxDeliveryAttempts, ex.TimeToLiveLeft.Round(time.Second))
	case router.EventLocked:
		end = fmt.Sprintf("locked by a consumer: delivery %d of %d, time to live left %s",
			ex.AttemptsMade, ex.MaxDeliveryAttempts, ex.TimeToLiveLeft.Round(time.Second))
	case router.EventAvailable:
		from := "now"
		if !ex.NextAttempt.IsZero() {
			from = "from " + ex.NextAttempt.UTC().Format(time.RFC3339)
		}
		end = fmt.Sprintf("available to receive %s: %d of %d deliveries left, time to live left %s",
			from, ex.AttemptsLeft, ex.MaxDeliveryAttempts, ex.TimeToLiveLeft.Round(time.Second))
	default:
		end = termSafe(strings.ToLower(string(ex.State)))
	}
	fmt.Fprintf(w, "state      %s\n", end)
}
