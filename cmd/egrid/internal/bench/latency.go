package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store/disk"
)

// latency publishes single events at Rate/s for the load phase and reports publish→delivery
// percentiles (the p99 held to the scenario's target) and the time to the durable ack, against
// the same paced requests into the read+fsync server.
func latency(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	return pacedLatency(ctx, b, s)
}

// ack is latency with no subscription: the time to the durable ack alone, held to 1.5 × the
// read+fsync server's p99 at the same pace. Beside latency it separates what the journal
// costs an acknowledgement from what delivering every event on the same cores costs it.
//
// The two sides run in alternating rounds (baseline, egrid, baseline, ...), each taking the
// same share of every stretch of the run: a p99 is made by the slowest hundredth of the
// requests, and the disk's background work (the writeback of what the scenarios before it
// wrote, pebble's compactions) comes and goes over seconds, so a baseline measured in one
// stretch and egrid in the next compared the stretches as much as the two.
func ack(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	base, err := startSyncServer(b.opt.Dir, nil)
	if err != nil {
		return nil, err
	}
	defer base.close()
	eg, err := b.startTopic(ctx, router.Config{MaxInFlight: 64})
	if err != nil {
		return nil, err
	}
	defer eg.close()
	pad := strconv.Quote(strings.Repeat("x", 820)) // quoted once, not per request
	total := int(float64(b.opt.Rate) * b.opt.Duration.Seconds())
	per := max(1, total/ackRounds)
	var baseAck, ack []time.Duration
	syncs0 := eg.st.LogSyncs()
	for r := range ackRounds {
		body := func(i int) string {
			return fmt.Sprintf(`[{"id":"a-%d-%d","subject":"/bench","eventType":"Bench.Event","eventTime":"2026-01-01T00:00:00Z","data":{"pad":%s}}]`, r, i, pad)
		}
		baseAck = append(baseAck, b.paced(ctx, fmt.Sprintf("baseline read+fsync (%d/%d)", r+1, ackRounds), base.url+"/", per, body)...)
		ack = append(ack, b.paced(ctx, fmt.Sprintf("egrid at %d/s (%d/%d)", b.opt.Rate, r+1, ackRounds), eg.publishURL(), per, body)...)
	}
	syncs := eg.st.LogSyncs().Sub(syncs0)
	slices.Sort(baseAck)
	slices.Sort(ack)
	ack50, ack99 := percentile(ack, 0.50), percentile(ack, 0.99)
	base50, base99 := percentile(baseAck, 0.50), percentile(baseAck, 0.99)
	met := ack99/base99 <= ackTarget
	return []Result{
		{Scenario: s.Name, Metric: "publish→durable ack p50", Value: ack50, Unit: "ms", Baseline: base50, Ratio: ack50 / base50},
		{Scenario: s.Name, Metric: "publish→durable ack p99", Value: ack99, Unit: "ms", Baseline: base99, Ratio: ack99 / base99,
			Target: s.Target, Met: &met,
			Note: fmt.Sprintf("baseline: the same paced requests into the read+fsync server, in %d alternating rounds", ackRounds)},
		syncRow(s.Name, "", syncs, base.fsyncs()),
	}, nil
}

// ackRounds is how many rounds of each side the ack scenario alternates.
const ackRounds = 10

// forwardPath is the sink's path the read+fsync+deliver server delivers to.
const forwardPath = "/forward"

