package bench

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/egridio/egrid/router"
)

// endToEnd publishes for the load phase, waits (bounded) until everything is delivered and
// reports delivered events/s from the first publish to the last delivery, against the same
// load generator posting single events straight to the sink. batch is the subscription's
// maxEventsPerBatch (0: batching off, held to 0.7 × the baseline; otherwise held to 100000
// events/s).
//
// The baseline runs in two halves of half the load phase each, one before egrid's run and one
// after it (with egrid's router closed, the disk synced and the heap collected), and reports
// their mean: egrid's run lasts from the first publish to the last delivery, several times
// the load phase, and a baseline measured in one 5 s stretch before it read anywhere from
// 38 800 to 58 900 events/s in runs minutes apart on a shared 2-core machine.
func endToEnd(batch int) func(context.Context, *Runner, Scenario) ([]Result, error) {
	return func(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
		sink, err := startSink()
		if err != nil {
			return nil, err
		}
		defer sink.close()
		single := eventBody(1, "e", "/bench")
		var rawRPS float64
		var baseUse CPUUsage
		var baseEvents int64
		baseline := func(half int) error {
			settle()
			cpu, from := b.startCPU(), sink.requests.Load()
			l, err := b.load(ctx, fmt.Sprintf("baseline client→sink (%d/2)", half), sink.url+"/raw", single, b.opt.Duration/2)
			baseUse, baseEvents = baseUse.add(cpu.stop()), baseEvents+sink.requests.Load()-from
			rawRPS += l.rate() / 2
			return err
		}
		if err := baseline(1); err != nil {
			return nil, err
		}
		eg, err := b.startTopic(ctx, router.Config{MaxInFlight: 64})
		if err != nil {
			return nil, err
		}
		defer eg.close()
		spec := router.SubscriptionSpec{Destination: router.WebHook(sink.url + "/hook")}
		spec.Destination.Properties.MaxEventsPerBatch = batch
		if err := eg.r.CreateSubscription(ctx, "bench", "sink", spec); err != nil {
			return nil, err
		}
		body := eventBody(100, "e", "/bench")
		tables := eg.st.TableWrites()
		cpu := b.startCPU()
		start := time.Now()
		l, err := b.load(ctx, "egrid publish (100/request)", eg.publishURL(), body, b.opt.Duration)
		if err != nil {
			cpu.stop()
			return nil, err
		}
		published := l.ok * 100
		if total := eg.r.Metrics().Snapshot().Sum("PublishSuccessCount", "bench"); total > 0 {
			published = total
		}
		last := b.drain(ctx, "delivering", sink.events.Load, published, 120*time.Second)
		use := cpu.stop()
		delivered := sink.events.Load()
		rate := float64(delivered) / last.Sub(start).Seconds()
		tables = eg.st.TableWrites().Sub(tables)
		eg.close()
		if err := baseline(2); err != nil {
			return nil, err
		}
		res := Result{Scenario: s.Name, Metric: "end-to-end delivered", Value: rate, Unit: "events/s",
			Baseline: rawRPS, Ratio: rate / rawRPS, Target: s.Target}
		met := res.Ratio >= 0.7
		if batch > 0 {
			met = rate >= 100000
		}
		res.Met = &met
		if delivered < published {
			res.Note = fmt.Sprintf("only %d of %d delivered within the bound", delivered, published)
		}
		rows := append([]Result{res}, cpuRows(s.Name, use, delivered, baseUse, baseEvents, endToEndCPU)...)
		return append(rows, tableRow(s.Name, "delivered", tables, delivered)), nil
	}
}

// settle writes back what the file system holds dirty (sync(2)) and collects the garbage of
// what ran before, so a baseline that follows egrid's run does not pay for either.
func settle() {
	syncDisks()
	runtime.GC()
}

