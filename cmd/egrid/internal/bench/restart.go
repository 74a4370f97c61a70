package bench

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// restartSubscriptions is how many subscriptions share the restart scenario's parked events.
const restartSubscriptions = 1000

// restartDueNow is how many of each subscription's parked events are due when the router
// restarts; the others are due an hour later.
const restartDueNow = 5

// restart builds a disk store holding RestartParked events parked for retry across
// restartSubscriptions subscriptions of one topic (written straight through the store API: the
// journal holds RestartParked/restartSubscriptions events, every subscription parked every
// one of them after three failed attempts), then starts a router on it and measures how long
// until a publish is accepted, until the first due delivery arrives and until every due one
// has, with the peak live heap and resident memory meanwhile.
func restart(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	sink, err := startSink()
	if err != nil {
		return nil, err
	}
	defer sink.close()
	perSub := max(b.opt.RestartParked/restartSubscriptions, restartDueNow)
	total := perSub * restartSubscriptions
	b.runs++
	dir := filepath.Join(b.opt.Dir, fmt.Sprintf("store-%d", b.runs))
	defer os.RemoveAll(dir) // deferred first, so it runs after the store is closed
	if err := buildParkedStore(ctx, b, dir, sink.url, perSub); err != nil {
		return nil, err
	}

	heapBefore, rssBefore := memNow()
	peak := startMemSampler(10 * time.Millisecond)
	cpuBefore := cpuTime()
	began := time.Now()
	var firstAt atomic.Int64 // nanoseconds after began of the first delivery
	sink.onEvent = func(string, []byte) { firstAt.CompareAndSwap(0, int64(time.Since(began))) }
	st, err := disk.Open(dir, disk.Options{FdatasyncLog: b.opt.FdatasyncLog})
	if err != nil {
		peak.close()
		return nil, err
	}
	opened := time.Since(began)
	r, err := router.New(router.Config{InsecureDev: true, MaxSubscriptionsPerTopic: 1 << 20, SkipEndpointValidation: true},
		router.Deps{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		peak.close()
		st.Close()
		return nil, err
	}
	defer st.Close()
	defer r.Close(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		peak.close()
		return nil, err
	}
	srv := &http.Server{Handler: httpapi.New(r)}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/topics/bench/api/events"
	body := []byte(`[{"id":"after-restart","subject":"/bench","eventType":"Bench","eventTime":"2026-01-01T00:00:00Z","data":{}}]`)
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		peak.close()
		return nil, fmt.Errorf("publishing after the restart: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		peak.close()
		return nil, fmt.Errorf("publishing after the restart answered %s", resp.Status)
	}
	accepted := time.Since(began)

	// Due now: restartDueNow parked events of every subscription, plus the event just
	// published, once per subscription.
	due := int64(restartSubscriptions * (restartDueNow + 1))
	var all, cpu time.Duration
	stop := b.progress("restart: deliveries due now", func() string { return fmt.Sprintf("%d/%d", sink.events.Load(), due) })
	deadline := time.Now().Add(max(b.opt.Duration, 60*time.Second))
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if sink.events.Load() >= due {
			all = time.Since(began)
			cpu = cpuTime() - cpuBefore
			break
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	peakLive, peakRSS := peak.close()
	first := time.Duration(firstAt.Load())

	note := fmt.Sprintf("%d parked across %d subscriptions; store opened in %.0f ms", total, restartSubscriptions, float64(opened.Milliseconds()))
	ready := max(accepted, first)
	met := first > 0 && all > 0 && ready <= 10*time.Second
	if all == 0 {
		note += fmt.Sprintf("; only %d of %d due deliveries arrived", sink.events.Load(), due)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return []Result{
		{Scenario: s.Name, Metric: "restart until ready (publish accepted, first due delivery)", Value: ms(ready), Unit: "ms", Target: s.Target, Met: &met, Note: note},
		{Scenario: s.Name, Metric: "restart until a publish is accepted", Value: ms(accepted), Unit: "ms"},
		{Scenario: s.Name, Metric: "restart until the first due delivery", Value: ms(first), Unit: "ms"},
		{Scenario: s.Name, Metric: fmt.Sprintf("restart until all %d due deliveries", due), Value: ms(all), Unit: "ms"},
		{Scenario: s.Name, Metric: "CPU time (user+system) until all due deliveries", Value: ms(cpu), Unit: "ms"},
		{Scenario: s.Name, Metric: "peak live heap during restart (over the idle process)", Value: float64(peakLive - min(peakLive, heapBefore)), Unit: "bytes"},
		{Scenario: s.Name, Metric: "peak resident memory during restart (over the idle process)", Value: float64(peakRSS - min(peakRSS, rssBefore)), Unit: "bytes"},
	}, nil
}

// buildParkedStore writes the restart scenario's store in dir: topic "bench" with perSub
// events in its journal and restartSubscriptions webhook subscriptions to sinkURL, each with
// every event parked after three failed attempts, restartDueNow of them due at once.
func buildParkedStore(ctx context.Context, b *Runner, dir, sinkURL string, perSub int) error {
	st, err := disk.Open(dir, disk.Options{FdatasyncLog: b.opt.FdatasyncLog})
	if err != nil {
		return err
	}
	defer st.Close()
	r, err := router.New(router.Config{InsecureDev: true, MaxSubscriptionsPerTopic: 1 << 20, SkipEndpointValidation: true},
		router.Deps{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if _, err := r.CreateTopic(ctx, "bench", router.TopicSpec{}); err != nil {
		_ = r.Close(ctx)
		return err
	}
	var made atomic.Int64
	stop := b.progress("restart: creating subscriptions", func() string { return fmt.Sprintf("%d/%d", made.Load(), restartSubscriptions) })
	for i := range restartSubscriptions {
		if err := r.CreateSubscription(ctx, "bench", restartSubName(i), router.SubscriptionSpec{Destination: router.WebHook(sinkURL + "/restart")}); err != nil {
			stop()
			_ = r.Close(ctx)
			return err
		}
		made.Add(1)
	}
	stop()
	if err := r.Close(ctx); err != nil {
		return err
	}

	// The journal: perSub events of about 250 bytes.
	pad := strings.Repeat("x", 160)
	var raw bytes.Buffer
	raw.WriteByte('[')
	for i := range perSub {
		if i > 0 {
			raw.WriteByte(',')
		}
		fmt.Fprintf(&raw, `{"id":"parked-%07d","subject":"/bench/%d","eventType":"Bench","eventTime":"2026-01-01T00:00:00Z","data":{"pad":%q}}`, i, i, pad)
	}
	raw.WriteByte(']')
	evs, err := schemas.DecodeEventGrid(raw.Bytes(), "/topics/bench", schemas.ClassicLimits)
	if err != nil {
		return err
	}
	publish := time.Now().Add(-10 * time.Minute)
	var last uint64
	for from := 0; from < len(evs); from += 1000 {
		if last, err = st.Append(ctx, "bench", publish, evs[from:min(from+1000, len(evs))]); err != nil {
			return err
		}
	}

	// The parked events, written from two goroutines.
	var written atomic.Int64
	total := int64(perSub * restartSubscriptions)
	stop = b.progress("restart: parking events", func() string { return fmt.Sprintf("%d/%d", written.Load(), total) })
	defer stop()
	now := time.Now()
	later := now.Add(time.Hour)
	subs := make(chan int, restartSubscriptions)
	for i := range restartSubscriptions {
		subs <- i
	}
	close(subs)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			parked := make([]store.Parked, 0, 1000)
			for i := range subs {
				name := restartSubName(i)
				for from := 0; from < len(evs); from += cap(parked) {
					parked = parked[:0]
					for j := from; j < min(from+cap(parked), len(evs)); j++ {
						due := later
						if j%(perSub/restartDueNow) == 0 && j/(perSub/restartDueNow) < restartDueNow {
							due = now
						}
						parked = append(parked, store.Parked{
							Seq: uint64(j + 1), PublishTime: publish, Event: evs[j], Attempts: 3,
							FirstAttempt: publish, LastAttempt: now.Add(-time.Minute), NextDue: due,
							LastOutcome: schemas.Busy, LastStatus: http.StatusServiceUnavailable,
						})
					}
					if err := st.UpdateSubscription(ctx, "bench", name, store.Update{Cursor: last, Put: parked}); err != nil {
						errs <- err
						return
					}
					written.Add(int64(len(parked)))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func restartSubName(i int) string { return fmt.Sprintf("parked-%04d", i) }

// memSampler records the peak live heap and resident set size while it runs.
type memSampler struct {
	peakLive, peakRSS uint64
	stop, done        chan struct{}
}

func startMemSampler(every time.Duration) *memSampler {
	m := &memSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			metrics.Read(s)
			m.peakLive = max(m.peakLive, s[0].Value.Uint64())
			m.peakRSS = max(m.peakRSS, rssNow())
			select {
			case <-tick.C:
			case <-m.stop:
				return
			}
		}
	}()
	return m
}

// close stops the sampler and returns its peaks.
func (m *memSampler) close() (peakLive, peakRSS uint64) {
	close(m.stop)
	<-m.done
	return m.peakLive, m.peakRSS
}
