package disk

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// valStore is an open store of the tests of damaged bookkeeping values, with its logs and its
// count of damage by kind.
type valStore struct {
	*Store
	logs   *lockedBuffer
	mu     sync.Mutex
	counts map[string]int
}

func (v *valStore) damage() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.counts
}

// openVal opens dir (table files kept apart from compactions) counting damage.
func openVal(t *testing.T, dir string) *valStore {
	t.Helper()
	v := &valStore{logs: new(lockedBuffer), counts: map[string]int{}}
	s, err := Open(dir, Options{tune: noCompactions, Logger: slog.New(slog.NewTextHandler(v.logs, nil)), OnCorruption: func(kind string) {
		v.mu.Lock()
		v.counts[kind]++
		v.mu.Unlock()
	}})
	if err != nil {
		t.Fatalf("Open: %v; want the store open, the damaged value recomputed", err)
	}
	v.Store = s
	t.Cleanup(func() { s.Close() })
	return v
}

// appendN appends events ids from..through to topic in one Append: one journal block.
func appendN(t *testing.T, s *Store, topic string, from, through int) {
	t.Helper()
	var evs []*schemas.Event
	for i := from; i <= through; i++ {
		evs = append(evs, &schemas.Event{ID: fmt.Sprint(i), Raw: []byte(`{}`)})
	}
	if _, err := s.Append(t.Context(), topic, time.Now(), evs); err != nil {
		t.Fatal(err)
	}
}

// readSeqs returns the seqs topic's journal holds from 1, as a string.
func readSeqs(t *testing.T, s *Store, topic string) string {
	t.Helper()
	got, err := s.Read(t.Context(), topic, 1, 100)
	if err != nil {
		t.Fatalf("Read %s: %v", topic, err)
	}
	var seqs []string
	for _, e := range got {
		seqs = append(seqs, fmt.Sprint(e.Seq))
	}
	return strings.Join(seqs, ",")
}

// writeValStore writes, in dir, topic orders with subscriptions billing and audit, the
// journal in blocks 1-3, 4-6 and 7, 8, 9, 10, billing's cursor at 10 and audit's at
// auditCursor, then trims through trim (when not 0). It calls change on the open store last,
// and closes it.
func writeValStore(t *testing.T, dir string, auditCursor, trim uint64, change func(s *Store)) {
	t.Helper()
	ctx := t.Context()
	s, err := Open(dir, Options{tune: noCompactions})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"billing", "audit"} {
		if err := s.PutSubscription(ctx, "orders", name, nil); err != nil {
			t.Fatal(err)
		}
	}
	appendN(t, s, "orders", 1, 3)
	appendN(t, s, "orders", 4, 6)
	for i := 7; i <= 10; i++ {
		appendN(t, s, "orders", i, i)
	}
	for name, c := range map[string]uint64{"billing": 10, "audit": auditCursor} {
		if err := s.UpdateSubscription(ctx, "orders", name, store.Update{Cursor: c}); err != nil {
			t.Fatal(err)
		}
	}
	if trim > 0 {
		if err := s.Trim(ctx, "orders", trim); err != nil {
			t.Fatal(err)
		}
	}
	change(s)
}

