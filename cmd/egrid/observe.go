package main

import (
	"crypto/subtle"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/urfave/cli/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/devguard"
	"github.com/egridio/egrid/router/probes"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas/clip"
)

// MetricsPath is where Prometheus scrapes egrid.
const MetricsPath = "/metrics"

// observeFlags are serve's flags of logs, metrics and health.
func observeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error (env EGRID_LOG_LEVEL)", Value: "info"},
		&cli.StringFlag{Name: "log-format", Usage: "text or json (env EGRID_LOG_FORMAT)", Value: "text"},
		&cli.StringFlag{Name: "metrics-listen", Usage: "serve GET /metrics (and /healthz, /readyz) without credentials on this separate address, for Prometheus; without it /metrics is on --listen behind the admin token (env EGRID_METRICS_LISTEN)"},
	}
}

// logSettings are the resolved log settings.
type logSettings struct {
	Level  slog.Level
	Format string // "text" or "json"
}

// resolveLogging resolves --log-level and --log-format: flag > environment > file > default.
func resolveLogging(c *cli.Context, getenv func(string) string, fs serverConfig) (logSettings, []error) {
	var errs []error
	pick := func(flag, envName, fileVal, def string) (string, string) {
		switch {
		case c.IsSet(flag):
			return c.String(flag), "--" + flag
		case getenv(envName) != "":
			return getenv(envName), envName
		case fileVal != "":
			return fileVal, "server." + map[string]string{"log-level": "logLevel", "log-format": "logFormat"}[flag]
		}
		return def, "--" + flag
	}
	var s logSettings
	level, from := pick("log-level", "EGRID_LOG_LEVEL", fs.LogLevel, "info")
	if err := s.Level.UnmarshalText([]byte(level)); err != nil {
		errs = append(errs, fmt.Errorf("%s %q: use debug, info, warn or error", from, clip.String(level)))
	}
	format, from := pick("log-format", "EGRID_LOG_FORMAT", fs.LogFormat, "text")
	switch strings.ToLower(format) {
	case "text", "json":
		s.Format = strings.ToLower(format)
	default:
		errs = append(errs, fmt.Errorf("%s %q: use text or json", from, clip.String(format)))
	}
	return s, errs
}

