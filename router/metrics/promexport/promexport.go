package promexport

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egridio/egrid/router/metrics"
)

// Label names.
const (
	LabelTopic        = "topic"
	LabelSubscription = "subscription"
	LabelError        = "error"
	LabelReason       = "reason"
	LabelKind         = "kind"
)

// counter maps one of Event Grid's counters to its Prometheus form.
type counter struct {
	name    string // Event Grid's name, the metrics.Key Name
	desc    *prometheus.Desc
	perSub  bool   // labelled by topic and subscription; else by topic
	dim     string // the label of metrics.Key.Dim, or ""
	noTopic bool   // the router's own: no topic label
}

// histogram maps one of the Set's histograms.
type histogram struct {
	name   string
	desc   *prometheus.Desc
	perSub bool
}

func newCounter(name, promName, help string, perSub bool, dim string) counter {
	labels := []string{LabelTopic}
	if perSub {
		labels = append(labels, LabelSubscription)
	}
	if dim != "" {
		labels = append(labels, dim)
	}
	return counter{name: name, perSub: perSub, dim: dim, desc: prometheus.NewDesc(promName, help+" (Event Grid: "+name+")", labels, nil)}
}

var counters = []counter{
	newCounter(metrics.PublishSuccessCount, "egrid_publish_success_count", "Events accepted (durable) by the topic.", false, ""),
	newCounter(metrics.PublishFailCount, "egrid_publish_fail_count", "Events refused by the topic, by error.", false, LabelError),
	newCounter(metrics.UnmatchedEventCount, "egrid_unmatched_event_count", "Events that matched no event subscription of the topic.", false, ""),
	newCounter(metrics.MatchedEventCount, "egrid_matched_event_count", "Events that matched the event subscription's filter.", true, ""),
	newCounter(metrics.DeliverySuccessCount, "egrid_delivery_success_count", "Events delivered to the endpoint.", true, ""),
	newCounter(metrics.DeliveryAttemptFailCount, "egrid_delivery_attempt_fail_count", "Failed delivery attempts, per event, by outcome.", true, LabelError),
	newCounter(metrics.DeadLetteredCount, "egrid_dead_lettered_count", "Events dead-lettered, by dead-letter reason.", true, LabelReason),
	newCounter(metrics.DroppedEventCount, "egrid_dropped_event_count", "Events that ended without delivery and were not dead-lettered, by reason.", true, LabelReason),
	newCounter(metrics.AdvancedFilterEvaluationCount, "egrid_advanced_filter_evaluation_count", "Events evaluated against the event subscription's advanced filters.", true, ""),
	newCounter(metrics.SuccessfulReceivedEvents, "egrid_successful_received_events", "Events handed to consumers of a queue subscription.", true, ""),
	newCounter(metrics.SuccessfulAcknowledgedEvents, "egrid_successful_acknowledged_events", "Events of a queue subscription acknowledged by lock token.", true, ""),
	newCounter(metrics.FailedAcknowledgedEvents, "egrid_failed_acknowledged_events", "Lock tokens an acknowledge refused, by error code (BadToken, TokenLost).", true, LabelError),
	newCounter(metrics.SuccessfulReleasedEvents, "egrid_successful_released_events", "Events of a queue subscription released by lock token.", true, ""),
	newCounter(metrics.FailedReleasedEvents, "egrid_failed_released_events", "Lock tokens a release refused, by error code.", true, LabelError),
	newCounter(metrics.SuccessfulRejectedEvents, "egrid_successful_rejected_events", "Events of a queue subscription rejected by lock token.", true, ""),
	newCounter(metrics.FailedRejectedEvents, "egrid_failed_rejected_events", "Lock tokens a reject refused, by error code.", true, LabelError),
	newCounter(metrics.SuccessfulRenewedLockEvents, "egrid_successful_renewed_lock_events", "Locks of a queue subscription's events renewed.", true, ""),
	newCounter(metrics.FailedRenewedLockEvents, "egrid_failed_renewed_lock_events", "Lock tokens a lock renewal refused, by error code.", true, LabelError),
	{name: metrics.StoreCorruptionCount, dim: LabelKind, noTopic: true, desc: prometheus.NewDesc("egrid_store_corruption_count",
		"Damage the store found, by kind (marker, wal, table, entry, definition); each is logged as an ERROR (egrid only).", []string{LabelKind}, nil)},
}

