package bench

import (
	"context"
	"fmt"

	"github.com/egridio/egrid/router"
)

// publish measures durable publish with perRequest events per request against the
// read+fsync baseline. With targetRate > 0 the row is met when egrid reaches targetRate
// events/s and 0.8 × the baseline.
//
// The two sides run in alternating rounds, as in ack, each for a fifth of the load phase: the
// disk's background work comes and goes over seconds (the baseline's own append rate fell by
// half after 5–6 s in some runs), so a baseline measured in one stretch of the run and egrid in
// the next compared the stretches as much as the two servers. Each side's rate is the mean of
// its rounds', which all last the same.
func publish(perRequest int, targetRate float64) func(context.Context, *Runner, Scenario) ([]Result, error) {
	return func(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
		body := eventBody(perRequest, "p", "/bench")
		base, err := startSyncServer(b.opt.Dir)
		if err != nil {
			return nil, err
		}
		defer base.close()
		eg, err := b.startTopic(ctx, router.Config{})
		if err != nil {
			return nil, err
		}
		defer eg.close()
		d := b.opt.Duration / publishRounds
		var baseRPS, rps float64
		for r := range publishRounds {
			one, err := b.load(ctx, fmt.Sprintf("baseline (read+fsync) (%d/%d)", r+1, publishRounds), base.url+"/", body, d)
			if err != nil {
				return nil, err
			}
			baseRPS += one / publishRounds
			if one, err = b.load(ctx, fmt.Sprintf("egrid publish (%d/%d)", r+1, publishRounds), eg.publishURL(), body, d); err != nil {
				return nil, err
			}
			rps += one / publishRounds
		}
		unit, value, baseline := "events/s", rps*float64(perRequest), baseRPS*float64(perRequest)
		if perRequest == 1 {
			unit = "requests/s"
		}
		r := Result{Scenario: s.Name, Metric: "durable publish", Value: value, Unit: unit, Baseline: baseline, Ratio: value / baseline, Target: s.Target,
			Note: fmt.Sprintf("baseline: the same requests into the read+fsync server, in %d alternating rounds", publishRounds)}
		if targetRate > 0 {
			met := value >= targetRate && r.Ratio >= 0.8
			r.Met = &met
		}
		return []Result{r}, nil
	}
}

// publishRounds is how many rounds of each side the publish scenarios alternate.
const publishRounds = 5
