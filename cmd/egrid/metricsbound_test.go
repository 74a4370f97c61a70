package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
)

// heldCollector is a collector whose Collect waits until release is closed, counting the
// Collects running at once.
type heldCollector struct {
	release chan struct{}
	mu      sync.Mutex
	running int
	most    int
	total   int
}

var heldDesc = prometheus.NewDesc("held_metric", "A metric whose collection waits.", nil, nil)

func (c *heldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- heldDesc }

func (c *heldCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	c.running++
	c.total++
	c.most = max(c.most, c.running)
	c.mu.Unlock()
	<-c.release
	c.mu.Lock()
	c.running--
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, 1)
}

// Overlapping scrapes of /metrics share one gather, and past maxMetricsScrapes a scrape is
// refused at once: each gather builds every series in memory (hundreds of MiB with tens of
// thousands of subscriptions), and /metrics on --metrics-listen needs no credentials, so a
// few overlapping scrapes each ran a gather of their own and could exhaust memory.
func TestOverlappingScrapesShareOneGather(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		held := &heldCollector{release: make(chan struct{})}
		reg := prometheus.NewRegistry()
		reg.MustRegister(held)
		h := metricsHandler(reg, slog.New(slog.NewTextHandler(io.Discard, nil)))

		type answer struct {
			code int
			body string
		}
		scrape := func(out chan<- answer) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, MetricsPath, nil))
			out <- answer{w.Code, w.Body.String()}
		}
		answers := make(chan answer, maxMetricsScrapes+1)
		for range maxMetricsScrapes {
			go scrape(answers)
		}
		synctest.Wait() // every scrape is in, waiting on the held collection
		held.mu.Lock()
		running := held.running
		held.mu.Unlock()
		if running != 1 {
			t.Errorf("%d overlapping scrapes ran %d gathers at once, want 1 shared", maxMetricsScrapes, running)
		}

		extra := make(chan answer, 1)
		go scrape(extra)
		synctest.Wait()
		select {
		case a := <-extra:
			if a.code != http.StatusServiceUnavailable {
				t.Errorf("scrape past the bound of %d: %d %q, want 503", maxMetricsScrapes, a.code, a.body)
			}
		default:
			t.Errorf("scrape past the bound of %d: not answered, waiting on the gathers in flight; want 503 at once", maxMetricsScrapes)
		}

		close(held.release)
		synctest.Wait()
		for range maxMetricsScrapes {
			if a := <-answers; a.code != http.StatusOK || !strings.Contains(a.body, "held_metric 1") {
				t.Errorf("shared scrape: %d %q, want 200 with held_metric", a.code, a.body)
			}
		}
		if held.most != 1 || held.total != 1 {
			t.Errorf("gathers: %d at once, %d in all; want 1 and 1", held.most, held.total)
		}

		// The next scrape gathers afresh.
		go scrape(answers)
		synctest.Wait()
		if a := <-answers; a.code != http.StatusOK || held.total != 2 {
			t.Errorf("later scrape: %d, %d gathers in all; want 200 and 2", a.code, held.total)
		}
	})
}