var histograms = []histogram{
	{metrics.PublishSuccessLatencyInMs, prometheus.NewDesc("egrid_publish_success_latency_seconds",
		"Time from a publish request's decoded events to their durable acknowledgement (Event Grid: PublishSuccessLatencyInMs).",
		[]string{LabelTopic}, nil), false},
	{metrics.DestinationProcessingDurationInMs, prometheus.NewDesc("egrid_destination_processing_duration_seconds",
		"Time a destination took to answer a delivery attempt (Event Grid: DestinationProcessingDurationInMs).",
		[]string{LabelTopic, LabelSubscription}, nil), true},
	{metrics.DeliveryLatency, prometheus.NewDesc("egrid_delivery_latency_seconds",
		"Time from an event's publish to its delivery, per delivered event (egrid only).",
		[]string{LabelTopic, LabelSubscription}, nil), true},
}

var (
	subLabels    = []string{LabelTopic, LabelSubscription}
	backlogDesc  = prometheus.NewDesc("egrid_backlog_events", "Events of the event subscription neither delivered nor ended: ready, in flight, parked for retry, or not yet read from the journal.", subLabels, nil)
	inFlightDesc = prometheus.NewDesc("egrid_in_flight_attempts", "Delivery attempts of the event subscription running now.", subLabels, nil)
	oldestDesc   = prometheus.NewDesc("egrid_oldest_undelivered_age_seconds", "Age of the oldest event of the event subscription not delivered yet (0 when none).", subLabels, nil)
	probDesc     = prometheus.NewDesc("egrid_probation_state", "The endpoint's probation state: 0 Healthy, 1 OnProbation, 2 AwaitingProbe, 3 ProbeInFlight.", subLabels, nil)
	outboxDesc   = prometheus.NewDesc("egrid_dead_letter_outbox_events", "Dead letters waiting in the outbox to be written to the dead-letter destination.", nil, nil)
)

// Collector is a prometheus.Collector over a [metrics.Set]. It is safe for concurrent use.
type Collector struct {
	set *metrics.Set
	now func() time.Time
}

// New returns a collector of set. now is the clock of the oldest-undelivered age; nil means
// time.Now.
func New(set *metrics.Set, now func() time.Time) *Collector {
	if now == nil {
		now = time.Now
	}
	return &Collector{set: set, now: now}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range counters {
		ch <- m.desc
	}
	for _, h := range histograms {
		ch <- h.desc
	}
	for _, d := range []*prometheus.Desc{backlogDesc, inFlightDesc, oldestDesc, probDesc, outboxDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads the counters, histograms and the gauges
// the actors last published.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	byName := make(map[string]*counter, len(counters))
	for i := range counters {
		byName[counters[i].name] = &counters[i]
	}
	for k, v := range c.set.Snapshot() {
		m, ok := byName[k.Name]
		if !ok {
			continue
		}
		lv := []string{k.Dim}
		if !m.noTopic {
			lv = labels(k, m.perSub, m.dim != "")
		}
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(v), lv...)
	}
	hists := make(map[string]*histogram, len(histograms))
	for i := range histograms {
		hists[histograms[i].name] = &histograms[i]
	}
	c.set.EachHistogram(func(k metrics.Key, h *metrics.Histogram) {
		m, ok := hists[k.Name]
		if !ok {
			return
		}
		s := h.Snapshot()
		buckets := make(map[float64]uint64, len(metrics.Bounds))
		for i, b := range metrics.Bounds {
			buckets[b.Seconds()] = s.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(m.desc, s.Count, s.Sum.Seconds(), buckets, labels(k, m.perSub, false)...)
	})
	now := c.now()
	c.set.EachGauges(func(topic, sub string, g *metrics.SubscriptionGauges) {
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(g.Backlog.Load()), topic, sub)
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(g.InFlight.Load()), topic, sub)
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, g.OldestAge(now).Seconds(), topic, sub)
		ch <- prometheus.MustNewConstMetric(probDesc, prometheus.GaugeValue, float64(g.ProbationAt(now)), topic, sub)
	})
	ch <- prometheus.MustNewConstMetric(outboxDesc, prometheus.GaugeValue, float64(c.set.Outbox()))
}

// labels returns the label values of k: topic, then subscription when perSub, then the
// dimension when dim.
func labels(k metrics.Key, perSub, dim bool) []string {
	topic, sub := metrics.SplitScope(k.Scope)
	out := []string{topic}
	if perSub {
		out = append(out, sub)
	}
	if dim {
		out = append(out, k.Dim)
	}
	return out
}