// pacedLatency runs latency, delivering every event to the sink.
//
// It has two baselines. The read+fsync server takes and journals the same paced requests;
// the read+fsync+deliver server also delivers each one to the same sink once it is synced
// (startForwardServer), which is the work egrid does in this scenario, so its rows (the
// acknowledgement's, held to 1.5 times its p50 and p99, delivery's and the CPU's) say what
// egrid's own overhead costs, where the read+fsync server's also count what delivering
// every event on the same two cores costs an acknowledgement (`ack` holds egrid to it with
// no subscription). Each baseline runs half before egrid's run and half after it, nearest
// egrid the delivering one, each half settled first (egrid's router closed, the disk synced
// and the heap collected), as many requests as egrid's in all. A disk's stalls come and go
// over seconds (README, Benchmarks: a shared VM's took 0.17 ms per 1 KB sync at the median
// and up to hundreds of milliseconds): a p99 is made by whichever stretch of the run
// catches one, so every side gets the same length of it.
func pacedLatency(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	sink, err := startSink()
	if err != nil {
		return nil, err
	}
	defer sink.close()
	var mu sync.Mutex
	var lat, fwdLat []time.Duration
	var arrivals []arrival
	sink.onEvent = func(path string, body []byte) {
		now := time.Now()
		mu.Lock()
		for m := range latencyMarks(body) {
			d := now.Sub(time.Unix(0, m.sent))
			if path == forwardPath {
				fwdLat = append(fwdLat, d)
				continue
			}
			lat = append(lat, d)
			arrivals = append(arrivals, arrival{n: m.n, at: now.UnixNano()})
		}
		mu.Unlock()
	}
	delivered := func() int64 { mu.Lock(); defer mu.Unlock(); return int64(len(lat)) }
	forwarded := func() int64 { mu.Lock(); defer mu.Unlock(); return int64(len(fwdLat)) }

	base, err := startSyncServer(b.opt.Dir, nil)
	if err != nil {
		return nil, err
	}
	defer base.close()
	fwd, err := startForwardServer(b.opt.Dir, sink.url+forwardPath)
	if err != nil {
		return nil, err
	}
	defer fwd.close()
	pad := strconv.Quote(strings.Repeat("x", 820)) // quoted once, not per request
	body := func(idPrefix string) func(i int) string {
		return func(i int) string {
			return fmt.Sprintf(`[{"id":"%s-%d","subject":"/bench","eventType":"Bench.Event","eventTime":"2026-01-01T00:00:00Z","data":{"pad":%s,"n":%d,"sent":%d}}]`, idPrefix, i, pad, i, time.Now().UnixNano())
		}
	}
	total := int(float64(b.opt.Rate) * b.opt.Duration.Seconds())
	var baseAck, fwdAck []time.Duration
	var baseUse, fwdUse CPUUsage
	baseline := func(half int) {
		settle()
		cpu := b.startCPU()
		baseAck = append(baseAck, b.paced(ctx, fmt.Sprintf("baseline read+fsync (%d/2)", half), base.url+"/", total/2, body(fmt.Sprintf("b%d", half)))...)
		baseUse = baseUse.add(cpu.stop())
	}
	forward := func(half int) {
		settle()
		cpu := b.startCPU()
		from := forwarded()
		fwdAck = append(fwdAck, b.paced(ctx, fmt.Sprintf("baseline read+fsync+deliver (%d/2)", half), fwd.url+"/", total/2, body(fmt.Sprintf("f%d", half)))...)
		b.drain(ctx, "baseline delivering", func() int64 { return forwarded() - from }, int64(total/2), 60*time.Second)
		fwdUse = fwdUse.add(cpu.stop())
	}
	baseline(1)
	forward(1)

	eg, err := b.startTopic(ctx, router.Config{MaxInFlight: forwardWorkers})
	if err != nil {
		return nil, err
	}
	defer eg.close()
	if err := eg.r.CreateSubscription(ctx, "bench", "sink", router.SubscriptionSpec{Destination: router.WebHook(sink.url + "/hook")}); err != nil {
		return nil, err
	}
	settle()
	syncs0 := eg.st.LogSyncs()
	cpu := b.startCPU()
	answered := make([]atomic.Int64, total) // when each request's answer came, unix ns
	ack := b.pacedAnswers(ctx, fmt.Sprintf("publishing at %d/s", b.opt.Rate), eg.publishURL(), total, body("l"), answered)
	b.drain(ctx, "delivering", delivered, int64(total), 60*time.Second)
	use := cpu.stop()
	syncs := eg.st.LogSyncs().Sub(syncs0)
	eg.close()
	forward(2)
	baseline(2)
	if n := fwd.fwd.failed.Load(); n > 0 {
		return nil, fmt.Errorf("the read+fsync+deliver baseline failed to deliver %d events", n)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		return nil, errors.New("nothing was delivered")
	}
	for _, d := range [][]time.Duration{lat, fwdLat, ack, baseAck, fwdAck} {
		slices.Sort(d)
	}
	p := func(d []time.Duration, q float64) float64 { return percentile(d, q) }
	p99 := p(lat, 0.99)
	met := p99 <= 8
	fwdNote := "baseline: the same paced requests into the read+fsync+deliver server, which delivers each to the sink once synced, half before egrid's run and half after it"
	rows := []Result{
		{Scenario: s.Name, Metric: "publish→delivery p50", Value: p(lat, 0.50), Unit: "ms", Baseline: p(fwdLat, 0.50)},
		{Scenario: s.Name, Metric: "publish→delivery p99", Value: p99, Unit: "ms", Baseline: p(fwdLat, 0.99), Target: "≤ 8 ms", Met: &met,
			Note: fwdNote},
		{Scenario: s.Name, Metric: "publish→delivery p999", Value: p(lat, 0.999), Unit: "ms", Baseline: p(fwdLat, 0.999),
			Note: fmt.Sprintf("%d events at %d/s; baseline %d", len(lat), b.opt.Rate, len(fwdLat))},
	}
	for i := range rows {
		if rows[i].Baseline > 0 {
			rows[i].Ratio = rows[i].Value / rows[i].Baseline
		}
	}
	rows = append(rows, ackRows(s.Name, "", ack, fwdAck, fwdNote)...)
	rows = append(rows, ackRows(s.Name, "read+fsync", ack, baseAck,
		"baseline: the same paced requests into the read+fsync server, which delivers nothing, half before egrid's run and half after it")...)
	rows = append(rows, syncRow(s.Name, "", syncs, fwd.fsyncs()), syncRow(s.Name, "read+fsync", syncs, base.fsyncs()))
	if leg := afterAnswer(arrivals, answered); len(leg) > 0 {
		rows = append(rows,
			Result{Scenario: s.Name, Metric: "answer→delivery p50", Value: percentile(leg, 0.50), Unit: "ms"},
			Result{Scenario: s.Name, Metric: "answer→delivery p99", Value: percentile(leg, 0.99), Unit: "ms",
				Note: "per event, its publisher's answer to its receipt: delivery alone, without the journal"})
	}
	return append(rows, cpuRows(s.Name, use, int64(len(lat)), fwdUse, int64(len(fwdLat)), latencyCPU)...), nil
}

