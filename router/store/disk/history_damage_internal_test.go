package disk

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/store"
)

// A damaged table block of delivery histories neither stops history expiry nor goes unseen:
// ExpireHistory goes past it, deleting the expired records around it, and reports it once (an
// ERROR, a table count); egrid store check lists it, saying what is lost. Before, every run of
// ExpireHistory failed at the block, so no history of the store expired again, and Check,
// which did not read histories, called the store sound.
//
// The event ids of one run share their first 8 bytes ("event-00…"), as ids with a common
// prefix or numbers do, so finding where the keys read again past the block looks below
// their first 8 bytes too; it once found keys read before the block there, and the scan
// started again from them for ever.
func TestDamagedHistoryBlockIsGonePast(t *testing.T) {
	for _, ids := range []string{"event-%03d", "event-%05d", "%020d"} {
		t.Run(ids, func(t *testing.T) { damagedHistoryBlockIsGonePast(t, ids) })
	}
}

func damagedHistoryBlockIsGonePast(t *testing.T, ids string) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	s, err := Open(dir, Options{tune: noCompactions})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.gen.db.Flush(); err != nil { // the histories in a table file of their own
		t.Fatal(err)
	}
	expired := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	recs := make([]store.HistoryRecord, stateEvents)
	for i := range recs {
		recs[i] = store.HistoryRecord{EventID: fmt.Sprintf(ids, i), Expires: expired, Payload: bytes.Repeat([]byte{'h'}, 300)}
	}
	if err := s.PutHistory(ctx, "orders", "billing", 0, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.gen.db.Flush(); err != nil {
		t.Fatal(err)
	}
	sub := s.topics["orders"].subs["billing"].id
	var table string
	levels, err := s.gen.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range levels {
		for _, f := range level {
			if bytes.Equal(f.Smallest.UserKey, historyKey(sub, recs[0].EventID)) && bytes.Equal(f.Largest.UserKey, historyKey(sub, recs[len(recs)-1].EventID)) {
				table = filepath.Join(dir, fmt.Sprintf("%06d.sst", f.FileNum))
			}
		}
	}
	if table == "" {
		t.Fatalf("no table file holds the histories alone: %v", levels)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(table)
	if err != nil {
		t.Fatal(err)
	}
	damageAt(t, table, fi.Size()/4)

	var r Report
	bounded(t, "Check", func() { r, err = Check(ctx, dir, nil, slog.New(slog.DiscardHandler)) })
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0].Error(), "delivery histories of subscriptions [orders/billing] are in a damaged table block: the delivery histories of some of their events are lost") {
		t.Errorf("Check found %v; want the damaged history block, saying what is lost", r.Problems)
	}
	if r.Histories == 0 || r.Histories >= stateEvents {
		t.Errorf("Check read %d histories; want all but the damaged block's", r.Histories)
	}

	v := openVal(t, dir)
	now := expired.Add(time.Hour)
	for run := range 2 {
		bounded(t, "ExpireHistory", func() { err = v.ExpireHistory(ctx, now) })
		if err != nil {
			t.Fatalf("run %d: ExpireHistory: %v; want it past the damaged block", run, err)
		}
	}
	left, lost := 0, 0
	for _, rec := range recs {
		_, ok, err := get(v.gen.db, historyKey(sub, rec.EventID))
		switch {
		case pebble.IsCorruptionError(err):
			lost++
		case err != nil:
			t.Fatal(err)
		case ok:
			left++
		}
	}
	if left != 0 || lost == 0 || lost > stateEvents/4 {
		t.Errorf("after ExpireHistory: %d expired histories left, %d in the damaged block; want none left but the block's", left, lost)
	}
	if c := v.damage(); c[DamageTable] != 1 || len(c) != 1 {
		t.Errorf("damage counted %v; want the block counted once", c)
	}
	l := v.logs.String()
	if n := strings.Count(l, `level=ERROR msg="disk store: delivery histories are in a damaged table block`); n != 1 || !strings.Contains(l, "subscriptions=[orders/billing]") {
		t.Errorf("%d ERRORs about the damaged history block; want 1 naming orders/billing; logs:\n%s", n, l)
	}
}

// bounded runs f, failing the test when it has not returned within a minute (a scan that
// keeps starting again from keys it read does not).
func bounded(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s has not returned within a minute", what)
	}
}
