package disk

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/schemas"
)

// A damaged table block fails every read that seeks to a key below it, though the entries
// there are held by other table files: a seek positions each level at its first key at or
// after the read's start, loading that key's block. A read met by it reads the entries before
// it with a bound below the block, which leaves the damaged file out, and reports lost only
// what the block may hold. Before, every entry from where the read started up to the block's
// end was skipped as lost: here, the whole journal before the newest block.
func TestReadGetsTheEntriesBeforeADamagedBlockFromOtherTables(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	writeValStore(t, dir, 5, 0, func(s *Store) {
		// The journal (blocks 1-3, 4-6, 7, 8, 9, 10) is in one table file; block 10 again
		// alone in a newer one, damaged.
		isolateAndDamageKeys(t, s, dir, seqKey(prefixJournal, s.topics["orders"].id, 10))
	})
	s := openVal(t, dir)
	if _, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "11", Raw: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if got := readSeqs(t, s.Store, "orders"); got != "1,2,3,4,5,6,7,8,9,11" {
		t.Errorf("journal read from 1 = %s; want 1 to 9 and 11: only 10 is in the damaged block", got)
	}
	if got, err := s.Read(ctx, "orders", 6, 2); err != nil || len(got) != 2 || got[0].Seq != 6 || got[1].Seq != 7 {
		t.Errorf("Read of 2 from 6 = %v, %v; want 6 and 7", got, err)
	}
	if l := s.logs.String(); strings.Count(l, "cannot be read; they are lost") != 1 || !strings.Contains(l, "fromSeq=10 throughSeq=10") {
		t.Errorf("want one ERROR naming 10 alone as lost; logs:\n%s", l)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Check(ctx, dir, nil, s.log)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for _, p := range r.Problems {
		if strings.Contains(p.Error(), "journal entries ") && strings.Contains(p.Error(), " are damaged") {
			lost = append(lost, p.Error())
		}
	}
	if len(lost) != 1 || !strings.Contains(lost[0], `topic "orders": journal entries 10 to 10 are damaged`) {
		t.Errorf("egrid store check lists %q; want entries 10 to 10 alone", lost)
	}
	if r.JournalEntries != 10 {
		t.Errorf("egrid store check read %d entries; want 10 (1 to 9 and 11)", r.JournalEntries)
	}
}