// fanout publishes to one topic with 100 filtered subscriptions and reports deliveries/s.
func fanout(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	sink, err := startSink()
	if err != nil {
		return nil, err
	}
	defer sink.close()
	eg, err := b.startTopic(ctx, router.Config{})
	if err != nil {
		return nil, err
	}
	defer eg.close()
	for i := range 100 {
		spec := router.SubscriptionSpec{Destination: router.WebHook(fmt.Sprintf("%s/hook/%d", sink.url, i))}
		spec.Destination.Properties.MaxEventsPerBatch = 100
		spec.Filter.SubjectBeginsWith = "/bench"
		spec.Filter.IncludedEventTypes = []string{"Bench.Event"}
		if err := eg.r.CreateSubscription(ctx, "bench", fmt.Sprintf("sub-%03d", i), spec); err != nil {
			return nil, err
		}
	}
	body := eventBody(100, "f", "/bench/x")
	start := time.Now()
	d := b.opt.Duration / 5
	l, err := b.load(ctx, "egrid publish (100/request)", eg.publishURL(), body, d)
	if err != nil {
		return nil, err
	}
	want := eg.r.Metrics().Snapshot().Sum("PublishSuccessCount", "bench") * 100
	if want == 0 {
		want = l.ok * 100 * 100 // 100 events per request, each to 100 subscriptions
	}
	last := b.drain(ctx, "delivering to 100", sink.events.Load, want, 120*time.Second)
	delivered := sink.events.Load()
	r := Result{Scenario: s.Name, Metric: "deliveries (100 subscriptions)", Value: float64(delivered) / last.Sub(start).Seconds(), Unit: "events/s", Target: s.Target}
	if delivered < want {
		r.Note = fmt.Sprintf("only %d of %d delivered within the bound", delivered, want)
	}
	return []Result{r}, nil
}

// isolation measures healthy deliveries/s to 50 endpoints while the other 50 of the topic's
// subscriptions fail, against the same setup with all 100 healthy.
func isolation(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	all, err := healthyRate(ctx, b, false)
	if err != nil {
		return nil, err
	}
	half, err := healthyRate(ctx, b, true)
	if err != nil {
		return nil, err
	}
	met := half >= 0.9*all
	return []Result{{
		Scenario: s.Name, Metric: "healthy deliveries, half failing", Value: half, Unit: "events/s",
		Baseline: all, Ratio: half / all, Target: s.Target, Met: &met,
	}}, nil
}

// healthyRate runs one half of the isolation scenario: 100 subscriptions, every odd one
// answered 500 when failing is set, and returns the healthy ones' delivered events/s.
func healthyRate(ctx context.Context, b *Runner, failing bool) (float64, error) {
	sink, err := startSink()
	if err != nil {
		return 0, err
	}
	defer sink.close()
	sink.status = func(path string) int {
		if failing && strings.HasPrefix(path, "/bad/") {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
	var healthy atomic.Int64
	sink.onEvent = func(path string, body []byte) {
		if strings.HasPrefix(path, "/good/") {
			healthy.Add(int64(countEvents(body)))
		}
	}
	eg, err := b.startTopic(ctx, router.Config{})
	if err != nil {
		return 0, err
	}
	defer eg.close()
	for i := range 100 {
		kind := "good"
		if i%2 == 1 {
			kind = "bad"
		}
		spec := router.SubscriptionSpec{Destination: router.WebHook(fmt.Sprintf("%s/%s/%d", sink.url, kind, i))}
		spec.Destination.Properties.MaxEventsPerBatch = 100
		if err := eg.r.CreateSubscription(ctx, "bench", fmt.Sprintf("sub-%03d", i), spec); err != nil {
			return 0, err
		}
	}
	body := eventBody(100, "i", "/bench")
	start := time.Now()
	if _, err := b.load(ctx, fmt.Sprintf("publish (failing=%v)", failing), eg.publishURL(), body, b.opt.Duration/5); err != nil {
		return 0, err
	}
	want := eg.r.Metrics().Snapshot().Sum("PublishSuccessCount", "bench") * 50
	last := b.drain(ctx, "healthy deliveries", healthy.Load, want, 120*time.Second)
	return float64(healthy.Load()) / last.Sub(start).Seconds(), nil
}
