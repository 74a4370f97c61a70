package router_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/probes"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/sinks"
	"github.com/egridio/egrid/testkit"
)

// value returns the value of the sample of family name with the topic and subscription labels
// (subscription "" for a topic's or the router's metric), and whether there is one.
func value(t *testing.T, reg *prometheus.Registry, name, topic, sub string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["topic"] != topic || labels["subscription"] != sub {
				continue
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// TestCollectorInACustomRegistry registers Router.Collector in a host's own registry and
// reads, in virtual time, the gauges the subscription actors publish: backlog, attempts in
// flight and the oldest event's age, and the dead-letter outbox; a deleted subscription's
// gauges go away.
func TestCollectorInACustomRegistry(t *testing.T) {
	testkit.Run(t, func(t *testing.T, h *testkit.Harness) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(h.Router().Collector()) // a checked collector: Describe matches Collect
		failing := h.Endpoint("failing", testkit.Always(http.StatusInternalServerError))
		hung := h.Endpoint("hung", testkit.Hang())
		rejecting := h.Endpoint("rejecting", testkit.Always(http.StatusBadRequest))
		h.CreateSubscription("orders", "retrying", failing, router.RetryPolicy{MaxDeliveryAttempts: 30})
		h.CreateSubscription("orders", "hung", hung, router.RetryPolicy{})
		h.Subscribe("orders", "dead", deadLettering(rejecting.URL()))
		h.Publish("orders", h.EventGridEvent(), h.EventGridEvent())
		h.Settle()
		if got, _ := value(t, reg, "egrid_in_flight_attempts", "orders", "hung"); got != 2 {
			t.Errorf("egrid_in_flight_attempts{hung} = %v, want 2 (both events' requests hang)", got)
		}
		h.Advance(time.Minute)

		for _, c := range []struct {
			name, sub string
			want      float64
		}{
			{"egrid_publish_success_count", "", 2},
			{"egrid_publish_success_latency_seconds", "", 1}, // one publish call
			{"egrid_backlog_events", "retrying", 2},
			{"egrid_oldest_undelivered_age_seconds", "retrying", 60},
			{"egrid_in_flight_attempts", "retrying", 0},
			{"egrid_backlog_events", "hung", 2},
			{"egrid_oldest_undelivered_age_seconds", "hung", 60},
			{"egrid_backlog_events", "dead", 0},
			{"egrid_dead_lettered_count", "dead", 2},
			{"egrid_dead_letter_outbox_events", "", 2}, // written 5 minutes after the last attempt
		} {
			topic := "orders"
			if c.name == "egrid_dead_letter_outbox_events" {
				topic = ""
			}
			got, ok := value(t, reg, c.name, topic, c.sub)
			if !ok || got != c.want {
				t.Errorf("%s{%s} = %v (present %v), want %v", c.name, c.sub, got, ok, c.want)
			}
		}
		failCount, _ := value(t, reg, "egrid_delivery_attempt_fail_count", "orders", "retrying")
		if want := float64(len(failing.Attempts())); failCount != want || want < 4 {
			t.Errorf("egrid_delivery_attempt_fail_count{retrying} = %v, want %v (one per request: each event goes alone)", failCount, want)
		}

		h.Advance(5 * time.Minute)
		if got, _ := value(t, reg, "egrid_dead_letter_outbox_events", "", ""); got != 0 {
			t.Errorf("egrid_dead_letter_outbox_events after the write = %v, want 0", got)
		}
		// A replay runs a second actor under the subscription's name; the live one keeps its gauges.
		if _, err := h.Router().ReplayDeadLetters(context.Background(), "orders", "dead", router.ReplayOptions{Wait: true}); err != nil {
			t.Fatal(err)
		}
		h.Settle()
		if _, ok := value(t, reg, "egrid_backlog_events", "orders", "dead"); !ok {
			t.Error("egrid_backlog_events{dead} is gone after a replay of its dead letters")
		}
		if err := h.Router().DeleteSubscription(context.Background(), "orders", "retrying"); err != nil {
			t.Fatal(err)
		}
		h.Settle()
		if got, ok := value(t, reg, "egrid_backlog_events", "orders", "retrying"); ok {
			t.Errorf("egrid_backlog_events of a deleted subscription = %v, want no sample", got)
		}
		if n := testutil.CollectAndCount(h.Router().Collector(), "egrid_backlog_events"); n != 2 {
			t.Errorf("%d egrid_backlog_events samples, want 2 (hung, dead)", n)
		}
	}, testkit.WithoutJitter())
}

// healthStore is a store whose health a test sets.
type healthStore struct {
	store.Store
	health store.Health
}

func (s *healthStore) Health() store.Health { return s.health }

// pingStore is a dead-letter store that answers Ping with err, counting the pings. While
// hold is not nil, a ping waits for it to close.
type pingStore struct {
	*testkit.ObjectStore
	mu    sync.Mutex
	err   error
	pings int
	hold  chan struct{}
}

func (s *pingStore) Ping(ctx context.Context) error {
	s.mu.Lock()
	s.pings++
	err, hold := s.err, s.hold
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (s *pingStore) set(err error, hold chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err, s.hold = err, hold
}

func (s *pingStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pings
}

func failedChecks(rep probes.Report) string {
	var failed []string
	for _, c := range rep.Checks {
		if !c.OK {
			failed = append(failed, c.Name+": "+c.Error)
		}
	}
	return strings.Join(failed, "; ")
}

// TestReadinessChecks: ready with a healthy store and a reachable dead-letter store; not
// ready, naming the check, when the store has failed, when MinIO does not answer, and once
// the router is closed. A failed check says what is wrong and where to look, and never the
// reason itself, which can name the server's files or MinIO's address: /readyz needs no
// credentials.
func TestReadinessChecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &healthStore{Store: store.NewMemory()}
		dl := &pingStore{ObjectStore: testkit.NewObjectStore()}
		var logMu sync.Mutex
		var logs bytes.Buffer
		r, err := router.New(router.Config{}, router.Deps{Store: st, DeadLetterStore: dl, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		run := func() probes.Report { return probes.Run(context.Background(), time.Minute, r.ReadinessChecks()) }
		if rep := run(); !rep.Ready || len(rep.Checks) != 3 {
			t.Fatalf("healthy router: %+v, want ready with the store, actors and deadLetterStore checks", rep)
		}

		st.health = store.Health{State: store.Failed, Reason: "reopening the store in /var/lib/egrid/data: pebble: 000123.sst: corrupt"}
		if rep := run(); rep.Ready || failedChecks(rep) != "store: the store is failed: see the log or GET /admin/health with the admin token" {
			t.Errorf("failed store: ready %v, failed checks %q", rep.Ready, failedChecks(rep))
		}
		if h := r.Health(); h.Reason != st.health.Reason {
			t.Errorf("Health().Reason = %q, want the store's reason %q", h.Reason, st.health.Reason)
		}
		st.health = store.Health{}

		dl.set(errors.New("reaching minio at 10.1.2.3:9000: connection refused"), nil)
		testkit.Advance(router.PingInterval) // past the healthy ping's result
		if rep := run(); rep.Ready || failedChecks(rep) != router.CheckDeadLetters+": the dead-letter store does not answer: see the log" {
			t.Errorf("MinIO down: ready %v, failed checks %q", rep.Ready, failedChecks(rep))
		}
		logMu.Lock()
		logged := logs.String()
		logMu.Unlock()
		if !strings.Contains(logged, "10.1.2.3:9000: connection refused") {
			t.Errorf("MinIO down: the log does not say why:\n%s", logged)
		}

		// Credentials MinIO refuses are said to be refused, with the flags to check: not that
		// MinIO does not answer.
		dl.set(fmt.Errorf("minio at 10.1.2.3:9000 answers but does not accept the credentials: %w",
			&sinks.Refusal{Code: "SignatureDoesNotMatch", Credentials: true, Err: errors.New("The request signature we calculated does not match")}), nil)
		testkit.Advance(router.PingInterval)
		if rep := run(); rep.Ready || failedChecks(rep) != router.CheckDeadLetters+": the dead-letter store refused the credentials: "+router.MinIOCredentialsHint {
			t.Errorf("wrong credentials: ready %v, failed checks %q", rep.Ready, failedChecks(rep))
		}
		if !strings.Contains(router.MinIOCredentialsHint, "--minio-access-key") || !strings.Contains(router.MinIOCredentialsHint, "--minio-secret-key-file") {
			t.Errorf("the hint %q does not name the flags", router.MinIOCredentialsHint)
		}
		dl.set(nil, nil)
		testkit.Advance(router.PingInterval)

		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if rep := run(); rep.Ready || failedChecks(rep) != "actors: the router is shutting down" {
			t.Errorf("closed router: ready %v, failed checks %q", rep.Ready, failedChecks(rep))
		}
	})
}

// Readiness probes ping the dead-letter store at most once a PingInterval and one at a time:
// each GET /readyz, which needs no credentials, called MinIO's ListBuckets, so a flood of
// probes was a flood of MinIO.
func TestReadinessPingsTheDeadLetterStoreAtMostOnceAnInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := store.NewMemory()
		defer st.Close()
		dl := &pingStore{ObjectStore: testkit.NewObjectStore()}
		r, err := router.New(router.Config{}, router.Deps{Store: st, DeadLetterStore: dl})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		h := probes.Readiness(r.ReadinessChecks, probes.DefaultTimeout)
		probe := func() int {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, probes.ReadinessPath, nil))
			return w.Code
		}

		// Probes that overlap a ping wait for it and take its result.
		hold := make(chan struct{})
		dl.set(nil, hold)
		codes := make(chan int, 20)
		for range 20 {
			go func() { codes <- probe() }()
		}
		synctest.Wait()
		if n := dl.count(); n != 1 {
			t.Errorf("20 overlapping probes pinged %d times, want 1", n)
		}
		close(hold)
		dl.set(nil, nil)
		for range 20 {
			if c := <-codes; c != http.StatusOK {
				t.Errorf("overlapping probe: %d, want 200", c)
			}
		}

		// Probes within the interval take the last result.
		for range 50 {
			probe()
		}
		if n := dl.count(); n != 1 {
			t.Errorf("50 more probes within %v pinged %d times in all, want 1", router.PingInterval, n)
		}
		testkit.Advance(router.PingInterval)
		for range 50 {
			probe()
		}
		if n := dl.count(); n != 2 {
			t.Errorf("50 probes in the next interval: %d pings in all, want 2", n)
		}
	})
}
