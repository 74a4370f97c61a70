package actors_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/metrics"
	"github.com/egridio/egrid/testkit"
)

// Every test subscription is "sub" of topic "orders".
const (
	topicName = "orders"
	subName   = "sub"
)

// spec is a WebHook subscription to url with policy, with a dead-letter destination when
// deadLetter is set (without one, ended events are dropped and counted).
func spec(url string, policy router.RetryPolicy, deadLetter bool) router.SubscriptionSpec {
	s := router.SubscriptionSpec{Destination: router.WebHook(url), RetryPolicy: policy}
	if deadLetter {
		s.DeadLetterDestination = &router.DeadLetterDestination{EndpointType: "StorageBlob"}
		s.DeadLetterDestination.Properties.BlobContainerName = "deadletters"
	}
	return s
}

// deliveryCounters are the metrics whose exact values the tests assert (SPEC §7).
var deliveryCounters = []string{
	metrics.DeliverySuccessCount, metrics.DeliveryAttemptFailCount, metrics.DeadLetteredCount, metrics.DroppedEventCount,
}

// counters returns a subscription's delivery counters as "Name{Dim}" → value.
func counters(h *testkit.Harness, topic, sub string) map[string]int64 {
	out := map[string]int64{}
	scope := metrics.SubscriptionScope(topic, sub)
	for k, v := range h.Metrics() {
		if k.Scope != scope || !slices.Contains(deliveryCounters, k.Name) {
			continue
		}
		name := k.Name
		if k.Dim != "" {
			name += "{" + k.Dim + "}"
		}
		out[name] = v
	}
	return out
}

// requireCounters fails the test unless the subscription's delivery counters are exactly want.
func requireCounters(t *testing.T, h *testkit.Harness, topic, sub string, want map[string]int64) {
	t.Helper()
	if got := counters(h, topic, sub); !maps.Equal(got, want) {
		t.Errorf("counters of %s/%s:\n got %v\nwant %v", topic, sub, got, want)
	}
}

// report renders a subscription's delivery timeline, its dead letters and its delivery
// counters: the content of a golden timeline file.
func report(h *testkit.Harness, title, topic, sub string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n", title)
	b.WriteString(h.Timeline(sub))
	if recs := h.DeadLetters(sub).Records(); len(recs) > 0 {
		b.WriteString("# dead letters\n")
		for _, r := range recs {
			last, outcome := "-", "-"
			if r.LastOutcome != 0 {
				outcome = r.LastOutcome.String()
			}
			if !r.LastAttemptTime.IsZero() {
				last = "+" + h.Offset(r.LastAttemptTime).String()
			}
			fmt.Fprintf(&b, "%s %s deliveryAttempts=%d lastDeliveryOutcome=%s lastHttpStatusCode=%d lastDeliveryAttemptTime=%s\n",
				r.Event.ID, r.Reason, r.DeliveryAttempts, outcome, r.LastHTTPStatus, last)
		}
	}
	b.WriteString("# counters\n")
	c := counters(h, topic, sub)
	for _, k := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(&b, "%s %d\n", k, c[k])
	}
	return b.String()
}