// setRaw sets key to v, synced.
func setRaw(t *testing.T, s *Store, key, v []byte) {
	t.Helper()
	if err := s.gen.db.Set(key, v, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// isolateAndDamage writes key's value again alone into a table file of its own and damages
// that file's block: reading key fails with pebble's corruption error, and nothing else does.
func isolateAndDamage(t *testing.T, s *Store, dir string, key []byte) {
	t.Helper()
	if err := s.gen.db.Flush(); err != nil {
		t.Fatal(err)
	}
	v, ok, err := get(s.gen.db, key)
	if err != nil || !ok {
		t.Fatalf("reading %q: %v, %v", key, ok, err)
	}
	setRaw(t, s, key, v)
	if err := s.gen.db.Flush(); err != nil {
		t.Fatal(err)
	}
	levels, err := s.gen.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range levels {
		for _, f := range level {
			if bytes.Equal(f.Smallest.UserKey, key) && bytes.Equal(f.Largest.UserKey, key) {
				damageAt(t, filepath.Join(dir, fmt.Sprintf("%06d.sst", f.FileNum)), 8)
				return
			}
		}
	}
	t.Fatalf("no table file holds %q alone: %v", key, levels)
}

// isolateAndDamageKeys writes the values of keys (in key order) again into a table file of
// their own and damages that file's one block: reading any of them fails with pebble's
// corruption error, and so does any read that pebble must load the block for.
func isolateAndDamageKeys(t *testing.T, s *Store, dir string, keys ...[]byte) {
	t.Helper()
	if err := s.gen.db.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		v, ok, err := get(s.gen.db, key)
		if err != nil || !ok {
			t.Fatalf("reading %q: %v, %v", key, ok, err)
		}
		setRaw(t, s, key, v)
	}
	if err := s.gen.db.Flush(); err != nil {
		t.Fatal(err)
	}
	levels, err := s.gen.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range levels {
		for _, f := range level {
			if bytes.Equal(f.Smallest.UserKey, keys[0]) && bytes.Equal(f.Largest.UserKey, keys[len(keys)-1]) {
				damageAt(t, filepath.Join(dir, fmt.Sprintf("%06d.sst", f.FileNum)), 8)
				return
			}
		}
	}
	t.Fatalf("no table file holds %q alone: %v", keys, levels)
}

// checkOne runs egrid store check on dir and wants one problem, containing want.
func checkOne(t *testing.T, dir, want string) {
	t.Helper()
	r, err := Check(t.Context(), dir, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0].Error(), want) {
		t.Errorf("Check problems = %v; want one saying %q", r.Problems, want)
	}
}

// wantReported wants one ERROR, containing msg, and one count of kind.
func (v *valStore) wantReported(t *testing.T, kind, msg string) {
	t.Helper()
	if c := v.damage(); c[kind] != 1 || len(c) != 1 || v.Health().Corruptions != 1 {
		t.Errorf("damage counted %v; want one of kind %s", c, kind)
	}
	if l := v.logs.String(); strings.Count(l, "level=ERROR") != 1 || !strings.Contains(l, msg) {
		t.Errorf("want one ERROR saying %q; logs:\n%s", msg, l)
	}
}

// wantClean wants a store reopened after the repair to find no damage.
func (v *valStore) wantClean(t *testing.T) {
	t.Helper()
	if c := v.damage(); len(c) != 0 || strings.Contains(v.logs.String(), "level=ERROR") {
		t.Errorf("after a restart: damage %v; want none, the repair written; logs:\n%s", c, v.logs.String())
	}
}

