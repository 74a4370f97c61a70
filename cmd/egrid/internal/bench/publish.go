package bench

import (
	"context"

	"github.com/egridio/egrid/router"
)

// publish measures durable publish with perRequest events per request against the
// read+fsync baseline. With targetRate > 0 the row is met when egrid reaches targetRate
// events/s and 0.8 × the baseline.
func publish(perRequest int, targetRate float64) func(context.Context, *Runner, Scenario) ([]Result, error) {
	return func(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
		body := eventBody(perRequest, "p", "/bench")
		base, err := startSyncServer(b.opt.Dir)
		if err != nil {
			return nil, err
		}
		baseRPS, err := b.load(ctx, "baseline (read+fsync)", base.url+"/", body, b.opt.Duration)
		base.close()
		if err != nil {
			return nil, err
		}
		eg, err := b.startTopic(ctx, router.Config{})
		if err != nil {
			return nil, err
		}
		defer eg.close()
		rps, err := b.load(ctx, "egrid publish", eg.publishURL(), body, b.opt.Duration)
		if err != nil {
			return nil, err
		}
		unit, value, baseline := "events/s", rps*float64(perRequest), baseRPS*float64(perRequest)
		if perRequest == 1 {
			unit = "requests/s"
		}
		r := Result{Scenario: s.Name, Metric: "durable publish", Value: value, Unit: unit, Baseline: baseline, Ratio: value / baseline, Target: s.Target}
		if targetRate > 0 {
			met := value >= targetRate && r.Ratio >= 0.8
			r.Met = &met
		}
		return []Result{r}, nil
	}
}
