package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store/disk"
)

// BenchmarkPullReceiveAck drains a queue subscription on the disk store with 4 consumers, each
// receiving up to 32 events and acknowledging them in one call. Every receipt and every
// acknowledgement is synced before it is answered, so it reports events/s beside rawsyncs/s
// (1 KB write+fsync of a plain file, same run) and their ratio: how many events one raw
// fsync's time settles, and the process's CPU time per event (cpu-µs/event, which hardly
// moves when other work shares the machine). The events are published before the timer
// starts.
func BenchmarkPullReceiveAck(b *testing.B) {
	const consumers, perReceive = 4, 32
	dir := b.TempDir()
	raw := rawSyncRate(b, dir)
	st, err := disk.Open(filepath.Join(dir, "store"), disk.Options{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := router.New(router.Config{}, router.Deps{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = r.Close(context.Background())
		_ = st.Close()
	})
	ctx := b.Context()
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{Kind: router.KindNamespace}); err != nil {
		b.Fatal(err)
	}
	spec := router.SubscriptionSpec{DeliveryConfiguration: &router.DeliveryConfiguration{DeliveryMode: router.DeliveryModeQueue}}
	if err := r.CreateSubscription(ctx, "orders", "workers", spec); err != nil {
		b.Fatal(err)
	}
	pad := strings.Repeat("x", 900)
	for done := 0; done < b.N; {
		n := min(b.N-done, 500)
		evs := make([]any, n)
		for i := range evs {
			evs[i] = json.RawMessage(fmt.Sprintf(`{"specversion":"1.0","id":"e%d","source":"/orders","type":"Order.Created","data":{"pad":%q}}`, done+i, pad))
		}
		if err := r.Publish(ctx, "orders", evs...); err != nil {
			b.Fatal(err)
		}
		done += n
	}
	var settled atomic.Int64
	var wg sync.WaitGroup
	drained, stop := context.WithCancel(ctx) // ends the long polls of the idle consumers
	defer stop()
	b.ResetTimer()
	cpu0 := cpuTime()
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for settled.Load() < int64(b.N) {
				evs, err := r.Receive(drained, "orders", "workers", router.ReceiveOptions{MaxEvents: perReceive, MaxWait: router.MinReceiveWait})
				if drained.Err() != nil {
					return
				}
				if err != nil {
					b.Error(err)
					return
				}
				if len(evs) == 0 {
					continue
				}
				tokens := make([]string, len(evs))
				for i, e := range evs {
					tokens[i] = e.LockToken
				}
				res, err := r.Acknowledge(ctx, "orders", "workers", tokens)
				if err != nil || len(res.Failed) > 0 {
					b.Errorf("acknowledge: %v %+v", err, res.Failed)
					return
				}
				if settled.Add(int64(len(res.Succeeded))) >= int64(b.N) {
					stop()
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuTime() - cpu0
	events := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(events, "events/s")
	b.ReportMetric(raw, "rawsyncs/s")
	b.ReportMetric(events/raw, "events/rawsync")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/event")
}
