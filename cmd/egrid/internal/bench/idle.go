package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/egridio/egrid/router"
)

// idle creates IdleSubscriptions subscriptions to an endpoint that never gets an event and
// reports the resident memory (held to the scenario's target) and heap each one costs.
func idle(ctx context.Context, b *Runner, s Scenario) ([]Result, error) {
	eg, err := b.startTopic(ctx, router.Config{})
	if err != nil {
		return nil, err
	}
	defer eg.close()
	// The store's write buffer (pebble's memtable, at most 64 MiB whatever is written) is
	// emptied before each reading: the 10 000 definitions written in a row fill a few
	// hundred bytes of it per subscription, which it holds for any writes, not for them.
	if err := eg.st.Flush(ctx); err != nil {
		return nil, err
	}
	heapBefore, rssBefore := memNow()
	n := b.opt.IdleSubscriptions
	var done atomic.Int64
	stop := b.progress("creating subscriptions", func() string { return fmt.Sprintf("%d/%d", done.Load(), n) })
	for i := range n {
		if err := eg.r.CreateSubscription(ctx, "bench", fmt.Sprintf("idle-%05d", i), router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:9/idle")}); err != nil {
			stop()
			return nil, err
		}
		done.Add(1)
	}
	stop()
	if err := eg.st.Flush(ctx); err != nil {
		return nil, err
	}
	heapAfter, rssAfter := memNow()
	if b.opt.MemProfile != "" {
		if err := writeHeapProfile(b.opt.MemProfile); err != nil {
			return nil, err
		}
	}
	perHeap := float64(heapAfter-heapBefore) / float64(n)
	perRSS := float64(rssAfter-rssBefore) / float64(n)
	met := perRSS <= 4096
	return []Result{
		{Scenario: s.Name, Metric: "resident memory per idle subscription", Value: perRSS, Unit: "bytes", Target: s.Target, Met: &met, Note: fmt.Sprintf("%d subscriptions", n)},
		{Scenario: s.Name, Metric: "heap per idle subscription", Value: perHeap, Unit: "bytes"},
	}, nil
}

// writeHeapProfile writes the heap profile of the live objects to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("--memprofile %s: %w", path, err)
	}
	return f.Close()
}

// memNow returns the live heap after a GC and the process's resident set size.
func memNow() (heap, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, rssNow()
}

// rssNow returns the process's resident set size (0 where /proc is missing).
func rssNow() uint64 {
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}
