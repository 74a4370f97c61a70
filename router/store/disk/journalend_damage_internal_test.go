package disk

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
)

// A damaged table block holding a topic's newest entries of its file and keys past its
// journal (here the next topic's) is met by pebble on every read of the topic's journal from
// the block on, however far past it: a seek positions the damaged file at its first key at or
// after the read's start, which is in the block. Newer entries, flushed to other table files
// after it, are intact: the journal's end is the newest of them, they are read from those
// files and delivered, and what is reported lost is what no other file holds. Before, the
// journal was taken to end before the block: the newer entries were never delivered (the
// subscription's backlog was 0), and the ERROR and egrid store check named an empty range
// ("journal entries 9 to 8").
func TestEntriesAfterABlockReachingPastTheJournalAreRead(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	s, err := Open(dir, Options{tune: noCompactions})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"orders", "later"} {
		if err := s.PutTopic(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
	}
	appendN(t, s, "orders", 1, 3)
	appendN(t, s, "orders", 4, 6)
	for i := 7; i <= 8; i++ {
		appendN(t, s, "orders", i, i)
	}
	appendN(t, s, "later", 1, 3)
	flush(t, s)
	// One table file holds orders' 9 and 10 and later's 4: its block reaches past orders'
	// journal. It is damaged.
	appendN(t, s, "orders", 9, 9)
	appendN(t, s, "orders", 10, 10)
	appendN(t, s, "later", 4, 4)
	flush(t, s)
	damaged := tableHolding(t, s, dir, seqKey(prefixJournal, s.topics["orders"].id, 9), seqKey(prefixJournal, s.topics["later"].id, 4))
	// Newer events, in a table file of their own.
	for i := 11; i <= 13; i++ {
		appendN(t, s, "orders", i, i)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	damageAt(t, damaged, 8)

	v := openVal(t, dir)
	if last, err := v.LastSeq(ctx, "orders"); err != nil || last != 13 {
		t.Errorf("LastSeq = %d, %v; want 13: 11 to 13 are in an intact table file", last, err)
	}
	if got := readSeqs(t, v.Store, "orders"); got != "1,2,3,4,5,6,7,8,11,12,13" {
		t.Errorf("journal read from 1 = %s; want 1 to 8 and 11 to 13: only 9 and 10 are in the damaged block", got)
	}
	if got, err := v.Read(ctx, "orders", 12, 1); err != nil || len(got) != 1 || got[0].Seq != 12 || got[0].Event.ID != "12" {
		t.Errorf("Read of 1 from 12 = %v, %v; want 12", got, err)
	}
	if l := v.logs.String(); strings.Count(l, "cannot be read; they are lost") != 1 || !strings.Contains(l, "topic=orders fromSeq=9 throughSeq=10") {
		t.Errorf("want one ERROR naming 9 to 10 as lost; logs:\n%s", l)
	}
	_, err = v.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "14", Raw: []byte(`{}`)}})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "delete the topic and create it again") {
		t.Errorf("Append to orders = %v; want it refused, saying to delete and create the topic", err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}

	r, err := Check(ctx, dir, nil, v.log)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for _, p := range r.Problems {
		if strings.Contains(p.Error(), `topic "orders": journal entries `) {
			lost = append(lost, p.Error())
		}
	}
	if len(lost) != 1 || !strings.Contains(lost[0], `journal entries 9 to 10 are damaged`) {
		t.Errorf("egrid store check lists %q; want orders' entries 9 to 10 alone", lost)
	}
	if r.JournalEntries != 11 {
		t.Errorf("egrid store check read %d entries of orders and later; want orders' 1 to 8 and 11 to 13 (later's are in the damaged file's key range, older than it)", r.JournalEntries)
	}
}

// A damaged table block starting past the seq a Read meets it at (its first key is the last
// seq of a journal block that starts before it: 9-10 under 10) leaves a range below it that
// reads, empty. The Read goes on to the entries after the block that other table files hold,
// as from any seq at the block. Before, it took everything up to the journal's end for lost:
// the Read of 7 from 8 gave 8 alone, and the ERROR named 9 to 13 as lost.
func TestAReadMeetingABlockPastAnEmptyRangeReadsAroundIt(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	s, err := Open(dir, Options{tune: noCompactions})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"orders", "later"} {
		if err := s.PutTopic(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
	}
	appendN(t, s, "orders", 1, 8)
	appendN(t, s, "later", 1, 3)
	flush(t, s)
	appendN(t, s, "orders", 9, 10)
	appendN(t, s, "later", 4, 4)
	flush(t, s)
	damaged := tableHolding(t, s, dir, seqKey(prefixJournal, s.topics["orders"].id, 10), seqKey(prefixJournal, s.topics["later"].id, 4))
	appendN(t, s, "orders", 11, 13)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	damageAt(t, damaged, 8)

	v := openVal(t, dir)
	got, err := v.Read(ctx, "orders", 8, 7)
	var seqs []uint64
	for _, e := range got {
		seqs = append(seqs, e.Seq)
	}
	if err != nil || fmt.Sprint(seqs) != "[8 11 12 13]" {
		t.Errorf("Read of 7 from 8 = %v, %v; want 8 and 11 to 13: only 9 and 10 are in the damaged block", seqs, err)
	}
	if l := v.logs.String(); strings.Count(l, "cannot be read; they are lost") != 1 || !strings.Contains(l, "topic=orders fromSeq=9 throughSeq=10") {
		t.Errorf("want one ERROR naming 9 to 10 as lost; logs:\n%s", l)
	}
}

func flush(t *testing.T, s *Store) {
	t.Helper()
	if err := s.gen.db.Flush(); err != nil {
		t.Fatal(err)
	}
}

// tableHolding returns the path of the table file whose keys run from first to last.
func tableHolding(t *testing.T, s *Store, dir string, first, last []byte) string {
	t.Helper()
	levels, err := s.gen.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range levels {
		for _, f := range level {
			if bytes.Equal(f.Smallest.UserKey, first) && bytes.Equal(f.Largest.UserKey, last) {
				return filepath.Join(dir, fmt.Sprintf("%06d.sst", f.FileNum))
			}
		}
	}
	t.Fatalf("no table file holds %q to %q: %v", first, last, levels)
	return ""
}