// A subscription's cursor that pebble reads intact but that does not decode costs that
// subscription its position alone, as a cursor in a damaged table block does: the store opens,
// the subscription starts again at its journal's trim floor (delivering again every event the
// journal holds; none skipped), the other subscription is untouched, the damage is reported
// once (kind entry) and listed by egrid store check, and the cursor written at the first start
// makes the next one clean. Before, Open failed: one cursor stopped the store.
func TestUndecodableCursorStartsAgainAtTheFloor(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	writeValStore(t, dir, 6, 5, func(s *Store) {
		setRaw(t, s, idKey(prefixCursor, s.topics["orders"].subs["billing"].id), []byte{1, 2, 3})
	})
	checkOne(t, dir, `subscription "billing" of topic "orders": its cursor does not decode`)

	s := openVal(t, dir)
	if c, err := s.Cursors(ctx, "orders"); err != nil || c["billing"] != 5 || c["audit"] != 6 {
		t.Errorf("Cursors = %v, %v; want billing at the floor, 5, and audit at 6", c, err)
	}
	if got := readSeqs(t, s.Store, "orders"); got != "6,7,8,9,10" {
		t.Errorf("journal = %s; want 6 to 10", got)
	}
	s.wantReported(t, DamageEntry, "a subscription's cursor does not decode")
	if !strings.Contains(s.logs.String(), "topic=orders subscription=billing") {
		t.Errorf("the ERROR does not name the subscription: %s", s.logs.String())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openVal(t, dir)
	s.wantClean(t)
	if c, err := s.Cursors(ctx, "orders"); err != nil || c["billing"] != 5 {
		t.Errorf("after a restart: Cursors = %v, %v; want billing at 5", c, err)
	}
}

// A topic's trim floor that does not decode, or that a damaged table block keeps from being
// read, is recomputed: just below the first entry of the journal's oldest block (a Trim
// through 5 left block 4-6, so 3: entries 4 and 5 may be delivered again, none is skipped),
// or, the journal trimmed to nothing, the highest seq its subscriptions hold, so that
// numbering goes on after it and no new event is taken for delivered. The cursors are
// untouched; the damage is reported once (kind entry, or table) and listed by egrid store
// check; the floor is written, and the next start is clean. Before, Open failed.
func TestDamagedTrimFloorIsRecomputed(t *testing.T) {
	for _, tc := range []struct {
		name        string
		auditCursor uint64
		trim        uint64
		table       bool   // the floor is in a damaged table block, not undecodable
		wantJournal string // from seq 1, before the Append
		wantFloor   uint64
	}{
		{name: "journal left", auditCursor: 5, trim: 5, wantJournal: "4,5,6,7,8,9,10", wantFloor: 3},
		// audit's cursor below the floor: a subscription a Trim left behind.
		{name: "journal trimmed to nothing", auditCursor: 7, trim: 10, wantFloor: 10},
		{name: "in a damaged table block", auditCursor: 5, trim: 5, table: true, wantJournal: "4,5,6,7,8,9,10", wantFloor: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "db")
			kind, what := DamageEntry, "does not decode"
			if tc.table {
				kind, what = DamageTable, "is in a damaged table block"
			}
			writeValStore(t, dir, tc.auditCursor, tc.trim, func(s *Store) {
				key := idKey(prefixFloor, s.topics["orders"].id)
				if tc.table {
					isolateAndDamage(t, s, dir, key)
				} else {
					setRaw(t, s, key, []byte{9})
				}
			})
			checkOne(t, dir, fmt.Sprintf(`topic "orders": its trim floor %s: a running egrid recomputes it as %d`, what, tc.wantFloor))

			s := openVal(t, dir)
			if got := readSeqs(t, s.Store, "orders"); got != tc.wantJournal {
				t.Errorf("journal = %s; want %s", got, tc.wantJournal)
			}
			if c, err := s.Cursors(ctx, "orders"); err != nil || c["billing"] != 10 || c["audit"] != tc.auditCursor {
				t.Errorf("Cursors = %v, %v; want billing at 10, audit at %d", c, err, tc.auditCursor)
			}
			if last, err := s.LastSeq(ctx, "orders"); err != nil || last != 10 {
				t.Errorf("LastSeq = %d, %v; want 10", last, err)
			}
			if seq, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "11", Raw: []byte(`{}`)}}); err != nil || seq != 11 {
				t.Errorf("Append = %d, %v; want 11: numbering goes on", seq, err)
			}
			// audit reads on from its cursor: what the journal holds after it, the new event too.
			if got, err := s.Read(ctx, "orders", tc.auditCursor+1, 100); err != nil || len(got) == 0 ||
				got[0].Seq != max(tc.auditCursor, tc.wantFloor)+1 || got[len(got)-1].Seq != 11 {
				t.Errorf("Read from audit's cursor: %d entries, %v; want from %d through 11", len(got), err, max(tc.auditCursor, tc.wantFloor)+1)
			}
			s.wantReported(t, kind, "a topic's trim floor (the newest event number trimmed from its journal) "+what)
			if !strings.Contains(s.logs.String(), fmt.Sprintf("topic=orders floor=%d", tc.wantFloor)) {
				t.Errorf("the ERROR does not give the topic and floor %d: %s", tc.wantFloor, s.logs.String())
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			s = openVal(t, dir)
			s.wantClean(t)
			if f := s.topics["orders"].floor; f != tc.wantFloor {
				t.Errorf("after a restart: floor %d; want %d", f, tc.wantFloor)
			}
			if last, err := s.LastSeq(ctx, "orders"); err != nil || last != 11 {
				t.Errorf("after a restart: LastSeq = %d, %v; want 11", last, err)
			}
		})
	}
}

