package disk

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
)

// TestLevel0IsCompactedAtItsThreshold: level 0 is left alone until half
// l0CompactionThreshold sublevels overlap (pebble compacts it at half its threshold), then
// compacted, and TableWrites counts both kinds of table writes. Each
// round flushes a memtable holding new journal entries and the subscription's cursor, whose
// key every round writes again, so each flushed table overlaps all the ones before it.
func TestLevel0IsCompactedAtItsThreshold(t *testing.T) {
	ctx := t.Context()
	s, err := Open("db", Options{fs: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	round := func(i int) {
		t.Helper()
		last := appendPadded(t, s, i, 100)
		if err := s.UpdateSubscription(ctx, "orders", "billing", store.Update{Cursor: last - 50}); err != nil {
			t.Fatal(err)
		}
		if err := s.gen.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	// Pebble's default threshold (4) compacts at 2 sublevels; the store's at 8.
	const below = 7
	start := s.TableWrites()
	for i := range below {
		round(i)
	}
	w := s.TableWrites().Sub(start)
	if sub := s.gen.db.Metrics().Levels[0].Sublevels; sub != below {
		t.Fatalf("level 0 holds %d sublevels after %d overlapping flushes; %+v", sub, below, w)
	}
	if w.Flushed == 0 || w.Compacted != 0 {
		t.Fatalf("after %d flushes below the threshold: %+v; want flushed bytes and nothing compacted", below, w)
	}
	round(below)
	deadline := time.After(30 * time.Second)
	for s.TableWrites().Sub(start).Compacted == 0 {
		select {
		case <-deadline:
			t.Fatalf("no compaction within 30 s of level 0 reaching %d sublevels: %+v", below+1, s.TableWrites())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.TableWrites(); got != (TableWrites{}) {
		t.Errorf("a closed store reported %+v", got)
	}
}

func TestTableWritesSub(t *testing.T) {
	later, earlier := TableWrites{Flushed: 10, Compacted: 7}, TableWrites{Flushed: 4, Compacted: 7}
	if got := later.Sub(earlier); got != (TableWrites{Flushed: 6}) {
		t.Errorf("Sub = %+v", got)
	}
	if got := earlier.Sub(later); got != earlier {
		t.Errorf("Sub of a reading from before a reopening = %+v, want the later reading", got)
	}
}
