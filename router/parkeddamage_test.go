package router_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router"
	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// A parked event whose stored record no longer decodes is lost alone: after a restart the
// subscription delivers its other parked events, where it failed at every start before.
func TestRestartPastAnUndecodableParkedEvent(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string]int{}
	two := make(chan struct{}) // closed when the two intact events have arrived
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		i := bytes.Index(body, []byte(`"id":"`))
		if i < 0 {
			return
		}
		id, _, _ := strings.Cut(string(body[i+len(`"id":"`):]), `"`)
		mu.Lock()
		got[id]++
		if got["e1"] > 0 && got["e2"] > 0 && got[id] == 1 && id != "e0" {
			close(two)
		}
		mu.Unlock()
	}))
	defer endpoint.Close()

	dir := t.TempDir()
	cfg := router.Config{InsecureDev: true, SkipEndpointValidation: true}
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
	if err := r.CreateSubscription(ctx, "orders", "hook", router.SubscriptionSpec{Destination: router.WebHook(endpoint.URL)}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var raw []string
	for j := range 3 {
		raw = append(raw, fmt.Sprintf(`{"id":"e%d","subject":"/o/%d","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{}}`, j, j))
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
	var parked []store.Parked
	for j, ev := range evs {
		parked = append(parked, store.Parked{
			Seq: last - uint64(len(evs)-1-j), PublishTime: publish, Event: ev, Attempts: 1,
			FirstAttempt: publish, LastAttempt: publish, NextDue: publish.Add(time.Second),
			LastOutcome: schemas.Busy, LastStatus: http.StatusServiceUnavailable,
		})
	}
	if err := st.UpdateSubscription(ctx, "orders", "hook", store.Update{Cursor: last, Put: parked}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// The first parked record (key P, subscription id, seq) overwritten with bytes that do not
	// decode, as pebble would return them intact.
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'P'}, UpperBound: []byte{'Q'}})
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() || len(it.Key()) != 17 || binary.BigEndian.Uint64(it.Key()[9:]) != parked[0].Seq {
		t.Fatalf("no parked record for seq %d", parked[0].Seq)
	}
	key := bytes.Clone(it.Key())
	_ = it.Close()
	if err := db.Set(key, []byte{0xff, 0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
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
	select { // bounded: a subscription stopped by the damage fails here, not by the test's timeout
	case <-two:
	case <-time.After(time.Minute):
	}
	mu.Lock()
	defer mu.Unlock()
	if got["e1"] != 1 || got["e2"] != 1 || got["e0"] != 0 {
		t.Fatalf("deliveries after the restart: %v; want e1 and e2 once each, e0 (damaged) never", got)
	}
}