// The next id (the highest id handed out), when it does not decode or a damaged table block
// keeps it from being read, is recomputed as the highest id the store holds anything under
// (definitions, and every id-keyed range: a subscription's state left without its definition
// counts), so that a new topic or subscription never takes an id whose old keys remain. It is
// reported once (kind definition, or table) and listed by egrid store check, and written, so
// that the next start is clean. Before, Open failed.
func TestDamagedNextIDIsRecomputed(t *testing.T) {
	const stray = 9 // the id of a cursor whose subscription's definition is gone
	for _, tc := range []struct {
		name  string
		table bool
	}{
		{name: "does not decode"},
		{name: "in a damaged table block", table: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "db")
			kind, what := DamageDefinition, "does not decode"
			if tc.table {
				kind, what = DamageTable, "is in a damaged table block"
			}
			writeValStore(t, dir, 5, 0, func(s *Store) {
				setRaw(t, s, idKey(prefixCursor, stray), encodeUint64(4))
				if tc.table {
					isolateAndDamage(t, s, dir, nextIDKey)
				} else {
					setRaw(t, s, nextIDKey, []byte{0, 0, 7})
				}
			})
			checkOne(t, dir, "the next id (the highest id handed out to a topic or subscription) "+what+": nothing is lost (a running egrid recomputes it as 9")

			s := openVal(t, dir)
			if got := readSeqs(t, s.Store, "orders"); got != "1,2,3,4,5,6,7,8,9,10" {
				t.Errorf("journal = %s", got)
			}
			if c, err := s.Cursors(ctx, "orders"); err != nil || c["billing"] != 10 || c["audit"] != 5 {
				t.Errorf("Cursors = %v, %v", c, err)
			}
			s.wantReported(t, kind, "the next id (the highest id handed out to a topic or subscription) "+what)
			if err := s.PutTopic(ctx, "new", nil); err != nil {
				t.Fatal(err)
			}
			if err := s.PutSubscription(ctx, "new", "hook", nil); err != nil {
				t.Fatal(err)
			}
			if id, sid := s.topics["new"].id, s.topics["new"].subs["hook"].id; id != stray+1 || sid != stray+2 {
				t.Errorf("new topic and subscription ids %d, %d; want %d, %d: above every id with keys", id, sid, stray+1, stray+2)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			s = openVal(t, dir)
			s.wantClean(t)
			if s.nextID != stray+2 {
				t.Errorf("after a restart: next id %d; want %d", s.nextID, stray+2)
			}
		})
	}
}

