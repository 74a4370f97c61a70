package disk

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

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
