package disk

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// A journal block that pebble reads back intact but that does not decode loses its own
// entries only: Read reports them once, as damage, and returns the entries around them, so
// the topic's subscriptions go on after it instead of failing at that block for good.
func TestUndecodableJournalBlockIsReportedAndSkipped(t *testing.T) {
	ctx := t.Context()
	var logs bytes.Buffer
	counts := map[string]int{}
	s, err := Open("db", Options{fs: vfs.NewMem(), Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnCorruption: func(kind string) { counts[kind]++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} { // one block each: seqs 1, 2, 3
		if _, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: id, Raw: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.gen.db.Set(seqKey(prefixJournal, s.topics["orders"].id, 2), []byte{formatBlock, 1, 0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}

	for pass := range 2 {
		got, err := s.Read(ctx, "orders", 1, 10)
		if err != nil {
			t.Fatalf("pass %d: Read: %v; want the entries around the undecodable block", pass, err)
		}
		var ids []string
		for _, e := range got {
			ids = append(ids, e.Event.ID)
		}
		if strings.Join(ids, ",") != "a,c" {
			t.Fatalf("pass %d: Read returned %v; want [a c]", pass, ids)
		}
	}
	if counts[DamageEntry] != 1 || s.Health().Corruptions != 1 {
		t.Errorf("damage counted %v, Health %+v; want one entry damage, reported once", counts, s.Health())
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "topic=orders") || !strings.Contains(l, "fromSeq=2 throughSeq=2") {
		t.Errorf("want an ERROR naming the topic and the lost seqs; logs:\n%s", l)
	}
}

// A parked event whose record pebble reads back intact but that does not decode is lost
// alone: the subscription's state still loads (a push subscription gets it with no head, due
// at once, and ParkedEvents then leaves it out, so the subscription forgets it; a queue
// subscription goes on without it), reported once as damage. Failing the load or the read
// stopped the subscription for good: its actor failed at every restart.
func TestUndecodableParkedEventIsLostAlone(t *testing.T) {
	ctx := t.Context()
	var logs bytes.Buffer
	counts := map[string]int{}
	s, err := Open("db", Options{fs: vfs.NewMem(), Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnCorruption: func(kind string) { counts[kind]++ }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "orders", "hook", nil); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Hour).Truncate(time.Second)
	var put []store.Parked
	for seq := uint64(1); seq <= 2; seq++ {
		put = append(put, store.Parked{Seq: seq, Attempts: 1, NextDue: due, Event: &schemas.Event{ID: fmt.Sprint(seq), Raw: []byte(`{}`)}})
	}
	if err := s.UpdateSubscription(ctx, "orders", "hook", store.Update{Cursor: 2, Put: put}); err != nil {
		t.Fatal(err)
	}
	sb := s.topics["orders"].subs["hook"]
	if err := s.gen.db.Set(seqKey(prefixParked, sb.id, 1), []byte{0xff, 0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}

	index, err := s.LoadSubscriptionIndex(ctx, "orders", "hook")
	if err != nil {
		t.Fatalf("LoadSubscriptionIndex: %v; want the state with the damaged event due at once", err)
	}
	if len(index.Parked) != 2 || index.Parked[0].Seq != 1 || !index.Parked[0].NextDue.IsZero() || !index.Parked[1].NextDue.Equal(due) {
		t.Fatalf("LoadSubscriptionIndex parked = %+v; want seq 1 due at once and seq 2 as stored", index.Parked)
	}
	got, err := s.ParkedEvents(ctx, "orders", "hook", []uint64{1, 2})
	if err != nil || len(got) != 1 || got[0].Seq != 2 || got[0].Event.ID != "2" {
		t.Fatalf("ParkedEvents = %+v, %v; want seq 2 alone", got, err)
	}
	full, err := s.LoadSubscription(ctx, "orders", "hook")
	if err != nil || len(full.Parked) != 1 || full.Parked[0].Seq != 2 {
		t.Fatalf("LoadSubscription = %+v, %v; want seq 2 alone", full.Parked, err)
	}
	if counts[DamageEntry] != 1 || s.Health().Corruptions != 1 {
		t.Errorf("damage counted %v, Health %+v; want one entry damage, reported once", counts, s.Health())
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "subscription=hook seq=1") {
		t.Errorf("want an ERROR naming the subscription and the lost event; logs:\n%s", l)
	}

	// Forgetting it deletes the record: nothing is reported again.
	if err := s.UpdateSubscription(ctx, "orders", "hook", store.Update{Cursor: 2, Delete: []uint64{1}}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.LoadSubscriptionIndex(ctx, "orders", "hook"); err != nil || len(st.Parked) != 1 || st.Parked[0].Seq != 2 {
		t.Fatalf("after forgetting it: %+v, %v; want seq 2 alone", st.Parked, err)
	}
}
