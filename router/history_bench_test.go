//go:build unix

package router

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/egridio/egrid/actors"
	"github.com/egridio/egrid/router/retry"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// BenchmarkHistory measures the delivery history of one-event attempt records, as a
// subscription with batching off reports them: what the actor's callback costs
// (Router.observeAttempts) and what the history writer then spends to write them into the
// store. Delivered is the common case, a first attempt delivered; Retried is a failed first
// attempt (a retry decision) followed by the delivered second one, whose write reads the
// first back. Each op is one record; cpu-ns/event is the process's CPU time (both goroutines)
// per record. The events' ids come in order, except in Delivered/disk/scrambled, whose ids are
// in no order, as GUIDs are: the store's inserts cost more then.
func BenchmarkHistory(b *testing.B) {
	for _, kind := range []string{"memory", "disk"} {
		b.Run("Delivered/"+kind, func(b *testing.B) { benchmarkHistory(b, kind, false, false) })
		b.Run("Retried/"+kind, func(b *testing.B) { benchmarkHistory(b, kind, true, false) })
	}
	b.Run("Delivered/disk/scrambled", func(b *testing.B) { benchmarkHistory(b, "disk", false, true) })
}

func benchmarkHistory(b *testing.B, kind string, retried, scrambled bool) {
	ctx := context.Background()
	var st store.Store
	switch kind {
	case "memory":
		st = store.NewMemory()
	default:
		d, err := disk.Open(filepath.Join(b.TempDir(), "store"), disk.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = d.Close() })
		st = d
	}
	if err := st.PutTopic(ctx, "orders", []byte("{}")); err != nil {
		b.Fatal(err)
	}
	if err := st.PutSubscription(ctx, "orders", "billing", []byte("{}")); err != nil {
		b.Fatal(err)
	}
	w := newHistoryWriter(st, HistoryConfig{}.withDefaults(), slog.New(slog.DiscardHandler))
	b.Cleanup(w.close)
	r := &Router{history: w}
	policy := &retry.Policy{}
	observe := r.observeAttempts(policy, nil)
	ids := make([]string, b.N)
	for i := range ids {
		n := uint32(i)
		if scrambled {
			n = uint32(uint64(i) * 0x9e3779b97f4a7c15 >> 32)
		}
		ids[i] = fmt.Sprintf("%08x-5c1e-4a7b-9f3d-%012x", n, i)
	}
	start := time.Now()
	failure := retry.Failure{Outcome: schemas.Busy, StatusCode: 503}
	record := func(id string, attempt int, at time.Time, dec retry.Decision, failed bool) *actors.AttemptRecord {
		rec := &actors.AttemptRecord{
			Topic: "orders", Subscription: "billing", EventIDs: []string{id}, Attempts: []int{attempt},
			Time: at, Duration: 2 * time.Millisecond, Outcome: schemas.Delivered,
			Decisions: []retry.Decision{dec}, PublishTimes: []time.Time{start},
		}
		if failed {
			rec.Outcome, rec.StatusCode = failure.Outcome, failure.StatusCode
			rec.Detail = "Busy (HTTP 503): https://billing.example.com/hook?code=secret answered 503 Service Unavailable"
		}
		return rec
	}
	if retried {
		// The failed first attempts are written before the timer starts.
		for i, id := range ids {
			at := start.Add(time.Duration(i) * time.Microsecond)
			observe(record(id, 1, at, policy.AfterFailure(failure, 1, id, start, at), true))
			if i%1024 == 1023 {
				if err := w.flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := w.flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	recs := make([]*actors.AttemptRecord, b.N)
	for i, id := range ids {
		attempt, at := 1, start.Add(time.Millisecond)
		if retried {
			attempt, at = 2, start.Add(30*time.Second)
		}
		recs[i] = record(id, attempt, at, retry.Decision{}, false)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := historyCPUTime()
	for i, rec := range recs {
		observe(rec)
		if i%1024 == 1023 { // the queue holds 16 384 steps: keep every record
			if err := w.flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(historyCPUTime()-cpu0)/float64(b.N), "cpu-ns/event")
	if e, err := st.History(ctx, "orders", "billing", ids[b.N-1], start.Add(time.Minute)); err != nil || len(e.Payload) == 0 {
		b.Fatalf("the last event's history: %v", err)
	}
}

func historyCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
