package router_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
	parked := parkAndClose(t, st, raw)

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

// A table block of a subscription's parked retries that fails its checksum loses the retries
// in it alone: after a restart the subscription delivers the others, reported once, and the
// topic's other subscription is untouched. Before, loading the subscription's state failed at
// every start of its actor: it delivered nothing, for good.
func TestRestartPastADamagedParkedRetriesBlock(t *testing.T) {
	const n = 60
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string]map[string]int{"/hook": {}, "/other": {}}
	var want int // hook's intact retries, set before the restart
	done := make(chan struct{})
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		mu.Lock()
		defer mu.Unlock()
		for rest := body; ; {
			i := bytes.Index(rest, []byte(`"id":"`))
			if i < 0 {
				break
			}
			rest = rest[i+len(`"id":"`):]
			id, _, _ := strings.Cut(string(rest), `"`)
			got[req.URL.Path][id]++
		}
		if want > 0 && len(got["/hook"]) == want && len(got["/other"]) == n {
			select {
			case <-done:
			default:
				close(done)
			}
		}
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
	for _, name := range []string{"hook", "other"} {
		if err := r.CreateSubscription(ctx, "orders", name, router.SubscriptionSpec{Destination: router.WebHook(endpoint.URL + "/" + name)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var raw []string
	for j := range n {
		raw = append(raw, fmt.Sprintf(`{"id":"e%d","subject":"/o/%d","eventType":"T","eventTime":"2026-01-01T00:00:00Z","data":{"pad":%q}}`, j, j, strings.Repeat(fmt.Sprint(j), 100)))
	}
	_ = parkAndClose(t, st, raw)

	// hook's parked records (keys P, subscription id, seq) written again into a table file of
	// their own, then a block of it damaged.
	db, err := pebble.Open(dir, &pebble.Options{DisableAutomaticCompactions: true})
	if err != nil {
		t.Fatal(err)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'P'}, UpperBound: []byte{'Q'}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	for valid := it.First(); valid; valid = it.Next() {
		if err := b.Set(it.Key(), it.Value(), nil); err != nil {
			t.Fatal(err)
		}
	}
	_ = it.Close()
	if b.Count() != n {
		t.Fatalf("%d parked records; want %d", b.Count(), n)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	damageTable(t, db, dir, "the parked records alone", func(smallest, largest []byte) bool {
		return smallest[0] == 'P' && largest[0] == 'P'
	})

	// egrid store check lists the damage and counts the retries it can read.
	report, err := disk.Check(ctx, dir, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Problems) != 1 || !strings.Contains(report.Problems[0].Error(), `subscription "hook"`) || report.ParkedEvents < n/2 || report.ParkedEvents >= n {
		t.Fatalf("store check: %d parked retries readable, problems %v; want most of %d and the damage named", report.ParkedEvents, report.Problems, n)
	}
	mu.Lock()
	want = report.ParkedEvents
	mu.Unlock()

	var logs bytes.Buffer
	var logMu sync.Mutex
	counts := map[string]int{}
	st, err = disk.Open(dir, disk.Options{
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelError})),
		OnCorruption: func(kind string) {
			logMu.Lock()
			counts[kind]++
			logMu.Unlock()
		},
	})
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
	case <-done:
	case <-time.After(time.Minute):
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got["/hook"]) != want || len(got["/other"]) != n {
		t.Fatalf("after the restart hook delivered %d events (want its %d intact retries), other %d (want %d)", len(got["/hook"]), want, len(got["/other"]), n)
	}
	for path, ids := range got {
		for id, k := range ids {
			if k != 1 {
				t.Errorf("%s: %s delivered %d times; want once", path, id, k)
			}
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if counts[disk.DamageTable] != 1 || strings.Count(logs.String(), `level=ERROR msg="disk store:`) != 1 || !strings.Contains(logs.String(), "topic=orders subscription=hook") {
		t.Errorf("damage counted %v; want one table damage and one ERROR of the store naming the subscription; logs:\n%s", counts, logs.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

// parkAndClose appends the events raw (Event Grid JSON objects) to topic orders of st, parks
// them all for subscription hook as a minute-old retry due a second after it, closes st and
// returns the parked records.
func parkAndClose(t *testing.T, st store.Store, raw []string) []store.Parked {
	t.Helper()
	ctx := context.Background()
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
	return parked
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// damageTable closes db, the pebble database of a disk store in dir, and damages its table
// file whose key range holds (64 bytes of 0xff a quarter of the way in, where a data block
// is); what names the keys it holds, for the failure message.
func damageTable(t *testing.T, db *pebble.DB, dir, what string, holds func(smallest, largest []byte) bool) {
	t.Helper()
	levels, err := db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	var table string
	for _, level := range levels {
		for _, f := range level {
			if holds(f.Smallest.UserKey, f.Largest.UserKey) {
				table = filepath.Join(dir, fmt.Sprintf("%06d.sst", f.FileNum))
			}
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if table == "" {
		t.Fatalf("no table file holds %s: %v", what, levels)
	}
	fi, err := os.Stat(table)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(table, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 64), fi.Size()/4); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
}