// TestDeliveryTimelines publishes one event at +0s to an endpoint scripted to fail and records
// what happens to it in virtual time, without jitter, against golden timelines
// (testdata/timeline-*.golden; -update rewrites them). Each case also states its delivery
// counters and attempt count exactly. The schedules follow SPEC §2.1 (profiles, floors,
// never-retried codes, Retry-After, TTL checked when the next attempt comes due) and §2.2
// (probation: the refused and DNS cases, and the long tails where ten failures in a row put
// the endpoint on probation and each failed probe doubles it).
func TestDeliveryTimelines(t *testing.T) {
	const (
		noDNS   = "nodns" // the endpoint's host does not resolve
		refused = "refused"
	)
	tests := []struct {
		name     string // golden file testdata/timeline-<name>.golden
		title    string
		behavior testkit.Behavior
		host     string // noDNS or refused; empty for a scripted endpoint
		policy   router.RetryPolicy
		noDL     bool // no dead-letter destination: ended events are dropped
		run      time.Duration
		attempts int
		want     map[string]int64
	}{
		{
			name:  "always500-eventgrid",
			title: "always 500, eventgrid profile, defaults (30 attempts, TTL 24 h): the 12 h tail meets the TTL after 11 attempts",
			// Attempts at 0, 10s, 40s, 1m40s, 6m40s, 16m40s, 46m40s, 1h46m40s, 4h46m40s,
			// 10h46m40s (the tenth failure in a row: probation 1 m), 22h46m40s (the probe);
			// the 12th attempt would be due at 34h46m40s, past the 24 h TTL, so the event is
			// dead-lettered then.
			behavior: testkit.Always(500), run: 36 * time.Hour, attempts: 11,
			want: map[string]int64{"DeliveryAttemptFailCount{GenericError}": 11, "DeadLetteredCount{TimeToLiveExceeded}": 1},
		},
		{
			name:     "always500-eventgrid-2019",
			title:    "always 500, eventgrid-2019 profile, defaults: hourly tail, stretched by probation (1 m doubling per failed probe, at most 4 h) until the TTL",
			behavior: testkit.Always(500), policy: router.RetryPolicy{Profile: "eventgrid-2019"}, run: 26 * time.Hour, attempts: 20,
			want: map[string]int64{"DeliveryAttemptFailCount{GenericError}": 20, "DeadLetteredCount{TimeToLiveExceeded}": 1},
		},
		{
			name:     "always500-namespace",
			title:    "always 500, namespace profile, defaults (10 attempts, TTL P1D): the first retry goes at once (seed 002: 0 s, immediate retry)",
			behavior: testkit.Always(500), policy: router.RetryPolicy{Profile: "namespace"}, run: time.Hour, attempts: 10,
			want: map[string]int64{"DeliveryAttemptFailCount{GenericError}": 10, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name:     "ttl30m-max10",
			title:    "always 500, TTL 30 min, max attempts 10: ~6 attempts, dead-lettered when the 7th comes due (+46m40s), not at +30m",
			behavior: testkit.Always(500), policy: router.RetryPolicy{EventTimeToLiveInMinutes: 30, MaxDeliveryAttempts: 10}, run: time.Hour, attempts: 6,
			want: map[string]int64{"DeliveryAttemptFailCount{GenericError}": 6, "DeadLetteredCount{TimeToLiveExceeded}": 1},
		},
		{
			name:     "fail-twice-then-200",
			title:    "500, 500, then 200: delivered on the third attempt",
			behavior: testkit.FailFirst(2, 500), run: time.Hour, attempts: 3,
			want: map[string]int64{"DeliveryAttemptFailCount{GenericError}": 2, "DeliverySuccessCount": 1},
		},
		{
			name: "400-eventgrid", title: "400: dead-lettered after one attempt",
			behavior: testkit.Always(400), run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{BadRequest}": 1, "DeadLetteredCount{UndeliverableDueToHttpBadRequest}": 1},
		},
		{
			name: "400-eventgrid-no-deadletter", title: "400 without a dead-letter destination: dropped and counted after one attempt",
			behavior: testkit.Always(400), noDL: true, run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{BadRequest}": 1, "DroppedEventCount{UndeliverableDueToHttpBadRequest}": 1},
		},
		{
			name: "401-eventgrid", title: "401, eventgrid: never retried",
			behavior: testkit.Always(401), run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{Unauthorized}": 1, "DeadLetteredCount{UndeliverableDueToClientError}": 1},
		},
		{
			name: "403-eventgrid", title: "403, eventgrid: never retried",
			behavior: testkit.Always(403), run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{Forbidden}": 1, "DeadLetteredCount{UndeliverableDueToClientError}": 1},
		},
		{
			name: "404-eventgrid", title: "404, eventgrid: never retried",
			behavior: testkit.Always(404), run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{NotFound}": 1, "DeadLetteredCount{UndeliverableDueToClientError}": 1},
		},
		{
			name: "413-eventgrid", title: "413, eventgrid: never retried",
			behavior: testkit.Always(413), run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{PayloadTooLarge}": 1, "DeadLetteredCount{UndeliverableDueToClientError}": 1},
		},
		{
			name: "400-eventgrid-2019", title: "400, eventgrid-2019 with a dead-letter destination: dead-lettered at once",
			behavior: testkit.Always(400), policy: router.RetryPolicy{Profile: "eventgrid-2019", MaxDeliveryAttempts: 3}, run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{BadRequest}": 1, "DeadLetteredCount{UndeliverableDueToHttpBadRequest}": 1},
		},
		{
			name: "400-eventgrid-2019-no-deadletter", title: "400, eventgrid-2019 without a dead-letter destination: retried with the 5 min floor, max attempts 3",
			behavior: testkit.Always(400), policy: router.RetryPolicy{Profile: "eventgrid-2019", MaxDeliveryAttempts: 3}, noDL: true, run: time.Hour, attempts: 3,
			want: map[string]int64{"DeliveryAttemptFailCount{BadRequest}": 3, "DroppedEventCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name: "401-eventgrid-2019", title: "401, eventgrid-2019: retried with the 5 min floor, each retry the probe after a 5 min Unauthorized probation; max attempts 3",
			behavior: testkit.Always(401), policy: router.RetryPolicy{Profile: "eventgrid-2019", MaxDeliveryAttempts: 3}, run: time.Hour, attempts: 3,
			want: map[string]int64{"DeliveryAttemptFailCount{Unauthorized}": 3, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name: "403-eventgrid-2019", title: "403, eventgrid-2019: retried with the 5 min floor; max attempts 3",
			behavior: testkit.Always(403), policy: router.RetryPolicy{Profile: "eventgrid-2019", MaxDeliveryAttempts: 3}, run: time.Hour, attempts: 3,
			want: map[string]int64{"DeliveryAttemptFailCount{Forbidden}": 3, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name: "404-eventgrid-2019", title: "404, eventgrid-2019: retried with the 5 min floor; max attempts 3",
			behavior: testkit.Always(404), policy: router.RetryPolicy{Profile: "eventgrid-2019", MaxDeliveryAttempts: 3}, run: time.Hour, attempts: 3,
			want: map[string]int64{"DeliveryAttemptFailCount{NotFound}": 3, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name: "413-eventgrid-2019", title: "413, eventgrid-2019 with a dead-letter destination: dead-lettered at once",
			behavior: testkit.Always(413), policy: router.RetryPolicy{Profile: "eventgrid-2019", MaxDeliveryAttempts: 3}, run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{PayloadTooLarge}": 1, "DeadLetteredCount{UndeliverableDueToClientError}": 1},
		},
		{
			name: "413-eventgrid-2019-no-deadletter", title: "413, eventgrid-2019 without a dead-letter destination: retried with the 10 s floor; max attempts 3",
			behavior: testkit.Always(413), policy: router.RetryPolicy{Profile: "eventgrid-2019", MaxDeliveryAttempts: 3}, noDL: true, run: time.Hour, attempts: 3,
			want: map[string]int64{"DeliveryAttemptFailCount{PayloadTooLarge}": 3, "DroppedEventCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name: "401-namespace", title: "401, namespace: never retried",
			behavior: testkit.Always(401), policy: router.RetryPolicy{Profile: "namespace"}, run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{Unauthorized}": 1, "DeadLetteredCount{UndeliverableDueToClientError}": 1},
		},
		{
			name: "403-namespace", title: "403, namespace: never retried",
			behavior: testkit.Always(403), policy: router.RetryPolicy{Profile: "namespace"}, run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{Forbidden}": 1, "DeadLetteredCount{UndeliverableDueToClientError}": 1},
		},
		{
			name: "404-namespace", title: "404, namespace: never retried",
			behavior: testkit.Always(404), policy: router.RetryPolicy{Profile: "namespace"}, run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{NotFound}": 1, "DeadLetteredCount{UndeliverableDueToClientError}": 1},
		},
		{
			name: "413-namespace", title: "413, namespace: never retried",
			behavior: testkit.Always(413), policy: router.RetryPolicy{Profile: "namespace"}, run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{PayloadTooLarge}": 1, "DeadLetteredCount{UndeliverableDueToClientError}": 1},
		},
		{
			name: "408", title: "408: no retry sooner than 2 min (TimedOut, probation 10 s); max attempts 5",
			behavior: testkit.Always(408), policy: router.RetryPolicy{MaxDeliveryAttempts: 5}, run: time.Hour, attempts: 5,
			want: map[string]int64{"DeliveryAttemptFailCount{TimedOut}": 5, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name: "503", title: "503: no retry sooner than 30 s (Busy, probation 10 s); max attempts 5",
			behavior: testkit.Always(503), policy: router.RetryPolicy{MaxDeliveryAttempts: 5}, run: time.Hour, attempts: 5,
			want: map[string]int64{"DeliveryAttemptFailCount{Busy}": 5, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name: "429-retry-after-90s", title: "429 with Retry-After: 90 and honorRetryAfter (an egrid extension): no retry sooner than 90 s, then the schedule once it is longer; max attempts 5",
			behavior: testkit.RetryAfter(429, 90*time.Second), policy: router.RetryPolicy{MaxDeliveryAttempts: 5, HonorRetryAfter: ptr(true)}, run: time.Hour, attempts: 5,
			want: map[string]int64{"DeliveryAttemptFailCount{Busy}": 5, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			// Azure documents no Retry-After handling: by default egrid retries on the schedule
			// and floors (learn.microsoft.com/azure/event-grid/delivery-and-retry).
			name: "429-retry-after-ignored", title: "429 with Retry-After: 90, Azure's documented behaviour: the header is ignored, the schedule and floors apply; max attempts 5",
			behavior: testkit.RetryAfter(429, 90*time.Second), policy: router.RetryPolicy{MaxDeliveryAttempts: 5}, run: time.Hour, attempts: 5,
			want: map[string]int64{"DeliveryAttemptFailCount{Busy}": 5, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name: "timeout", title: "no answer: each attempt times out after 30 s; the delay counts from the timeout (probation 10 s); max attempts 4",
			behavior: testkit.Hang(), policy: router.RetryPolicy{MaxDeliveryAttempts: 4}, run: time.Hour, attempts: 4,
			want: map[string]int64{"DeliveryAttemptFailCount{TimedOut}": 4, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name: "connection-refused", title: "connection refused: SocketError, probation 30 s holds the 10 s and 30 s retries back; each retry is then the probe; max attempts 5",
			host: refused, policy: router.RetryPolicy{MaxDeliveryAttempts: 5}, run: time.Hour, attempts: 5,
			want: map[string]int64{"DeliveryAttemptFailCount{SocketError}": 5, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1},
		},
		{
			name: "dns-failure", title: "DNS failure: ResolutionError puts the endpoint on a 5 min client-error probation; the retry due at +10s is dead-lettered without an attempt",
			host: noDNS, run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{ResolutionError}": 1, "DeadLetteredCount{UndeliverableDueToProbationCausedByClientError}": 1},
		},
		{
			name: "dns-failure-no-deadletter", title: "DNS failure without a dead-letter destination: the retry is dropped without an attempt",
			host: noDNS, noDL: true, run: time.Hour, attempts: 1,
			want: map[string]int64{"DeliveryAttemptFailCount{ResolutionError}": 1, "DroppedEventCount{UndeliverableDueToProbationCausedByClientError}": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
				url := "http://unknown-host.test/api/events"
				var hook *testkit.Endpoint
				if tt.host != noDNS {
					hook = h.Endpoint("hook", tt.behavior)
					url = hook.URL()
				}
				if tt.host == refused {
					h.Transport().Refuse("hook.test")
				}
				h.Subscribe(topicName, subName, spec(url, tt.policy, !tt.noDL))
				h.Publish(topicName, h.EventGridEvent(testkit.ID("evt-1")))
				h.Advance(tt.run)

				got := report(h, tt.title, topicName, subName)
				testkit.Golden(t, "timeline-"+tt.name, got)
				attempts := 0
				for _, r := range h.AttemptRecords(subName) {
					if !r.NoAttempt {
						attempts++
					}
				}
				if attempts != tt.attempts {
					t.Errorf("%d attempts, want %d", attempts, tt.attempts)
				}
				if hook != nil && tt.host != refused {
					hook.RequireAttempts(t, tt.attempts)
				}
				requireCounters(t, h, topicName, subName, tt.want)
				if st, err := h.Router().Status(t.Context(), topicName, subName); err != nil || st.Backlog != 0 {
					t.Errorf("status after the run: %+v, %v; want an empty backlog", st, err)
				}
			}, testkit.WithoutJitter())
		})
	}
}

// The time to live is checked only when the next attempt comes due (SPEC §2.1): an event
// with a 30-minute TTL whose sixth attempt failed at +16m40s is still parked at +30m and
// later, and is dead-lettered at +46m40s, when its seventh attempt comes due.
func TestTTLEndsWhenTheNextAttemptComesDue(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.Always(http.StatusInternalServerError))
		h.CreateSubscription(topicName, subName, hook, router.RetryPolicy{EventTimeToLiveInMinutes: 30, MaxDeliveryAttempts: 10})
		h.Publish(topicName, h.EventGridEvent(testkit.ID("evt-1")))

		h.Advance(46*time.Minute + 39*time.Second)
		hook.RequireAttempts(t, 6)
		h.DeadLetters(subName).RequireNone(t)
		st, err := h.Router().Status(t.Context(), topicName, subName)
		if err != nil || st.Backlog != 1 {
			t.Fatalf("status at +46m39s: %+v, %v; want the event still parked", st, err)
		}

		h.Advance(time.Second)
		hook.RequireAttempts(t, 6)
		recs := h.DeadLetters(subName).Records()
		if len(recs) != 1 || recs[0].Reason != "TimeToLiveExceeded" || recs[0].DeliveryAttempts != 6 {
			t.Fatalf("dead letters at +46m40s: %+v; want evt-1, TimeToLiveExceeded after 6 attempts", recs)
		}
		last := h.AttemptRecords(subName)
		end := last[len(last)-1]
		if !end.NoAttempt || h.Elapsed() != 46*time.Minute+40*time.Second || !end.Time.Equal(time.Now()) {
			t.Errorf("last record %+v at +%v; want the no-attempt end at +46m40s", end, h.Elapsed())
		}
	}, testkit.WithoutJitter())
}

// Jitter is on by default: each retry comes 0-10 % later than the exact schedule (SPEC §2.1),
// and the same subscription, event and attempt always get the same jitter.
func TestJitterStaysWithinTenPercent(t *testing.T) {
	schedule := []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour}
	run := func(t *testing.T) (string, []testkit.Attempt) {
		var timeline string
		var attempts []testkit.Attempt
		testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
			hook := h.Endpoint("hook", testkit.Always(http.StatusInternalServerError))
			h.CreateSubscription(topicName, subName, hook, router.RetryPolicy{MaxDeliveryAttempts: len(schedule) + 1})
			h.Publish(topicName, h.EventGridEvent(testkit.ID("evt-1")))
			h.Advance(3 * time.Hour)
			timeline, attempts = h.Timeline(subName), hook.Attempts()
		})
		return timeline, attempts
	}
	timeline, attempts := run(t)
	if len(attempts) != len(schedule)+1 {
		t.Fatalf("%d attempts, want %d:\n%s", len(attempts), len(schedule)+1, timeline)
	}
	jittered := 0
	for i, exact := range schedule {
		gap := attempts[i+1].At - attempts[i].At
		if gap < exact || gap >= exact+exact/10 {
			t.Errorf("retry %d came %v after attempt %d; want within [%v, %v)", i+1, gap, i+1, exact, exact+exact/10)
		}
		if gap > exact {
			jittered++
		}
	}
	if jittered == 0 {
		t.Errorf("no retry was jittered:\n%s", timeline)
	}
	if again, _ := run(t); again != timeline {
		t.Errorf("the jitter is not deterministic:\n%s\nthen\n%s", timeline, again)
	}
}

// A poison event that one endpoint always refuses, while the endpoint accepts everything else:
// the steady successes keep it off probation, so with the eventgrid-2019 profile and
// maxDeliveryAttempts 30 all 30 attempts happen inside the 24-hour TTL — 23h46m40s of virtual
// time, in well under a second of real time (logged, not asserted).
func TestThirtyAttemptsInTwentyFourHours(t *testing.T) {
	wall := time.Now()
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		hook := h.Endpoint("hook", testkit.RejectEvents(http.StatusInternalServerError, "poison"))
		h.CreateSubscription(topicName, subName, hook, router.RetryPolicy{Profile: "eventgrid-2019", MaxDeliveryAttempts: 30})
		h.Publish(topicName, h.EventGridEvent(testkit.ID("poison")))
		for i := range 24 {
			h.Publish(topicName, h.EventGridEvent(testkit.ID(fmt.Sprintf("ok-%02d", i))))
			h.Advance(time.Hour)
		}

		var lines []string
		for _, l := range strings.SplitAfter(h.Timeline(subName), "\n") {
			if strings.Contains(l, " poison ") {
				lines = append(lines, l)
			}
		}
		testkit.Golden(t, "timeline-poison-30-attempts", "# poison event, eventgrid-2019, maxDeliveryAttempts 30, endpoint healthy for other events\n"+strings.Join(lines, ""))
		if len(lines) != 30 {
			t.Errorf("poison event: %d timeline lines, want 30", len(lines))
		}
		recs := h.DeadLetters(subName).Records()
		if len(recs) != 1 || recs[0].Event.ID != "poison" || recs[0].Reason != "MaxDeliveryAttemptsExceeded" || recs[0].DeliveryAttempts != 30 {
			t.Fatalf("dead letters %+v; want poison after 30 attempts, MaxDeliveryAttemptsExceeded", recs)
		}
		if last := recs[0].LastAttemptTime.Sub(recs[0].PublishTime); last != 23*time.Hour+46*time.Minute+40*time.Second {
			t.Errorf("30th attempt at +%v, want +23h46m40s", last)
		}
		for _, a := range hook.Attempts() {
			if ids := a.EventIDs(); ids[0] != "poison" && (a.Status != 200 || a.At%time.Hour != 0) {
				t.Errorf("%v answered %d at +%v; want 200 on the hour, when published", ids, a.Status, a.At)
			}
		}
		requireCounters(t, h, topicName, subName, map[string]int64{
			"DeliverySuccessCount": 24, "DeliveryAttemptFailCount{GenericError}": 30, "DeadLetteredCount{MaxDeliveryAttemptsExceeded}": 1,
		})
	}, testkit.WithoutJitter())
	t.Logf("30 attempts over 23h46m40s of virtual time took %v of real time", time.Since(wall))
}

func ptr[T any](v T) *T { return &v }
