package disk

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
)

// TestDeadLettersLostInABlockReportedForOtherDataAreTold: one damaged table block holds a dead
// letter of the outbox and keys of another kind, reported first: a subscription's cursor
// (Open reports it) or a delivery history (an explain's read reports it). The block is counted
// once, and the outbox scan still says that dead letters were lost with it.
func TestDeadLettersLostInABlockReportedForOtherDataAreTold(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other func(s *Store) []byte // writes the other key and returns it
		read  func(t *testing.T, v *valStore)
	}{
		{"cursor", func(s *Store) []byte {
			return idKey(prefixCursor, s.topics["orders"].subs["audit"].id)
		}, func(*testing.T, *valStore) {}},
		{"history", func(s *Store) []byte {
			if err := s.PutHistory(t.Context(), "orders", "billing", 0, []store.HistoryRecord{{EventID: "e1", Expires: time.Now().Add(time.Hour), Payload: []byte("h")}}); err != nil {
				t.Fatal(err)
			}
			return historyKey(s.topics["orders"].subs["billing"].id, "e1")
		}, func(t *testing.T, v *valStore) {
			if _, err := v.History(t.Context(), "orders", "billing", "e1", time.Now()); err == nil {
				t.Fatal("History read the damaged block")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "db")
			writeValStore(t, dir, 10, 0, func(s *Store) {
				other := tc.other(s)
				if err := s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: "d1", Payload: []byte("{}")}}); err != nil {
					t.Fatal(err)
				}
				keys := [][]byte{other, nameKey(prefixDeadLetter, "d1")}
				slices.SortFunc(keys, bytes.Compare) // in the table's order
				isolateAndDamageKeys(t, s, dir, keys...)
			})
			v := openVal(t, dir)
			tc.read(t, v)
			recs, err := v.DeadLetters(ctx)
			if err != nil || len(recs) != 0 {
				t.Fatalf("DeadLetters = %v, %v; want d1 lost with its block", recs, err)
			}
			if !strings.Contains(v.logs.String(), "dead letters of the outbox are in a damaged table block") {
				t.Errorf("d1 was lost with its block, but no ERROR says so:\n%s", v.logs.String())
			}
			if got := v.damage(); got[DamageTable] != 1 || len(got) != 1 {
				t.Errorf("damage counted %v, want the one block once", got)
			}
		})
	}
}
