package retry_test

import (
	"fmt"
	"time"

	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/schemas"
)

// A subscription with a 30-minute time to live whose endpoint keeps answering 500: the
// documented "only ~6 attempts fit in 30 minutes" (eventgrid-behaviour.md §6.2).
func ExamplePolicy_AfterFailure() {
	p := &retry.Policy{EventTimeToLive: 30 * time.Minute, MaxDeliveryAttempts: 10, DeadLetter: true, NoJitter: true}
	if err := p.Validate(); err != nil {
		panic(err)
	}
	publish := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	now := publish
	for attempts := 1; ; attempts++ {
		if end, expired := p.AtDue(publish, now); expired {
			fmt.Printf("+%s %s\n", now.Sub(publish), end)
			return
		}
		d := p.AfterFailure(retry.Failure{Outcome: schemas.GenericError, StatusCode: 500}, attempts, "event-1", publish, now)
		fmt.Printf("+%s attempt %d failed: %s\n", now.Sub(publish), attempts, d)
		if d.Ends() {
			return
		}
		now = d.At
	}
	// Output:
	// +0s attempt 1 failed: Retry at 2024-05-01T12:00:10Z
	// +10s attempt 2 failed: Retry at 2024-05-01T12:00:40Z
	// +40s attempt 3 failed: Retry at 2024-05-01T12:01:40Z
	// +1m40s attempt 4 failed: Retry at 2024-05-01T12:06:40Z
	// +6m40s attempt 5 failed: Retry at 2024-05-01T12:16:40Z
	// +16m40s attempt 6 failed: Retry at 2024-05-01T12:46:40Z
	// +46m40s DeadLetter (TimeToLiveExceeded)
}

// The probation cycle of one endpoint (SPEC §2.2).
func ExampleProbation() {
	var p retry.Probation
	t := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

	p.Failed(schemas.NotFound, t, 1)
	fmt.Println(p.State(t), p.Cause(), p.ClientError(), p.Until().Sub(t))

	t = p.Until()
	fmt.Println(p.State(t))
	p.ProbeStarted(t)
	fmt.Println(p.State(t))
	p.Succeeded()
	fmt.Println(p.State(t))
	// Output:
	// OnProbation NotFound true 5m0s
	// AwaitingProbe
	// ProbeInFlight
	// Healthy
}
