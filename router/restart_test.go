package router_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// TestRestartDeliversEveryParkedEvent restarts a router on a disk store holding 10 000 events
// parked for retry across 100 subscriptions (written straight through the store API, as
// `egrid bench --scenario restart` does with a million) and checks the restart path: every
// parked event is delivered exactly once, as the attempt after the ones it had
// (aeg-delivery-count), and none before its due time; the subscriptions end settled.
func TestRestartDeliversEveryParkedEvent(t *testing.T) {
	const subs, perSub = 100, 100
	ctx := context.Background()

	type delivery struct {
		count string
		at    time.Time
	}
	var mu sync.Mutex
	got := map[string][]delivery{} // "sub/event id" → its deliveries
	all := make(chan struct{})     // closed when every parked event has arrived
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		at := time.Now()
		i := bytes.Index(body, []byte(`"id":"`))
		if i < 0 {
			t.Errorf("delivery without an id: %s", body)
			return
		}
		id, _, _ := strings.Cut(string(body[i+len(`"id":"`):]), `"`)
		key := strings.TrimPrefix(req.URL.Path, "/") + "/" + id
		mu.Lock()
		got[key] = append(got[key], delivery{count: req.Header.Get(schemas.HeaderDeliveryCount), at: at})
		if len(got) == subs*perSub && len(got[key]) == 1 {
			close(all)
		}
		mu.Unlock()
	}))
	defer endpoint.Close()

	dir := t.TempDir()
	cfg := router.Config{InsecureDev: true, SkipEndpointValidation: true, MaxSubscriptionsPerTopic: subs}
	st, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateTopic(ctx, "orders", router.TopicSpec{}); err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("sub-%03d", i) }
	for i := range subs {
		if err := r.CreateSubscription(ctx, "orders", name(i), router.SubscriptionSpec{Destination: router.WebHook(endpoint.URL + "/" + name(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The journal holds perSub events; every subscription parked every one of them after 1
	// to 3 attempts: the even ones due already, the odd ones due a second after the restart.
	var raw []string
	for j := range perSub {
		raw = append(raw, fmt.Sprintf(`{"id":"e%03d","subject":"/o/%d","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`, j, j))
	}
	evs, err := schemas.DecodeEventGrid([]byte("["+strings.Join(raw, ",")+"]"), "/topics/orders", schemas.ClassicLimits)
	if err != nil {
		t.Fatal(err)
	}
	publish := time.Now().Add(-time.Minute)
	last, err := st.Append(ctx, "orders", publish, evs)
	if err != nil {
		t.Fatal(err)
	}
	restart := time.Now()
	attempts := func(j int) int { return 1 + j%3 }
	due := func(j int) time.Time {
		if j%2 == 0 {
			return restart.Add(-time.Second)
		}
		return restart.Add(time.Second)
	}
	for i := range subs {
		var parked []store.Parked
		for j, ev := range evs {
			parked = append(parked, store.Parked{
				Seq: last - uint64(perSub-1-j), PublishTime: publish, Event: ev, Attempts: attempts(j),
				FirstAttempt: publish, LastAttempt: publish.Add(time.Second), NextDue: due(j),
				LastOutcome: schemas.Busy, LastStatus: http.StatusServiceUnavailable,
			})
		}
		if err := st.UpdateSubscription(ctx, "orders", name(i), store.Update{Cursor: last, Put: parked}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, err = disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err = router.New(cfg, router.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	select { // bounded: a restart that loses events fails here, not by the test's timeout
	case <-all:
	case <-time.After(2 * time.Minute):
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != subs*perSub {
		t.Fatalf("%d of %d parked events delivered after the restart", len(got), subs*perSub)
	}
	for i := range subs {
		for j := range perSub {
			key := fmt.Sprintf("%s/e%03d", name(i), j)
			ds := got[key]
			if len(ds) != 1 {
				t.Errorf("%s delivered %d times, want once", key, len(ds))
				continue
			}
			if want := strconv.Itoa(attempts(j)); ds[0].count != want {
				t.Errorf("%s delivered with aeg-delivery-count %s, want %s: its stored attempts", key, ds[0].count, want)
			}
			if ds[0].at.Before(due(j)) {
				t.Errorf("%s delivered at %v, before its due time %v", key, ds[0].at.Format(time.StampMicro), due(j).Format(time.StampMicro))
			}
		}
	}
	// The endpoint counts an event before the subscription has its answer: ask each
	// subscription until it has settled everything (each ask waits its turn in the actor's
	// mailbox, behind the results), within a bound that only a broken build reaches.
	bound := time.Now().Add(time.Minute)
	for i := range subs {
		for {
			s, err := r.Status(ctx, "orders", name(i))
			if err != nil {
				t.Fatal(err)
			}
			if s.Backlog == 0 && s.Cursor == last {
				break
			}
			if time.Now().After(bound) {
				t.Errorf("%s after the deliveries: backlog %d, cursor %d; want nothing left, cursor %d", name(i), s.Backlog, s.Cursor, last)
				break
			}
		}
	}
}