// handler returns the slog handler of the settings, writing to w. Both write a record as one
// line whatever its strings hold (a refused path, an endpoint's answer, an event id): the text
// handler quotes a value with a control character, a space or a byte that is not UTF-8 (as %q
// does), the JSON handler escapes C0, U+2028 and U+2029 and writes a byte that is not UTF-8 as
// U+FFFD. The JSON handler writes C1 characters and DEL as they are, which a terminal showing
// the log obeys and readers splitting on Unicode line breaks take NEL (U+0085) for one: its
// writer escapes them as -o json does (termSafeJSON).
func (s logSettings) handler(w io.Writer) slog.Handler {
	opts := &slog.HandlerOptions{Level: s.Level}
	if s.Format == "json" {
		return slog.NewJSONHandler(termSafeJSONWriter{w}, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// termSafeJSONWriter writes each JSON text it is given through termSafeJSON: slog's JSON
// handler writes each record whole, in one Write.
type termSafeJSONWriter struct{ w io.Writer }

func (t termSafeJSONWriter) Write(p []byte) (int, error) {
	if _, err := t.w.Write(termSafeJSON(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// metricsRegistry is the registry of GET /metrics: the router's collector with Go's runtime
// and the process's collectors, and the embedded store's log syncs when st is it.
func metricsRegistry(r *router.Router, st store.Store) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if ls, ok := st.(logSyncer); ok {
		reg.MustRegister(logSyncCollector{ls})
	}
	if tw, ok := st.(tableWriter); ok {
		reg.MustRegister(tableWriteCollector{tw})
	}
	return reg
}

// logSyncer is a store that times its log syncs: the embedded store (disk.Store.LogSyncs).
type logSyncer interface{ LogSyncs() disk.SyncTimes }

// logSyncCollector exports the embedded store's log syncs as a histogram. Every durable
// acknowledgement waits for one, so a disk that stalls shows here as the cause of a slow
// publish (egrid_publish_success_latency_seconds). The buckets are pebble's, which times the
// syncs; the counts start again when the store reopens itself after a failure, which
// Prometheus' rate() takes as a counter reset.
type logSyncCollector struct{ st logSyncer }

var logSyncDesc = prometheus.NewDesc("egrid_store_log_sync_seconds",
	"Time each sync of the embedded store's write-ahead log took; every durable acknowledgement waits for one (egrid only).", nil, nil)

// Describe implements prometheus.Collector.
func (c logSyncCollector) Describe(ch chan<- *prometheus.Desc) { ch <- logSyncDesc }

// Collect implements prometheus.Collector.
func (c logSyncCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.st.LogSyncs()
	buckets := make(map[float64]uint64, len(t.Buckets))
	for _, b := range t.Buckets {
		if b.UpperBound > 0 {
			buckets[b.UpperBound.Seconds()] = b.Count
		}
	}
	m, err := prometheus.NewConstHistogram(logSyncDesc, t.Count, t.Sum.Seconds(), buckets)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(logSyncDesc, err)
		return
	}
	ch <- m
}

// tableWriter is a store that counts its table writes: the embedded store
// (disk.Store.TableWrites).
type tableWriter interface{ TableWrites() disk.TableWrites }

// tableWriteCollector exports the embedded store's table writes, by flushes and by
// compactions: beside the bytes published (each written once to the log), they are the
// store's write amplification, disk bandwidth and CPU taken from publishes and deliveries.
// The counts start again when the store reopens itself after a failure.
type tableWriteCollector struct{ st tableWriter }

var tableWriteDesc = prometheus.NewDesc("egrid_store_table_written_bytes_total",
	"Bytes the embedded store wrote to table files, by flushes of its memtables and by compactions (compressed, as stored; egrid only).", []string{"by"}, nil)

// Describe implements prometheus.Collector.
func (c tableWriteCollector) Describe(ch chan<- *prometheus.Desc) { ch <- tableWriteDesc }

// Collect implements prometheus.Collector.
func (c tableWriteCollector) Collect(ch chan<- prometheus.Metric) {
	w := c.st.TableWrites()
	ch <- prometheus.MustNewConstMetric(tableWriteDesc, prometheus.CounterValue, float64(w.Flushed), "flush")
	ch <- prometheus.MustNewConstMetric(tableWriteDesc, prometheus.CounterValue, float64(w.Compacted), "compaction")
}

// opsMux mounts the probes and, when open or guarded, the metrics endpoint in front of next.
// /healthz and /readyz never need credentials; /metrics is served as metrics says.
func opsMux(r *router.Router, reg *prometheus.Registry, metrics http.Handler, next http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET "+probes.LivenessPath, probes.Liveness())
	mux.Handle("GET "+probes.ReadinessPath, probes.Readiness(r.ReadinessChecks, probes.DefaultTimeout))
	if metrics != nil {
		mux.Handle("GET "+MetricsPath, metrics)
	}
	if next != nil {
		mux.Handle("/", next)
	}
	return mux
}

// maxMetricsScrapes bounds the GET /metrics requests served at once, on each address that
// serves it; one more is answered 503 Service Unavailable at once.
const maxMetricsScrapes = 4

// metricsHandler serves the registry in the Prometheus text (or OpenMetrics) format. A
// gather builds every series in memory (with 20 000 subscriptions, about 160 000 series and
// 200 MiB), so the scrapes served at once share one gather ([sharedGatherer]): a scrape that
// arrives while one runs waits for it and encodes its result, and overlapping scrapes cost
// one gather's memory, not one each. At most maxMetricsScrapes are served at once, so a flood
// of scrapes of an address that needs no credentials (--metrics-listen) neither piles up
// waiting goroutines nor encodes the series many times over. There is no promhttp Timeout:
// it would buffer each whole answer in memory; the server's limits bound a slow reader.
func metricsHandler(reg prometheus.Gatherer, log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(&sharedGatherer{g: reg}, promhttp.HandlerOpts{
		ErrorLog: slogPrinter{log}, ErrorHandling: promhttp.ContinueOnError,
		MaxRequestsInFlight: maxMetricsScrapes,
	})
}

// sharedGatherer is a prometheus.Gatherer that runs at most one Gather of g at a time: a
// call made while one runs waits for it and returns its result, which the callers share and
// must not change (promhttp only encodes it).
type sharedGatherer struct {
	g  prometheus.Gatherer
	mu sync.Mutex
	in *gatherCall // the gather running, nil when none
}

// gatherCall is one Gather that callers share; done is closed once mfs and err are set.
type gatherCall struct {
	done chan struct{}
	mfs  []*dto.MetricFamily
	err  error
}

// Gather implements prometheus.Gatherer.
func (s *sharedGatherer) Gather() ([]*dto.MetricFamily, error) {
	s.mu.Lock()
	if c := s.in; c != nil {
		s.mu.Unlock()
		<-c.done
		return c.mfs, c.err
	}
	c := &gatherCall{done: make(chan struct{})}
	s.in = c
	s.mu.Unlock()
	defer func() { // also when a collector panics: the waiters get nothing, not a hang
		s.mu.Lock()
		s.in = nil
		s.mu.Unlock()
		close(c.done)
	}()
	c.mfs, c.err = s.g.Gather()
	return c.mfs, c.err
}

// guardMetrics puts the admin API's rule in front of /metrics on the main address: with an
// admin token it needs Authorization: Bearer <token>; without one it is open only under
// --insecure-dev, and only to this machine's own programs (devguard.Check), else refused
// with what to do.
func guardMetrics(s serveSettings, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if s.InsecureDev && s.AdminToken == "" {
			// Open only to this machine's own programs, as the admin API (router/devguard).
			if err := devguard.Check(req, s.PublicURL); err != nil {
				http.Error(w, "GET /metrics on --listen: "+err.Error(), http.StatusForbidden)
				return
			}
		} else {
			if s.AdminToken == "" {
				http.Error(w, "GET /metrics on --listen needs the admin token, and none is configured: set --admin-token, or serve metrics without credentials on a separate address with --metrics-listen", http.StatusForbidden)
				return
			}
			got, ok := devguard.BearerToken(req)
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.AdminToken)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="egrid"`)
				http.Error(w, "GET /metrics on --listen needs Authorization: Bearer <admin token>; or scrape --metrics-listen, which needs none", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, req)
	})
}

// slogPrinter adapts a logger to promhttp's error log.
type slogPrinter struct{ log *slog.Logger }

// Println implements promhttp.Logger.
func (p slogPrinter) Println(v ...any) { p.log.Warn("serving metrics", "err", fmt.Sprint(v...)) }