// ackTarget is the durable acknowledgement's target in latency, against the
// read+fsync+deliver server, and in ack, against the read+fsync server: 1.5 times the
// baseline's.
const ackTarget = 1.5

// ackRows reports the durable acknowledgement's p50 and p99 against base, sorted. With
// against empty they are held to ackTarget; otherwise they name the baseline and hold
// nothing.
func ackRows(scenario, against string, ack, base []time.Duration, note string) []Result {
	ack50, ack99 := percentile(ack, 0.50), percentile(ack, 0.99)
	base50, base99 := percentile(base, 0.50), percentile(base, 0.99)
	suffix := ""
	if against != "" {
		suffix = ", against " + against
	}
	rows := []Result{
		{Scenario: scenario, Metric: "publish→durable ack p50" + suffix, Value: ack50, Unit: "ms", Baseline: base50},
		{Scenario: scenario, Metric: "publish→durable ack p99" + suffix, Value: ack99, Unit: "ms", Baseline: base99, Note: note},
	}
	for i := range rows {
		r := &rows[i]
		if r.Baseline > 0 {
			r.Ratio = r.Value / r.Baseline
		}
		if against == "" {
			met := r.Baseline > 0 && r.Ratio <= ackTarget
			r.Target, r.Met = fmt.Sprintf("≤ %.1f × baseline", ackTarget), &met
		}
	}
	return rows
}

// arrival is one event's receipt at the latency scenario's sink: its request number and
// when it arrived (unix nanoseconds).
type arrival struct{ n, at int64 }

// afterAnswer returns, sorted, each arrived event's time from its publisher's answer
// (answered[n], unix nanoseconds; 0 when the request failed) to its arrival at the sink. The
// leg after the answer is what delivery adds to a durable ack; an event can arrive before
// its answer reaches the publisher, so some may be negative.
func afterAnswer(arrivals []arrival, answered []atomic.Int64) []time.Duration {
	leg := make([]time.Duration, 0, len(arrivals))
	for _, a := range arrivals {
		if a.n < 0 || a.n >= int64(len(answered)) {
			continue
		}
		if at := answered[a.n].Load(); at != 0 {
			leg = append(leg, time.Duration(a.at-at))
		}
	}
	slices.Sort(leg)
	return leg
}

