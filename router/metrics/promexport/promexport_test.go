package promexport_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/router/metrics/promexport"
)

// TestCollect pins the exposition of a known Set: names, label names and values, histogram
// buckets in seconds, and the gauges read at the collector's clock.
func TestCollect(t *testing.T) {
	set := new(metrics.Set)
	sub := metrics.SubscriptionScope("orders", "billing")
	set.Add(metrics.Key{Name: metrics.PublishFailCount, Scope: "orders", Dim: "ServiceUnavailable"}, 2)
	set.Add(metrics.Key{Name: metrics.DeliveryAttemptFailCount, Scope: sub, Dim: "Busy"}, 3)
	set.Add(metrics.Key{Name: "SomethingElse", Scope: "orders"}, 1) // not exported
	set.Add(metrics.Key{Name: metrics.StoreCorruptionCount, Dim: "wal"}, 1)
	set.Observe(metrics.Key{Name: metrics.DestinationProcessingDurationInMs, Scope: sub}, 20*time.Millisecond)
	set.Observe(metrics.Key{Name: metrics.DestinationProcessingDurationInMs, Scope: sub}, 3*time.Second)
	now := time.Unix(10_000, 0)
	g := set.PublishGauges("orders", "billing")
	g.Backlog.Store(7)
	g.InFlight.Store(2)
	g.Oldest.Store(now.Add(-90 * time.Second).UnixNano())
	g.Probation.Store(metrics.ProbationOnProbation)
	g.ProbationUntil.Store(now.Add(time.Second).UnixNano())
	set.SetOutbox(4)

	c := promexport.New(set, func() time.Time { return now })
	want := `
# HELP egrid_publish_fail_count Events refused by the topic, by error. (Event Grid: PublishFailCount)
# TYPE egrid_publish_fail_count counter
egrid_publish_fail_count{error="ServiceUnavailable",topic="orders"} 2
# HELP egrid_delivery_attempt_fail_count Failed delivery attempts, per event, by outcome. (Event Grid: DeliveryAttemptFailCount)
# TYPE egrid_delivery_attempt_fail_count counter
egrid_delivery_attempt_fail_count{error="Busy",subscription="billing",topic="orders"} 3
# HELP egrid_store_corruption_count Damage the store found, by kind (marker, wal, table, entry, definition); each is logged as an ERROR (egrid only).
# TYPE egrid_store_corruption_count counter
egrid_store_corruption_count{kind="wal"} 1
# HELP egrid_backlog_events Events of the event subscription neither delivered nor ended: ready, in flight, parked for retry, or not yet read from the journal.
# TYPE egrid_backlog_events gauge
egrid_backlog_events{subscription="billing",topic="orders"} 7
# HELP egrid_in_flight_attempts Delivery attempts of the event subscription running now.
# TYPE egrid_in_flight_attempts gauge
egrid_in_flight_attempts{subscription="billing",topic="orders"} 2
# HELP egrid_oldest_undelivered_age_seconds Age of the oldest event of the event subscription not delivered yet (0 when none).
# TYPE egrid_oldest_undelivered_age_seconds gauge
egrid_oldest_undelivered_age_seconds{subscription="billing",topic="orders"} 90
# HELP egrid_probation_state The endpoint's probation state: 0 Healthy, 1 OnProbation, 2 AwaitingProbe, 3 ProbeInFlight.
# TYPE egrid_probation_state gauge
egrid_probation_state{subscription="billing",topic="orders"} 1
# HELP egrid_dead_letter_outbox_events Dead letters waiting in the outbox to be written to the dead-letter destination.
# TYPE egrid_dead_letter_outbox_events gauge
egrid_dead_letter_outbox_events 4
`
	names := []string{"egrid_publish_fail_count", "egrid_delivery_attempt_fail_count", "egrid_store_corruption_count", "egrid_backlog_events",
		"egrid_in_flight_attempts", "egrid_oldest_undelivered_age_seconds", "egrid_probation_state", "egrid_dead_letter_outbox_events"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c); n != 9 { // the eight above and the histogram
		t.Errorf("%d samples, want 9 (SomethingElse is not exported)", n)
	}

	// The histogram, in seconds: 20 ms is in le=0.025 and up, 3 s in le=5 and up.
	var hist strings.Builder
	hist.WriteString(`# HELP egrid_destination_processing_duration_seconds Time a destination took to answer a delivery attempt (Event Grid: DestinationProcessingDurationInMs).
# TYPE egrid_destination_processing_duration_seconds histogram
`)
	for _, b := range []struct {
		le string
		n  int
	}{
		{"0.001", 0}, {"0.0025", 0}, {"0.005", 0}, {"0.01", 0}, {"0.025", 1}, {"0.05", 1}, {"0.1", 1}, {"0.25", 1},
		{"0.5", 1}, {"1", 1}, {"2.5", 1}, {"5", 2}, {"10", 2}, {"30", 2}, {"60", 2}, {"300", 2}, {"900", 2},
		{"3600", 2}, {"7200", 2}, {"+Inf", 2},
	} {
		fmt.Fprintf(&hist, "egrid_destination_processing_duration_seconds_bucket{subscription=\"billing\",topic=\"orders\",le=%q} %d\n", b.le, b.n)
	}
	hist.WriteString(`egrid_destination_processing_duration_seconds_sum{subscription="billing",topic="orders"} 3.02
egrid_destination_processing_duration_seconds_count{subscription="billing",topic="orders"} 2
`)
	if err := testutil.CollectAndCompare(c, strings.NewReader(hist.String()), "egrid_destination_processing_duration_seconds"); err != nil {
		t.Error(err)
	}
}