// checkAll runs egrid store check on dir and wants a problem containing each of want.
func checkAll(t *testing.T, dir string, want ...string) {
	t.Helper()
	r, err := Check(t.Context(), dir, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	for _, w := range want {
		found := false
		for _, p := range r.Problems {
			found = found || strings.Contains(p.Error(), w)
		}
		if !found {
			t.Errorf("Check problems = %v; want one saying %q", r.Problems, w)
		}
	}
}

// A damaged table block holding a topic's newest journal entries no longer refuses Open (the
// journal's end was read to number new events, and the read failed): numbering goes on past
// every number the block may hold, so a new event is read back, and the entries the damage
// hides are reported lost when read. The journal's end is reported (an ERROR, a count of kind
// table, a problem of egrid store check) at every start while the block is there.
func TestDamagedJournalEndIsNumberedPast(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	writeValStore(t, dir, 5, 0, func(s *Store) {
		isolateAndDamageKeys(t, s, dir, seqKey(prefixJournal, s.topics["orders"].id, 10))
	})
	checkAll(t, dir, `topic "orders": its newest journal entries are in a damaged table block: a running egrid numbers new events from 11`)

	s := openVal(t, dir)
	if last, err := s.LastSeq(ctx, "orders"); err != nil || last != 10 {
		t.Errorf("LastSeq = %d, %v; want 10", last, err)
	}
	if seq, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "11", Raw: []byte(`{}`)}}); err != nil || seq != 11 {
		t.Fatalf("Append = %d, %v; want 11", seq, err)
	}
	if got, err := s.Read(ctx, "orders", 11, 10); err != nil || len(got) != 1 || got[0].Event.ID != "11" {
		t.Errorf("Read from 11 = %v, %v; want the new event read back", got, err)
	}
	if c := s.damage(); c[DamageTable] != 1 || len(c) != 1 {
		t.Errorf("damage counted %v; want one of kind table", c)
	}
	if l := s.logs.String(); strings.Count(l, "level=ERROR") != 1 ||
		!strings.Contains(l, "a topic's newest journal entries are in a damaged table block; numbering goes on") ||
		!strings.Contains(l, "topic=orders numberingFrom=11") {
		t.Errorf("want one ERROR saying numbering goes on from 11; logs:\n%s", l)
	}
	if got, err := s.Read(ctx, "orders", 1, 100); err != nil || len(got) == 0 || got[len(got)-1].Seq != 11 {
		t.Errorf("Read from 1 = %d entries, %v; want what can be read, through 11", len(got), err)
	}
	if !strings.Contains(s.logs.String(), "journal entries are in a damaged table block and cannot be read") {
		t.Errorf("the entries the damage hides are not reported; logs:\n%s", s.logs.String())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openVal(t, dir)
	if c := s.damage(); c[DamageTable] != 1 || len(c) != 1 {
		t.Errorf("after a restart: damage counted %v; want the journal's end again", c)
	}
	if last, err := s.LastSeq(ctx, "orders"); err != nil || last != 11 {
		t.Errorf("after a restart: LastSeq = %d, %v; want 11", last, err)
	}
	if got, err := s.Read(ctx, "orders", 11, 10); err != nil || len(got) != 1 || got[0].Event.ID != "11" {
		t.Errorf("after a restart: Read from 11 = %v, %v; want the new event", got, err)
	}
}

// A damaged table block holding a topic's newest journal entries and keys past its journal
// (here the next topic's oldest) is met by any read of the topic's journal end, so no new
// event of it could be read back: the store opens, that topic refuses Append saying to delete
// and create it again (or restore a backup), and the next topic, whose oldest entry is lost,
// numbers on after its newest. Deleted and created again, the topic takes events. Before,
// Open failed.
func TestDamagedJournalEndPastTheJournalClosesTheTopic(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	writeValStore(t, dir, 5, 0, func(s *Store) {
		if err := s.PutTopic(ctx, "later", nil); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			appendN(t, s, "later", i, i)
		}
		isolateAndDamageKeys(t, s, dir, seqKey(prefixJournal, s.topics["orders"].id, 10), seqKey(prefixJournal, s.topics["later"].id, 1))
	})
	checkAll(t, dir, `topic "orders": its newest journal entries are in a damaged table block that reaches past the journal's end: a running egrid refuses its publishes`,
		`topic "later": its newest journal entries are in a damaged table block: a running egrid numbers new events from 4`)

	s := openVal(t, dir)
	_, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "11", Raw: []byte(`{}`)}})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "delete the topic and create it again") {
		t.Errorf("Append to orders = %v; want it refused, saying to delete and create the topic", err)
	}
	if seq, err := s.Append(ctx, "later", time.Now(), []*schemas.Event{{ID: "4", Raw: []byte(`{}`)}}); err != nil || seq != 4 {
		t.Errorf("Append to later = %d, %v; want 4", seq, err)
	}
	if got := readSeqs(t, s.Store, "later"); got != "2,3,4" {
		t.Errorf("later = %s; want 2 to 4, 1 lost in the damaged block", got)
	}
	if l := s.logs.String(); !strings.Contains(l, "reaches past the journal's end; the topic takes no new event") || !strings.Contains(l, "topic=orders") {
		t.Errorf("want an ERROR saying orders takes no new event; logs:\n%s", l)
	}
	if err := s.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if seq, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "new", Raw: []byte(`{}`)}}); err != nil || seq != 1 {
		t.Errorf("Append to orders created again = %d, %v; want 1", seq, err)
	}
	if got := readSeqs(t, s.Store, "orders"); got != "1" {
		t.Errorf("orders created again = %s; want 1", got)
	}
}