// mark is what the latency scenario puts in each event's data: its request's number and
// its send time (unix nanoseconds).
type mark struct{ n, sent int64 }

var (
	numberKey = []byte(`"n":`)
	sentKey   = []byte(`"sent":`)
)

// latencyMarks yields the mark of each event in a delivery body of the latency scenario:
// each "n" followed by a "sent". It finds them with bytes.Index rather than decoding the
// JSON: the scenario's events carry nothing else so named, and the sink shares the cores
// with egrid, so what it spends on each delivery is CPU egrid's acknowledgements and
// deliveries wait for (encoding/json took 5.4 µs per delivered event, this 0.2).
func latencyMarks(body []byte) iter.Seq[mark] {
	return func(yield func(mark) bool) {
		for {
			n, rest, ok := numberAfter(body, numberKey)
			if !ok {
				return
			}
			sent, rest, ok := numberAfter(rest, sentKey)
			if !ok {
				return
			}
			body = rest
			if !yield(mark{n: n, sent: sent}) {
				return
			}
		}
	}
}

// numberAfter finds key in body and reads the unsigned decimal right after it; it returns
// the number and the rest of body after its digits, or false when key is not there. A key
// not followed by a digit is skipped over.
func numberAfter(body, key []byte) (int64, []byte, bool) {
	for {
		i := bytes.Index(body, key)
		if i < 0 {
			return 0, nil, false
		}
		body = body[i+len(key):]
		n, digits := int64(0), 0
		for digits < len(body) && body[digits] >= '0' && body[digits] <= '9' {
			n = n*10 + int64(body[digits]-'0')
			digits++
		}
		if digits > 0 {
			return n, body[digits:], true
		}
	}
}

// percentile returns the p-th quantile of sorted durations in milliseconds (0 when empty).
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[min(len(sorted)-1, int(p*float64(len(sorted))))].Microseconds()) / 1000
}

// stallOver is the sync time the sync row counts as a stall: on this class of disk a 1 KB
// write and fdatasync takes a fraction of a millisecond, and a stall holds up every request
// in flight (one per sender), so ten of them in a run of 25 000 requests reach past its p99.
// It is a bound of pebble's buckets, so egrid's count is exact.
const stallOver = 5 * time.Millisecond

// syncRow reports how long each side's log syncs took over its measured requests: egrid's
// as pebble timed its write-ahead log's fdatasync (disk.Store.LogSyncs), the read+fsync
// server's from its own clock around each fsync. An acknowledgement waits for the sync after
// its write, so when both sides' ack tails sit far above their sync p99, the disk's stalls,
// not either server, made them.
func syncRow(scenario, against string, eg disk.SyncTimes, base []time.Duration) Result {
	slices.Sort(base)
	var baseOver int
	for _, d := range base {
		if d > stallOver {
			baseOver++
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	egSlowest := "none"
	if eg.Count > 0 {
		egSlowest = fmt.Sprintf("≤ %.1f ms", ms(eg.Quantile(1)))
	}
	baseSlowest := "none"
	var base99 float64
	if len(base) > 0 {
		baseSlowest = fmt.Sprintf("%.1f ms", ms(base[len(base)-1]))
		base99 = percentile(base, 0.99)
	}
	metric := "log sync p99"
	if against != "" {
		metric += ", against " + against
	}
	r := Result{Scenario: scenario, Metric: metric, Value: ms(eg.Quantile(0.99)), Unit: "ms", Baseline: base99,
		Note: fmt.Sprintf("egrid: %d syncs, %d over %.0f ms, slowest %s (pebble's buckets); baseline: %d fsyncs, %d over %.0f ms, slowest %s",
			eg.Count, eg.Over(stallOver), ms(stallOver), egSlowest, len(base), baseOver, ms(stallOver), baseSlowest)}
	if base99 > 0 {
		r.Ratio = r.Value / base99
	}
	return r
}
