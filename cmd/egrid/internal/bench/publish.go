package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/schemas"
)

// publish measures durable publish with perRequest events per request against the
// read+fsync and the read+validate+fsync baselines. With targetRate > 0 the row against the
// read+validate+fsync server is met when egrid reaches targetRate events/s and 0.8 × that
// server's rate: that server does the part of a publish no Event Grid service can skip
// (every event validated, a refused body answered 400), where the read+fsync server accepts
// any bytes: against it, validation, which takes about as much CPU per event as the whole of
// that server, counted as egrid's overhead (README, Benchmarks).
//
// The two sides run in alternating rounds, as in ack, each for a fifth of the load phase: the
// disk's background work comes and goes over seconds (the baseline's own append rate fell by
// half after 5–6 s in some runs), so a baseline measured in one stretch of the run and egrid in
// the next compared the stretches as much as the two servers. Each side's rate is the mean of
// its rounds', which all last the same; the row's note gives each side's slowest and fastest
// round. Two more rows give each side's CPU per acknowledged event over its rounds (see
// [cpuRows]): the baseline's rate follows how long the disk takes to sync (its fsyncs carry
// up to a megabyte each at 100 events per request), egrid's the CPU it spends per event, so
// the CPU rows compare the work each side does where the rate's ratio also compares the disk
// with the CPU.
//
// A third side runs in the same rounds: the read+validate+fsync server, which decodes each
// body with egrid's own decoder (every event validated and its Raw built, as egrid must)
// before it appends it. The read+fsync server does none of that, so its ratio holds egrid's
// validation against it too; the rows against the validating server, which carry the
// target, say what egrid spends beyond validating, its store and its plumbing.
func publish(perRequest int, targetRate float64) func(context.Context, *Runner, Scenario) ([]Result, error) {
	return func(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
		body := eventBody(perRequest, "p", "/bench")
		base, err := startSyncServer(b.opt.Dir, nil)
		if err != nil {
			return nil, err
		}
		defer base.close()
		val, err := startSyncServer(b.opt.Dir, validateEventGrid)
		if err != nil {
			return nil, err
		}
		defer val.close()
		eg, err := b.startTopic(ctx, router.Config{})
		if err != nil {
			return nil, err
		}
		defer eg.close()
		d := b.opt.Duration / publishRounds
		var egRounds, baseRounds, valRounds rounds
		var use, baseUse, valUse CPUUsage
		// round loads one side for d and adds its rate and CPU to that side's totals.
		round := func(r int, name, url string, rs *rounds, u *CPUUsage) error {
			cpu := b.startCPU()
			one, err := b.load(ctx, fmt.Sprintf("%s (%d/%d)", name, r+1, publishRounds), url, body, d)
			*u = u.add(cpu.stop())
			if err != nil {
				return err
			}
			rs.add(one, perRequest)
			return nil
		}
		warm, err := b.warmUp(ctx, body, eg.publishURL(), base.url+"/", val.url+"/")
		if err != nil {
			return nil, err
		}
		tables := eg.st.TableWrites()
		for r := range publishRounds {
			if err := round(r, "baseline (read+fsync)", base.url+"/", &baseRounds, &baseUse); err != nil {
				return nil, err
			}
			if err := round(r, "egrid publish", eg.publishURL(), &egRounds, &use); err != nil {
				return nil, err
			}
			if err := round(r, "baseline (read+validate+fsync)", val.url+"/", &valRounds, &valUse); err != nil {
				return nil, err
			}
		}
		tables = eg.st.TableWrites().Sub(tables)
		unit, value, baseline := "events/s", egRounds.mean(), baseRounds.mean()
		if perRequest == 1 {
			unit = "requests/s"
		}
		r := Result{Scenario: s.Name, Metric: "durable publish", Value: value, Unit: unit, Baseline: baseline, Ratio: value / baseline,
			Note: fmt.Sprintf("baseline: the same requests into the read+fsync server, in %d alternating rounds; rounds: egrid %s, baseline %s %s; after a warm-up of %d requests per side, egrid's at %s %s",
				publishRounds, egRounds.spread(), baseRounds.spread(), unit, warm.ok, formatValue(warm.rate()*float64(perRequest), unit), unit)}
		v := Result{Scenario: s.Name, Metric: "durable publish, against read+validate+fsync", Value: value, Unit: unit, Baseline: valRounds.mean(),
			Note: fmt.Sprintf("baseline: the same requests into a read+fsync server that first decodes each body with egrid's decoder, in the same rounds; rounds: %s %s",
				valRounds.spread(), unit)}
		if v.Baseline > 0 {
			v.Ratio = value / v.Baseline
		}
		if targetRate > 0 {
			met := value >= targetRate && v.Ratio >= 0.8
			v.Target, v.Met = s.Target, &met
		}
		rows := append([]Result{r}, cpuRows(s.Name, use, egRounds.events, baseUse, baseRounds.events, publishCPU)...)
		rows = append(rows, v)
		rows = append(rows, cpuRows(s.Name, use, egRounds.events, valUse, valRounds.events, publishValidatingCPU)...)
		return append(rows, tableRow(s.Name, "published", tables, egRounds.events)), nil
	}
}

