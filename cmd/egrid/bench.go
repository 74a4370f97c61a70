package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store/disk"
)

// Scenario names of `egrid bench` (issue 7's list).
var benchScenarios = []string{"publish100", "publish1", "e2e1", "e2e100", "latency", "fanout", "idle", "isolation"}

func benchCommand(e env) *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure egrid against this machine's own limits, side by side, in one run",
		Description: `Starts, in this process and on 127.0.0.1 only, a sink that counts and answers 200,
an egrid router on the embedded store in a temporary directory, and a load generator. Each
scenario also measures its baseline in the same run — the same load generator posting the same
bodies straight to the sink, or into a minimal server that only reads and syncs them to disk —
because shared machines drift and only same-run ratios mean something.

Scenarios: publish100 (durable publish, 100 × 1 KB per request), publish1 (single-event
requests), e2e1 (publish to delivery, batching off), e2e100 (maxEventsPerBatch 100), latency
(publish→delivery p50/p99/p999 at a fixed rate), fanout (100 filtered subscriptions), idle
(memory per idle subscription), isolation (half of 100 endpoints failing).`,
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "scenario", Usage: "scenarios to run (default all): " + strings.Join(benchScenarios, ", ")},
			&cli.DurationFlag{Name: "duration", Usage: "load phase of each measurement", Value: 5 * time.Second},
			&cli.IntFlag{Name: "concurrency", Usage: "load generator connections", Value: 64},
			&cli.IntFlag{Name: "rate", Usage: "events/s of the latency scenario", Value: 5000},
			&cli.IntFlag{Name: "idle-subscriptions", Usage: "subscriptions of the idle scenario", Value: 10000},
			&cli.StringFlag{Name: "dir", Usage: "directory for the stores (default: a temporary directory)"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the whole run to this file (go tool pprof)"},
			outputFlag(),
		},
		Action: func(c *cli.Context) error {
			scen := c.StringSlice("scenario")
			if len(scen) == 0 {
				scen = benchScenarios
			}
			for _, s := range scen {
				if !slices.Contains(benchScenarios, s) {
					return cli.Exit(fmt.Sprintf("unknown scenario %q: use %s", s, strings.Join(benchScenarios, ", ")), 2)
				}
			}
			b := &bench{
				out: e.Stderr, duration: c.Duration("duration"), conc: c.Int("concurrency"),
				rate: c.Int("rate"), idleSubs: c.Int("idle-subscriptions"), dir: c.String("dir"),
			}
			if b.dir == "" {
				dir, err := os.MkdirTemp("", "egrid-bench-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				b.dir = dir
			}
			if path := c.String("cpuprofile"); path != "" {
				f, err := os.Create(path)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			results, err := b.run(c.Context, scen)
			if err != nil {
				return err
			}
			if c.String("output") == "json" {
				return printJSON(e.Stdout, results)
			}
			printBenchTable(e.Stdout, results)
			return nil
		},
	}
}

// benchResult is one row of the result table.
type benchResult struct {
	Scenario string  `json:"scenario"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Baseline float64 `json:"baseline,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	Target   string  `json:"target,omitempty"`
	Met      *bool   `json:"met,omitempty"`
	Note     string  `json:"note,omitempty"`
}

type bench struct {
	out      io.Writer
	duration time.Duration
	conc     int
	rate     int
	idleSubs int
	dir      string
	runs     int
}

func (b *bench) run(ctx context.Context, scenarios []string) ([]benchResult, error) {
	var all []benchResult
	for _, s := range scenarios {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(b.out, "== %s\n", s)
		var res []benchResult
		var err error
		switch s {
		case "publish100":
			res, err = b.publish(ctx, s, 100, "≥ 100000 events/s and ≥ 0.6 × baseline", 100000)
		case "publish1":
			res, err = b.publish(ctx, s, 1, "", 0)
		case "e2e1":
			res, err = b.endToEnd(ctx, s, 0)
		case "e2e100":
			res, err = b.endToEnd(ctx, s, 100)
		case "latency":
			res, err = b.latency(ctx)
		case "fanout":
			res, err = b.fanout(ctx)
		case "idle":
			res, err = b.idle(ctx)
		case "isolation":
			res, err = b.isolation(ctx)
		}
		if err != nil {
			return all, fmt.Errorf("scenario %s: %w", s, err)
		}
		all = append(all, res...)
	}
	return all, nil
}

