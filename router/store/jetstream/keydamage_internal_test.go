package jetstream

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/store"
)

// Keys of the meta bucket and the dead-letter outbox that no name escapes to — an escape cut
// short or of other than two upper-case hex digits, and tokens that would decode to another
// name's ("zet_61" for "zeta", "go_6Fod" for "good") — are left out of every listing, each
// logged once with its raw key and counted; the names stored under their own keys are
// listed as before, with their own values. Before, a bad escape failed the whole listing
// (Topics failing made a cluster node read no definition any more), and a token escaping a
// letter was listed under the other name, a second time.
func TestKeysThatDoNotDecodeAreReportedAndLeftOut(t *testing.T) {
	ctx := t.Context()
	s := metaDamageStore(t)
	logs, counts := damageLog(s)
	alias := appendOpaque(nil, []byte(`{"alias":1}`))
	damageMeta(t, s, "topic.a_zz", alias)
	damageMeta(t, s, "topic.zet_61", alias)
	damageMeta(t, s, "sub."+escape("orders")+".x_4", appendSubRecord(nil, &subRecord{epoch: 7, spec: []byte(`{"alias":1}`)}))
	damageMeta(t, s, "sub."+escape("orders")+".go_6Fod", appendSubRecord(nil, &subRecord{epoch: 7, spec: []byte(`{"alias":1}`)}))
	if err := s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "dl-1", Payload: []byte("p1")}}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"dl_2", "d_6C-2"} {
		if _, err := s.dead.Put(ctx, key, appendOpaque(nil, []byte("p2"))); err != nil {
			t.Fatal(err)
		}
	}

	for range 2 { // reported once, however often listed
		topics, err := s.Topics(ctx)
		if got := defNames(topics); err != nil || !slices.Equal(got, []string{"bad", "orders", "zeta"}) {
			t.Fatalf("Topics = %v, %v; want [bad orders zeta], the keys that do not decode left out", got, err)
		}
		for _, d := range topics {
			if string(d.Spec) != "{}" {
				t.Errorf("topic %q listed with %s; want its own definition {}", d.Name, d.Spec)
			}
		}
		subs, err := s.Subscriptions(ctx, "orders")
		if got := defNames(subs); err != nil || !slices.Equal(got, []string{"gone", "good", "state"}) {
			t.Fatalf("Subscriptions = %v, %v; want [gone good state]", got, err)
		}
		for _, d := range subs {
			if strings.Contains(string(d.Spec), "alias") {
				t.Errorf("subscription %q listed with %s; want its own definition", d.Name, d.Spec)
			}
		}
		cursors, err := s.Cursors(ctx, "orders")
		if got := slices.Sorted(maps.Keys(cursors)); err != nil || !slices.Equal(got, []string{"gone", "good", "state"}) {
			t.Fatalf("Cursors = %v, %v; want those of [gone good state]", cursors, err)
		}
		recs, err := s.DeadLetters(ctx)
		if err != nil || len(recs) != 1 || recs[0].ID != "dl-1" {
			t.Fatalf("DeadLetters = %v, %v; want dl-1 alone", recs, err)
		}
		var scanned []string
		if err := s.ScanDeadLetters(ctx, func(r store.DeadLetterRecord) error { scanned = append(scanned, r.ID); return nil }); err != nil || !slices.Equal(scanned, []string{"dl-1"}) {
			t.Fatalf("ScanDeadLetters = %v, %v; want dl-1 alone", scanned, err)
		}
	}
	if counts[DamageDefinition] != 4 || counts[DamageEntry] != 2 || s.Health().Corruptions != 6 {
		t.Errorf("damage counted %v, Health().Corruptions = %d; want 4 definition and 2 entry", counts, s.Health().Corruptions)
	}
	out := logs.String()
	if n := strings.Count(out, "level=ERROR"); n != 6 {
		t.Errorf("%d ERRORs logged, want one per key:\n%s", n, out)
	}
	for _, key := range []string{"topic.a_zz", "topic.zet_61", "sub.orders.x_4", "sub.orders.go_6Fod", "dl_2", "d_6C-2"} {
		if !strings.Contains(out, "key="+key+" ") {
			t.Errorf("no ERROR gives the raw key %s:\n%s", key, out)
		}
	}
	if !strings.Contains(out, "nats kv purge") {
		t.Errorf("the ERRORs do not say what to do:\n%s", out)
	}
}
