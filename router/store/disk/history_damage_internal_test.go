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
func TestDamagedHistoryBlockIsGonePast(t *testing.T) {
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
		recs[i] = store.HistoryRecord{EventID: fmt.Sprintf("event-%03d", i), Expires: expired, Payload: bytes.Repeat([]byte{'h'}, 300)}
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

	r, err := Check(ctx, dir, nil, slog.New(slog.DiscardHandler))
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
		if err := v.ExpireHistory(ctx, now); err != nil {
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