// ---- servers ----

// sinkServer counts delivered events and answers 200; handler lets a scenario decide per path.
type sinkServer struct {
	srv      *http.Server
	url      string
	events   atomic.Int64
	requests atomic.Int64
	onEvent  func(path string, body []byte)
	status   func(path string) int
}

func startSink() (*sinkServer, error) {
	s := &sinkServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if s.status != nil {
			if code := s.status(r.URL.Path); code != http.StatusOK {
				w.WriteHeader(code)
				return
			}
		}
		s.requests.Add(1)
		if !strings.HasPrefix(r.URL.Path, "/raw") { // baseline requests are counted by the client
			s.events.Add(int64(countEvents(body)))
		}
		if s.onEvent != nil {
			s.onEvent(r.URL.Path, body)
		}
	})}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *sinkServer) close() { _ = s.srv.Close() }

// countEvents counts the events in a delivery body: the elements of a JSON array, or 1.
func countEvents(body []byte) int {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '[' {
		return 1
	}
	// Events are objects at depth 1.
	n, depth, inStr, esc := 0, 0, false, false
	for _, c := range body {
		switch {
		case inStr:
			if esc {
				esc = false
			} else if c == '\\' {
				esc = true
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '[' || c == '{':
			if depth == 1 && c == '{' {
				n++
			}
			depth++
		case c == ']' || c == '}':
			depth--
		}
	}
	return n
}

// syncServer is the ingest baseline: it reads each body, appends it to a file and answers once
// it is synced; concurrent requests share one fsync (the same group commit egrid does).
type syncServer struct {
	srv  *http.Server
	url  string
	f    *os.File
	reqs chan syncReq
	done chan struct{}
}

type syncReq struct {
	body []byte
	ok   chan error
}

func startSyncServer(dir string) (*syncServer, error) {
	f, err := os.Create(filepath.Join(dir, "baseline.log"))
	if err != nil {
		return nil, err
	}
	s := &syncServer{f: f, reqs: make(chan syncReq, 4096), done: make(chan struct{})}
	go s.writer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := syncReq{body: body, ok: make(chan error, 1)}
		s.reqs <- req
		if err := <-req.ok; err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *syncServer) writer() {
	defer close(s.done)
	var batch []syncReq
	for req := range s.reqs {
		batch = append(batch[:0], req)
	gather:
		for {
			select {
			case more, ok := <-s.reqs:
				if !ok {
					break gather
				}
				batch = append(batch, more)
			default:
				break gather
			}
		}
		var err error
		for _, r := range batch {
			if _, werr := s.f.Write(r.body); werr != nil {
				err = werr
			}
		}
		if serr := s.f.Sync(); serr != nil {
			err = serr
		}
		for _, r := range batch {
			r.ok <- err
		}
	}
}

func (s *syncServer) close() {
	_ = s.srv.Close()
	close(s.reqs)
	<-s.done
	_ = s.f.Close()
}

// egridServer is a router on a fresh disk store, served on 127.0.0.1.
type egridServer struct {
	r     *router.Router
	st    *disk.Store
	srv   *http.Server
	url   string
	close func()
}

func (b *bench) startEgrid(cfg router.Config) (*egridServer, error) {
	b.runs++
	st, err := disk.Open(filepath.Join(b.dir, fmt.Sprintf("store-%d", b.runs)), disk.Options{})
	if err != nil {
		return nil, err
	}
	cfg.InsecureDev = true
	cfg.MaxSubscriptionsPerTopic = 1 << 20
	cfg.SkipEndpointValidation = true // the bench's sinks (and its idle 127.0.0.1:9) do not implement the handshake
	r, err := router.New(cfg, router.Deps{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		st.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &egridServer{r: r, st: st, url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: httpapi.New(r)}
	go s.srv.Serve(ln)
	s.close = func() {
		_ = s.srv.Close()
		_ = r.Close(context.Background())
		_ = st.Close()
	}
	return s, nil
}

// ---- load generation ----

// loadClient is the load generator's HTTP client: keep-alive, enough idle connections.
func loadClient(conc int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: conc * 2, MaxIdleConnsPerHost: conc * 2, DisableCompression: true,
	}}
}

// eventBody returns a JSON array of n Event Grid events of about 1 KB each.
func eventBody(n int, idPrefix string, subject string) []byte {
	pad := strings.Repeat("x", 820)
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"%s-%d","subject":%q,"eventType":"Bench.Event","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1.0","data":{"pad":%q,"sent":0}}`, idPrefix, i, subject, pad)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// load posts body to url from conc goroutines for d and returns the successful requests/s.
// Requests in flight at the end of d are finished and counted, and the rate is taken over the
// whole time, so a slow request is never thrown away.
func (b *bench) load(ctx context.Context, label, url string, body []byte, d time.Duration) (float64, error) {
	client := loadClient(b.conc)
	defer client.CloseIdleConnections()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	stop := b.progress(label, func() string { return fmt.Sprintf("%d requests", ok.Load()) })
	for range b.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	stop()
	elapsed := time.Since(start)
	if ok.Load() == 0 {
		return 0, fmt.Errorf("%s: no request succeeded (%d failed)", label, failed.Load())
	}
	return float64(ok.Load()) / elapsed.Seconds(), nil
}

// progress prints a live line every second until stop is called.
func (b *bench) progress(label string, status func() string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-done:
				fmt.Fprintf(b.out, "\r   %-28s %s in %s\n", label, status(), time.Since(start).Round(time.Millisecond))
				return
			case <-t.C:
				fmt.Fprintf(b.out, "\r   %-28s %s ...", label, status())
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// ---- scenarios ----

func (b *bench) publish(ctx context.Context, name string, perRequest int, target string, targetRate float64) ([]benchResult, error) {
	body := eventBody(perRequest, "p", "/bench")
	base, err := startSyncServer(b.dir)
	if err != nil {
		return nil, err
	}
	baseRPS, err := b.load(ctx, "baseline (read+fsync)", base.url+"/", body, b.duration)
	base.close()
	if err != nil {
		return nil, err
	}
	eg, err := b.startEgrid(router.Config{})
	if err != nil {
		return nil, err
	}
	defer eg.close()
	if _, err := eg.r.CreateTopic(ctx, "bench", router.TopicSpec{}); err != nil {
		return nil, err
	}
	rps, err := b.load(ctx, "egrid publish", eg.url+"/topics/bench/api/events", body, b.duration)
	if err != nil {
		return nil, err
	}
	unit, value, baseline := "events/s", rps*float64(perRequest), baseRPS*float64(perRequest)
	if perRequest == 1 {
		unit = "requests/s"
	}
	r := benchResult{Scenario: name, Metric: "durable publish", Value: value, Unit: unit, Baseline: baseline, Ratio: value / baseline, Target: target}
	if targetRate > 0 {
		met := value >= targetRate && r.Ratio >= 0.6
		r.Met = &met
	}
	return []benchResult{r}, nil
}

// endToEnd publishes for the load phase, waits (bounded) until everything is delivered and
// reports delivered events/s from the first publish to the last delivery.
func (b *bench) endToEnd(ctx context.Context, name string, batch int) ([]benchResult, error) {
	sink, err := startSink()
	if err != nil {
		return nil, err
	}
	defer sink.close()
	single := eventBody(1, "e", "/bench")
	rawRPS, err := b.load(ctx, "baseline client→sink", sink.url+"/raw", single, b.duration)
	if err != nil {
		return nil, err
	}
	eg, err := b.startEgrid(router.Config{MaxInFlight: 64})
	if err != nil {
		return nil, err
	}
	defer eg.close()
	if _, err := eg.r.CreateTopic(ctx, "bench", router.TopicSpec{}); err != nil {
		return nil, err
	}
	spec := router.SubscriptionSpec{Destination: router.WebHook(sink.url + "/hook")}
	spec.Destination.Properties.MaxEventsPerBatch = batch
	if err := eg.r.CreateSubscription(ctx, "bench", "sink", spec); err != nil {
		return nil, err
	}
	body := eventBody(100, "e", "/bench")
	start := time.Now()
	rps, err := b.load(ctx, "egrid publish (100/request)", eg.url+"/topics/bench/api/events", body, b.duration)
	if err != nil {
		return nil, err
	}
	published := int64(rps * b.duration.Seconds() * 100)
	total := eg.r.Metrics().Snapshot().Sum("PublishSuccessCount", "bench")
	if total > 0 {
		published = total
	}
	last := b.drain(ctx, "delivering", func() int64 { return sink.events.Load() }, published, 120*time.Second)
	delivered := sink.events.Load()
	rate := float64(delivered) / last.Sub(start).Seconds()
	res := benchResult{Scenario: name, Metric: "end-to-end delivered", Value: rate, Unit: "events/s"}
	if batch == 0 {
		res.Baseline, res.Ratio, res.Target = rawRPS, rate/rawRPS, "≥ 0.6 × raw client→sink"
		met := res.Ratio >= 0.6
		res.Met = &met
	} else {
		res.Target = "≥ 100000 events/s"
		met := rate >= 100000
		res.Met = &met
		res.Baseline, res.Ratio = rawRPS, rate/rawRPS
	}
	if delivered < published {
		res.Note = fmt.Sprintf("only %d of %d delivered within the bound", delivered, published)
	}
	return []benchResult{res}, nil
}

// drain waits until count() reaches want or the bound passes; it returns when the last
// progress happened.
func (b *bench) drain(ctx context.Context, label string, count func() int64, want int64, bound time.Duration) time.Time {
	stop := b.progress(label, func() string { return fmt.Sprintf("%d/%d", count(), want) })
	defer stop()
	deadline := time.Now().Add(bound)
	last, lastN := time.Now(), count()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n := count()
		if n != lastN {
			last, lastN = time.Now(), n
		}
		if n >= want {
			return time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	return last
}

func (b *bench) latency(ctx context.Context) ([]benchResult, error) {
	sink, err := startSink()
	if err != nil {
		return nil, err
	}
	defer sink.close()
	var mu sync.Mutex
	var lat []time.Duration
	sink.onEvent = func(_ string, body []byte) {
		now := time.Now()
		var evs []struct {
			Data struct {
				Sent int64 `json:"sent"`
			} `json:"data"`
		}
		if json.Unmarshal(body, &evs) == nil {
			mu.Lock()
			for _, e := range evs {
				lat = append(lat, now.Sub(time.Unix(0, e.Data.Sent)))
			}
			mu.Unlock()
		}
	}
	// Baseline: the same paced single-event requests into the read+fsync server.
	base, err := startSyncServer(b.dir)
	if err != nil {
		return nil, err
	}
	pad := strings.Repeat("x", 820)
	baseAck := b.paced(ctx, "baseline read+fsync", base.url+"/", int(float64(b.rate)*b.duration.Seconds()/2), func(i int) string {
		return fmt.Sprintf(`[{"id":"b-%d","subject":"/bench","eventType":"Bench.Event","eventTime":"2026-01-01T00:00:00Z","data":{"pad":%q}}]`, i, pad)
	})
	base.close()
	slices.Sort(baseAck)

	eg, err := b.startEgrid(router.Config{MaxInFlight: 64})
	if err != nil {
		return nil, err
	}
	defer eg.close()
	if _, err := eg.r.CreateTopic(ctx, "bench", router.TopicSpec{}); err != nil {
		return nil, err
	}
	if err := eg.r.CreateSubscription(ctx, "bench", "sink", router.SubscriptionSpec{Destination: router.WebHook(sink.url + "/hook")}); err != nil {
		return nil, err
	}
	total := int(float64(b.rate) * b.duration.Seconds())
	ack := b.paced(ctx, fmt.Sprintf("publishing at %d/s", b.rate), eg.url+"/topics/bench/api/events", total, func(i int) string {
		return fmt.Sprintf(`[{"id":"l-%d","subject":"/bench","eventType":"Bench.Event","eventTime":"2026-01-01T00:00:00Z","data":{"pad":%q,"sent":%d}}]`, i, pad, time.Now().UnixNano())
	})
	b.drain(ctx, "delivering", func() int64 { mu.Lock(); defer mu.Unlock(); return int64(len(lat)) }, int64(total), 60*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		return nil, fmt.Errorf("nothing was delivered")
	}
	slices.Sort(lat)
	slices.Sort(ack)
	pctOf := func(d []time.Duration, p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
	}
	pct := func(p float64) float64 { return pctOf(lat, p) }
	p99 := pct(0.99)
	met := p99 <= 10
	return []benchResult{
		{Scenario: "latency", Metric: "publish→delivery p50", Value: pct(0.50), Unit: "ms"},
		{Scenario: "latency", Metric: "publish→delivery p99", Value: p99, Unit: "ms", Target: "≤ 10 ms", Met: &met},
		{Scenario: "latency", Metric: "publish→delivery p999", Value: pct(0.999), Unit: "ms",
			Note: fmt.Sprintf("%d events at %d/s", len(lat), b.rate)},
		{Scenario: "latency", Metric: "publish→durable ack p50", Value: pctOf(ack, 0.50), Unit: "ms", Baseline: pctOf(baseAck, 0.50), Ratio: pctOf(ack, 0.50) / pctOf(baseAck, 0.50)},
		{Scenario: "latency", Metric: "publish→durable ack p99", Value: pctOf(ack, 0.99), Unit: "ms", Baseline: pctOf(baseAck, 0.99), Ratio: pctOf(ack, 0.99) / pctOf(baseAck, 0.99),
			Note: "baseline: the same paced requests into the read+fsync server"},
	}, nil
}

// paced posts total single-event requests (body(i) gives the i-th) to url at the scenario's
// rate and returns each request's time to its answer.
func (b *bench) paced(ctx context.Context, label, url string, total int, body func(i int) string) []time.Duration {
	client := loadClient(b.conc)
	defer client.CloseIdleConnections()
	interval := time.Second / time.Duration(b.rate)
	sem := make(chan struct{}, b.conc)
	var mu sync.Mutex
	var acks []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	stop := b.progress(label, func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprintf("%d answered", len(acks)) })
	defer stop()
	for i := 0; i < total && ctx.Err() == nil; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body(i)))
			req.Header.Set("Content-Type", "application/json")
			sent := time.Now()
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				acks = append(acks, time.Since(sent))
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return acks
}

func (b *bench) fanout(ctx context.Context) ([]benchResult, error) {
	sink, err := startSink()
	if err != nil {
		return nil, err
	}
	defer sink.close()
	eg, err := b.startEgrid(router.Config{})
	if err != nil {
		return nil, err
	}
	defer eg.close()
	if _, err := eg.r.CreateTopic(ctx, "bench", router.TopicSpec{}); err != nil {
		return nil, err
	}
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
	d := b.duration / 5
	rps, err := b.load(ctx, "egrid publish (100/request)", eg.url+"/topics/bench/api/events", body, d)
	if err != nil {
		return nil, err
	}
	want := eg.r.Metrics().Snapshot().Sum("PublishSuccessCount", "bench") * 100
	if want == 0 {
		want = int64(rps*d.Seconds()) * 100 * 100
	}
	last := b.drain(ctx, "delivering to 100", func() int64 { return sink.events.Load() }, want, 120*time.Second)
	delivered := sink.events.Load()
	r := benchResult{Scenario: "fanout", Metric: "deliveries (100 subscriptions)", Value: float64(delivered) / last.Sub(start).Seconds(), Unit: "events/s"}
	if delivered < want {
		r.Note = fmt.Sprintf("only %d of %d delivered within the bound", delivered, want)
	}
	return []benchResult{r}, nil
}

func (b *bench) idle(ctx context.Context) ([]benchResult, error) {
	eg, err := b.startEgrid(router.Config{})
	if err != nil {
		return nil, err
	}
	defer eg.close()
	if _, err := eg.r.CreateTopic(ctx, "bench", router.TopicSpec{}); err != nil {
		return nil, err
	}
	heapBefore, rssBefore := memNow()
	n := b.idleSubs
	done := atomic.Int64{}
	stop := b.progress("creating subscriptions", func() string { return fmt.Sprintf("%d/%d", done.Load(), n) })
	for i := range n {
		if err := eg.r.CreateSubscription(ctx, "bench", fmt.Sprintf("idle-%05d", i), router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:9/idle")}); err != nil {
			stop()
			return nil, err
		}
		done.Add(1)
	}
	stop()
	heapAfter, rssAfter := memNow()
	perHeap := float64(heapAfter-heapBefore) / float64(n)
	perRSS := float64(rssAfter-rssBefore) / float64(n)
	met := perRSS <= 4096
	return []benchResult{
		{Scenario: "idle", Metric: "resident memory per idle subscription", Value: perRSS, Unit: "bytes", Target: "≤ 4 KB", Met: &met, Note: fmt.Sprintf("%d subscriptions", n)},
		{Scenario: "idle", Metric: "heap per idle subscription", Value: perHeap, Unit: "bytes"},
	}, nil
}

// memNow returns the live heap after a GC and the process's resident set size.
func memNow() (heap, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap = ms.HeapAlloc
	if raw, err := os.ReadFile("/proc/self/statm"); err == nil {
		f := strings.Fields(string(raw))
		if len(f) > 1 {
			pages, _ := strconv.ParseUint(f[1], 10, 64)
			rss = pages * uint64(os.Getpagesize())
		}
	}
	return heap, rss
}

func (b *bench) isolation(ctx context.Context) ([]benchResult, error) {
	rate := func(failing bool) (float64, error) {
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
		eg, err := b.startEgrid(router.Config{})
		if err != nil {
			return 0, err
		}
		defer eg.close()
		if _, err := eg.r.CreateTopic(ctx, "bench", router.TopicSpec{}); err != nil {
			return 0, err
		}
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
		d := b.duration / 5
		if _, err := b.load(ctx, fmt.Sprintf("publish (failing=%v)", failing), eg.url+"/topics/bench/api/events", body, d); err != nil {
			return 0, err
		}
		want := eg.r.Metrics().Snapshot().Sum("PublishSuccessCount", "bench") * 50
		last := b.drain(ctx, "healthy deliveries", func() int64 { return healthy.Load() }, want, 120*time.Second)
		return float64(healthy.Load()) / last.Sub(start).Seconds(), nil
	}
	all, err := rate(false)
	if err != nil {
		return nil, err
	}
	half, err := rate(true)
	if err != nil {
		return nil, err
	}
	met := half >= 0.9*all
	return []benchResult{{
		Scenario: "isolation", Metric: "healthy deliveries, half failing", Value: half, Unit: "events/s",
		Baseline: all, Ratio: half / all, Target: "≥ 0.9 × all healthy", Met: &met,
	}}, nil
}

func printBenchTable(w io.Writer, rs []benchResult) {
	fmt.Fprintf(w, "%-11s %-38s %14s %-10s %14s %7s  %-34s %s\n", "SCENARIO", "METRIC", "VALUE", "UNIT", "BASELINE", "RATIO", "TARGET", "MET")
	for _, r := range rs {
		base, ratio, met := "", "", ""
		if r.Baseline != 0 {
			base = fmt.Sprintf("%.0f", r.Baseline)
			if r.Unit == "ms" {
				base = fmt.Sprintf("%.2f", r.Baseline)
			}
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		if r.Met != nil {
			met = "yes"
			if !*r.Met {
				met = "NO"
			}
		}
		val := fmt.Sprintf("%.0f", r.Value)
		if r.Unit == "ms" {
			val = fmt.Sprintf("%.2f", r.Value)
		}
		fmt.Fprintf(w, "%-11s %-38s %14s %-10s %14s %7s  %-34s %s", r.Scenario, r.Metric, val, r.Unit, base, ratio, r.Target, met)
		if r.Note != "" {
			fmt.Fprintf(w, "  (%s)", r.Note)
		}
		fmt.Fprintln(w)
	}
}