// publishWarmupBytes is how much of the publish scenarios' body each side is sent before its
// rounds are measured, egrid first and for at most half the load phase, then each baseline as
// many requests as egrid took. A store just opened pays for its first memory: pebble
// allocates its memtables fresh, doubling from 256 KiB to 64 MiB, and recycles one at a
// time, so the first ~250 MB written touch pages the process never had, one page fault per
// 4 KiB (`perf record -e page-faults` of `--scenario publish100`, 2026-11-27: 42 000 in the
// memtable's inserts in egrid's first round, 3 500 in its second, none after), and egrid's
// first round ran at about half the rate of its others. A server pays that once after it
// starts; the rounds measure the rate it keeps, and the row's note gives the warm-up's.
const publishWarmupBytes = 320 << 20

// warmUp sends egrid's publish URL publishWarmupBytes of body (for at most half the load
// phase), then each baseline URL as many requests, and returns egrid's warm-up.
func (b *Runner) warmUp(ctx context.Context, body []byte, egrid string, baselines ...string) (loaded, error) {
	n := int64(publishWarmupBytes / len(body))
	warm, err := b.loadUpTo(ctx, "egrid warm-up", egrid, body, b.opt.Duration/2, n)
	if err != nil {
		return loaded{}, err
	}
	for i, url := range baselines {
		if _, err := b.loadUpTo(ctx, fmt.Sprintf("baseline warm-up (%d/%d)", i+1, len(baselines)), url, body, b.opt.Duration/2, warm.ok); err != nil {
			return loaded{}, err
		}
	}
	settle()
	return warm, nil
}

// validateEventGrid is the read+validate+fsync server's check: egrid's decoder, which
// validates every event and builds its Raw.
func validateEventGrid(body []byte) error {
	_, err := schemas.DecodeEventGrid(body, "/bench/validating-baseline", schemas.ClassicLimits)
	return err
}

// publishRounds is how many rounds of each side the publish scenarios alternate.
const publishRounds = 5

// rounds collects one side's rounds of a publish scenario.
type rounds struct {
	rates  []float64 // events/s of each round
	events int64     // events acknowledged in all
}

func (r *rounds) add(l loaded, perRequest int) {
	r.rates = append(r.rates, l.rate()*float64(perRequest))
	r.events += l.ok * int64(perRequest)
}

// mean is the mean of the rounds' rates: each lasts the same.
func (r *rounds) mean() float64 {
	if len(r.rates) == 0 {
		return 0
	}
	var sum float64
	for _, v := range r.rates {
		sum += v
	}
	return sum / float64(len(r.rates))
}

// spread is the slowest and fastest round's rate, "398010–452112".
func (r *rounds) spread() string {
	if len(r.rates) == 0 {
		return "none"
	}
	return formatValue(slices.Min(r.rates), "events/s") + "–" + formatValue(slices.Max(r.rates), "events/s")
}
