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
	s, dir, damaged := blockPastAnEmptyRange(t)
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

// blockPastAnEmptyRange opens a store in a new directory with topics orders and later, orders'
// entries 1 to 8 and later's 1 to 3 in one table file, and orders' 9 and 10 (one journal
// block, under key 10) and later's 4 in another, whose name it returns with the store and its
// directory: a block that starts past the seq 9 a Read meets it at and reaches past orders'
// journal, for the caller to damage once it has written the rest.
func blockPastAnEmptyRange(t *testing.T) (s *Store, dir, damaged string) {
	t.Helper()
	ctx := t.Context()
	dir = filepath.Join(t.TempDir(), "db")
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
	damaged = tableHolding(t, s, dir, seqKey(prefixJournal, s.topics["orders"].id, 10), seqKey(prefixJournal, s.topics["later"].id, 4))
	return s, dir, damaged
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

// A read around a damaged table block that reaches past the journal takes from the other
// table files the blocks it delivers, not the journal's rest: every Read from the block on
// comes this way, and reading the rest each time made draining a long journal cost its
// length squared over the Read's limit, each Read holding the rest in memory. (A Read of one
// entry from 11, with 2990 entries after the block, read 2990 entries.)
func TestAReadAroundABlockReachingPastTheJournalReadsWhatItDelivers(t *testing.T) {
	ctx := t.Context()
	s, dir, damaged := blockPastAnEmptyRange(t)
	// 11 to 3000 in blocks of ten, in two table files: 11-1500 and 1501-3000.
	for i := 11; i <= 3000; i += 10 {
		appendN(t, s, "orders", i, i+9)
		if i == 1491 {
			flush(t, s)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	damageAt(t, damaged, 8)

	v := openVal(t, dir)
	if last, err := v.LastSeq(ctx, "orders"); err != nil || last != 3000 {
		t.Fatalf("LastSeq = %d, %v; want 3000", last, err)
	}
	read := func(from uint64, limit int) (seqs []uint64, blocks uint64) {
		t.Helper()
		before := v.gen.aroundBlocks.Load()
		got, err := v.Read(ctx, "orders", from, limit)
		if err != nil {
			t.Fatalf("Read of %d from %d: %v", limit, from, err)
		}
		for _, e := range got {
			seqs = append(seqs, e.Seq)
		}
		return seqs, v.gen.aroundBlocks.Load() - before
	}
	if seqs, blocks := read(11, 1); fmt.Sprint(seqs) != "[11]" || blocks > 2 {
		t.Errorf("Read of 1 from 11 = %v, reading %d blocks around the damaged one; want 11, from 1 block (2 at most)", seqs, blocks)
	}
	if seqs, blocks := read(15, 20); len(seqs) != 20 || seqs[0] != 15 || seqs[19] != 34 || blocks > 4 {
		t.Errorf("Read of 20 from 15 = %v, reading %d blocks around the damaged one; want 15 to 34, from 3 blocks (4 at most)", seqs, blocks)
	}
	if seqs, blocks := read(2995, 100); fmt.Sprint(seqs) != "[2995 2996 2997 2998 2999 3000]" || blocks > 1 {
		t.Errorf("Read of 100 from 2995 = %v, reading %d blocks around the damaged one; want 2995 to 3000, from 1 block", seqs, blocks)
	}
	// Draining the journal by 7 reads each entry once, and at most two blocks a Read.
	next, reads, total := uint64(1), 0, uint64(0)
	for ; next <= 3000 && reads < 1000; reads++ {
		seqs, blocks := read(next, 7)
		total += blocks
		if len(seqs) == 0 {
			t.Fatalf("Read of 7 from %d returned nothing; want the entries up to 3000", next)
		}
		for _, seq := range seqs {
			if want := next; seq != want && !(want == 9 && seq == 11) {
				t.Fatalf("Read of 7 gave %d after %d; want every seq but the lost 9 and 10, in order", seq, next-1)
			}
			next = seq + 1
		}
	}
	if next != 3001 {
		t.Errorf("draining stopped at %d; want 3000 read", next)
	}
	if total > uint64(2*reads) {
		t.Errorf("draining in %d Reads of 7 read %d blocks around the damaged one; want 2 a Read at most", reads, total)
	}
	if l := v.logs.String(); strings.Count(l, "cannot be read; they are lost") != 1 || !strings.Contains(l, "topic=orders fromSeq=9 throughSeq=10") {
		t.Errorf("want one ERROR naming 9 to 10 as lost; logs:\n%s", l)
	}
}
