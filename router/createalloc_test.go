package router_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"testing"

	"github.com/egridio/egrid/router"
)

// newCreateRouter is a router whose creates do no I/O beyond the in-memory store: the
// endpoint is not validated (127.0.0.1:9 never answers).
func newCreateRouter(tb testing.TB) *router.Router {
	tb.Helper()
	r, err := router.New(router.Config{InsecureDev: true, SkipEndpointValidation: true, MaxSubscriptionsPerTopic: 1 << 20},
		router.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = r.Close(context.Background()) })
	if _, err := r.CreateTopic(context.Background(), "orders", router.TopicSpec{}); err != nil {
		tb.Fatal(err)
	}
	return r
}

// maxAllocsPerCreate bounds the allocations of creating an idle WebHook subscription (the
// spec's validation, its actor and sink, the store write, the actor's start). Every one is
// garbage or held by the subscription, and the garbage leaves free slots between the live
// objects of the subscriptions created before, so it costs resident memory; see README
// "Benchmarks", row 7. Measured 57 on 2026-11-23 (75 before a create validated and built
// its config once); raise it only for a reason.
const maxAllocsPerCreate = 60

// TestCreateSubscriptionAllocs is the regression guard of the create path's allocations.
func TestCreateSubscriptionAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates; run without -race")
	}
	r := newCreateRouter(t)
	ctx := context.Background()
	names := make([]string, 0, 3*101)
	for i := range cap(names) {
		names = append(names, fmt.Sprintf("idle-%05d", i))
	}
	// The actors' goroutines run the same code either way, but how often a mailbox starts a
	// goroutine (and may allocate one) depends on timing: the least of three runs is the
	// create path's own count.
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection's own allocations vary too
	n := 0
	allocs := -1.0
	for range 3 {
		got := testing.AllocsPerRun(100, func() {
			spec := router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:9/idle")}
			if err := r.CreateSubscription(ctx, "orders", names[n], spec); err != nil {
				t.Fatal(err)
			}
			n++
		})
		if allocs < 0 || got < allocs {
			allocs = got
		}
	}
	t.Logf("%.0f allocations per create", allocs)
	if allocs > maxAllocsPerCreate {
		t.Errorf("creating a subscription allocates %.0f times, more than %d: see the heap profile of `egrid bench --scenario idle --memprofile`", allocs, maxAllocsPerCreate)
	}
}

// BenchmarkCreateSubscription creates idle WebHook subscriptions; -benchmem reports the
// create path's allocations (what each keeps is in `egrid bench --scenario idle`).
func BenchmarkCreateSubscription(b *testing.B) {
	r := newCreateRouter(b)
	ctx := context.Background()
	spec := router.SubscriptionSpec{Destination: router.WebHook("http://127.0.0.1:9/idle")}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := r.CreateSubscription(ctx, "orders", fmt.Sprintf("idle-%07d", i), spec); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
