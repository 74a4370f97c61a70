package router_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/httpapi"
	"github.com/egridio/egrid/router/store/disk"
)

// BenchmarkPublish1 publishes one 1 KB event per request through the HTTP handler
// (in-process: decoding, validation, the topic's committer and a synced append to the disk
// store) from 32×GOMAXPROCS goroutines. Every answer is a 200, so every event is on disk:
// concurrent requests share one sync (group commit). It reports events/s beside rawsyncs/s,
// the rate of 1 KB write+fsync of a plain file in the same directory measured in the same
// run, and their ratio (SPEC §6; issue 5, acceptance 4).
func BenchmarkPublish1(b *testing.B) { benchmarkPublish(b, 1, 32) }

// BenchmarkPublish100 is BenchmarkPublish1 with 100 events per request from 8×GOMAXPROCS
// goroutines.
func BenchmarkPublish100(b *testing.B) { benchmarkPublish(b, 100, 8) }

func benchmarkPublish(b *testing.B, perRequest, parallelism int) {
	dir := b.TempDir()
	raw := rawSyncRate(b, dir)
	st, err := disk.Open(filepath.Join(dir, "store"), disk.Options{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := router.New(router.Config{InsecureDev: true}, router.Deps{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			b.Error(err)
		}
		if err := st.Close(); err != nil {
			b.Error(err)
		}
	})
	if _, err := r.CreateTopic(b.Context(), "orders", router.TopicSpec{}); err != nil {
		b.Fatal(err)
	}
	body := benchBody(perRequest)
	h := httpapi.New(r)
	b.SetParallelism(parallelism)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, "/topics/orders/api/events?api-version=2018-01-01", bytes.NewReader(body))
			req.Host = "localhost" // --insecure-dev lets in requests without credentials from this machine only (router/devguard)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Errorf("publish answered %d %s", rec.Code, rec.Body)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*perRequest), "cpu-µs/event")
	events := float64(b.N*perRequest) / b.Elapsed().Seconds()
	b.ReportMetric(events, "events/s")
	b.ReportMetric(raw, "rawsyncs/s")
	b.ReportMetric(events/raw, "events/rawsync")
}

// benchBody is a JSON array of n Event Grid events of about 1 KB each.
func benchBody(n int) []byte {
	evs := make([]string, n)
	for i := range evs {
		evs[i] = fmt.Sprintf(`{"id":"bench-%d","subject":"/orders/%d","eventType":"Order.Created","eventTime":"2026-01-01T00:00:00Z","dataVersion":"1.0","data":{"pad":%q}}`,
			i, i, strings.Repeat("x", 870))
	}
	return []byte("[" + strings.Join(evs, ",") + "]")
}

// rawSyncRate measures how many 1 KB write+fsync rounds per second a plain file in dir
// takes: the disk's own ceiling for one durable event per sync, measured in the same run as
// the router so the host's drift (reference/machine-limits.md) cancels out in the ratio.
func rawSyncRate(b *testing.B, dir string) float64 {
	b.Helper()
	f, err := os.Create(filepath.Join(dir, "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := bytes.Repeat([]byte("x"), 1024)
	const rounds = 200
	start := time.Now()
	for range rounds {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return rounds / time.Since(start).Seconds()
}