// A trim floor recomputed while the journal's oldest block is damaged too (here both in one
// table block) takes the journal for what it is, not empty: the floor becomes 0, so the
// subscription behind reads on from its cursor, is told the damaged entry is lost and gets
// every entry after it. Before, the failed read was taken for an empty journal and the floor
// set to the highest seq a subscription held: audit, at 5, silently skipped 7 to 9, which
// could be read.
func TestDamagedTrimFloorIsNotRaisedPastADamagedOldestBlock(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	writeValStore(t, dir, 5, 5, func(s *Store) {
		id := s.topics["orders"].id
		isolateAndDamageKeys(t, s, dir, idKey(prefixFloor, id), seqKey(prefixJournal, id, 6))
	})
	checkAll(t, dir, `topic "orders": its trim floor is in a damaged table block: a running egrid recomputes it as 0`)

	s := openVal(t, dir)
	if f := s.topics["orders"].floor; f != 0 {
		t.Errorf("floor %d; want 0", f)
	}
	got, err := s.Read(ctx, "orders", 6, 100)
	var seqs []string
	for _, e := range got {
		seqs = append(seqs, fmt.Sprint(e.Seq))
	}
	if err != nil || strings.Join(seqs, ",") != "7,8,9,10" {
		t.Errorf("Read from audit's cursor = %v, %v; want 7 to 10", seqs, err)
	}
	if l := s.logs.String(); !strings.Contains(l, "journal entries are in a damaged table block and cannot be read") || !strings.Contains(l, "fromSeq=6 throughSeq=6") {
		t.Errorf("want the lost entry 6 reported; logs:\n%s", l)
	}
}

// The recovery that reopens a failed store reads each topic's journal end as Open does
// (readJournalEnd): a damaged table block holding a topic's newest entries, found only as
// the store reopens itself, neither keeps the store failed (the read of the journal's end
// fails) nor lets a topic whose block reaches past its journal take events that could not be
// read back. That topic refuses Append, saying what to do, the next topic numbers on after
// its newest, and the damage is reported.
func TestRecoveryReadsADamagedJournalEnd(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	s := openVal(t, dir)
	for _, name := range []string{"orders", "later"} {
		if err := s.PutTopic(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			appendN(t, s.Store, name, i, i)
		}
	}
	isolateAndDamageKeys(t, s.Store, dir, seqKey(prefixJournal, s.topics["orders"].id, 3), seqKey(prefixJournal, s.topics["later"].id, 1))
	if c := s.damage(); len(c) != 0 {
		t.Fatalf("damage counted %v before the store failed; want none", c)
	}

	s.onFail(s.gen, errors.New("injected write failure"))
	if err := s.WaitFailed(ctx, false); err != nil {
		t.Fatal(err)
	}
	_, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: "4", Raw: []byte(`{}`)}})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "delete the topic and create it again") {
		t.Errorf("Append to orders after the recovery = %v; want it refused, saying to delete and create the topic", err)
	}
	if seq, err := s.Append(ctx, "later", time.Now(), []*schemas.Event{{ID: "4", Raw: []byte(`{}`)}}); err != nil || seq != 4 {
		t.Errorf("Append to later after the recovery = %d, %v; want 4", seq, err)
	}
	if c := s.damage(); c[DamageTable] < 2 {
		t.Errorf("damage counted %v; want both journal ends (kind table)", c)
	}
	if l := s.logs.String(); !strings.Contains(l, "reaches past the journal's end; the topic takes no new event") || !strings.Contains(l, "topic=orders") {
		t.Errorf("want an ERROR saying orders takes no new event; logs:\n%s", l)
	}
}
