package disk

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/egridio/egrid/router/store"
)

const outboxRecords = 200

// writeOutboxStore writes, in dir, outboxRecords dead letters into the outbox, IDs as the
// dead-letter actor writes them, and returns the table file that holds them.
func writeOutboxStore(t *testing.T, dir string) string {
	t.Helper()
	return writeOutboxStoreIDs(t, dir, "%020d")
}

// writeOutboxStoreIDs is writeOutboxStore with the IDs 1 to outboxRecords written by format.
func writeOutboxStoreIDs(t *testing.T, dir, format string) string {
	t.Helper()
	s, err := Open(dir, Options{tune: noCompactions})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var recs []store.DeadLetterRecord
	for i := range outboxRecords {
		recs = append(recs, store.DeadLetterRecord{ID: fmt.Sprintf(format, i+1), Payload: fmt.Appendf(nil, `{"n":%d,"pad":%q}`, i+1, strings.Repeat("p", 300))})
	}
	if err := s.PutDeadLetters(t.Context(), recs); err != nil {
		t.Fatal(err)
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
			if f.Smallest.UserKey[0] <= prefixDeadLetter && f.Largest.UserKey[0] >= prefixDeadLetter {
				return filepath.Join(dir, fmt.Sprintf("%06d.sst", f.FileNum))
			}
		}
	}
	t.Fatalf("no table file holds the outbox: %v", levels)
	return ""
}

// A table block of the dead-letter outbox that fails its checksum loses the dead letters in it
// alone: the scan that the dead-letter actor starts with (and a listing) gives every other
// record, before and after the block, and the damage is reported once (an ERROR saying what
// is lost and what to do, a table damage count, a problem of egrid store check). Before, the
// scan failed at the block, and with it the router's start.
func TestDamagedOutboxBlockIsReportedAndSkipped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		at     func(size int64) []int64
		losses int
	}{
		{name: "a block in the middle", at: func(size int64) []int64 { return []int64{size / 4} }, losses: 1},
		{name: "the first block", at: func(int64) []int64 { return []int64{8} }, losses: 1},
		{name: "two blocks", at: func(size int64) []int64 { return []int64{size / 4, size / 2} }, losses: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "db")
			table := writeOutboxStore(t, dir)
			fi, err := os.Stat(table)
			if err != nil {
				t.Fatal(err)
			}
			for _, off := range tc.at(fi.Size()) {
				damageAt(t, table, off)
			}

			r, err := Check(ctx, dir, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if len(r.Problems) != 1 || !errors.Is(r.Problems[0], ErrCorrupt) || strings.Count(r.Problems[0].Error(), "corrupt") != 1 || strings.Count(r.Problems[0].Error(), "are in a damaged table block") != tc.losses ||
				!strings.Contains(r.Problems[0].Error(), "dead-letter outbox") || !strings.Contains(r.Problems[0].Error(), "restore the directory from a backup") {
				t.Errorf("Check problems %v; want the outbox's %d lost ranges, saying what to do", r.Problems, tc.losses)
			}

			var logs lockedBuffer
			var mu sync.Mutex
			counts := map[string]int{}
			s, err := Open(dir, Options{tune: noCompactions, Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnCorruption: func(kind string) {
				mu.Lock()
				counts[kind]++
				mu.Unlock()
			}})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			var ids []string
			for pass := range 2 {
				ids = ids[:0]
				if err := s.ScanDeadLetters(ctx, func(r store.DeadLetterRecord) error {
					ids = append(ids, r.ID)
					return nil
				}); err != nil {
					t.Fatalf("pass %d: ScanDeadLetters: %v; want the records it can read", pass, err)
				}
				if len(ids) != r.DeadLetters {
					t.Fatalf("pass %d: ScanDeadLetters gave %d records, store check counted %d", pass, len(ids), r.DeadLetters)
				}
			}
			// The records lost are the damaged blocks' runs; those after the (last) block are read.
			runs, want := 0, 1
			for _, id := range ids {
				if id != fmt.Sprintf("%020d", want) {
					runs++
				}
				n, err := strconv.Atoi(id)
				if err != nil {
					t.Fatal(err)
				}
				want = n + 1
			}
			if lost := outboxRecords - len(ids); lost == 0 || lost > outboxRecords/2 || runs != tc.losses || want != outboxRecords+1 {
				t.Errorf("read %d of %d records, with %d gaps, the last %d; want all but the damaged blocks' (%d), through the last", len(ids), outboxRecords, runs, want-1, tc.losses)
			}
			recs, err := s.DeadLetters(ctx)
			if err != nil || len(recs) != len(ids) {
				t.Errorf("DeadLetters: %d records, %v; want the %d readable", len(recs), err, len(ids))
			}
			if mu.Lock(); counts[DamageTable] != tc.losses || len(counts) != 1 {
				t.Errorf("damage counted %v; want %d table damage, each reported once", counts, tc.losses)
			}
			mu.Unlock()
			l := logs.String()
			if n := strings.Count(l, `level=ERROR msg="disk store: dead letters of the outbox are in a damaged table block`); n != tc.losses || strings.Count(l, "level=ERROR") != n ||
				!strings.Contains(l, "not yet written to the dead-letter destination") || !strings.Contains(l, "egrid store check") {
				t.Errorf("%d ERRORs about the outbox; want %d, saying what is lost and what to do; logs:\n%s", n, tc.losses, l)
			}
			// The outbox takes writes as before.
			if err := s.PutDeadLetters(ctx, []store.DeadLetterRecord{{ID: fmt.Sprintf("%020d", outboxRecords+1), Payload: []byte("{}")}}); err != nil {
				t.Fatal(err)
			}
			if got, err := s.DeadLettersByID(ctx, []string{fmt.Sprintf("%020d", outboxRecords+1), ids[len(ids)-1]}); err != nil || len(got) != 2 || !bytes.Equal(got[1].Payload, []byte("{}")) {
				t.Errorf("DeadLettersByID after a write: %v, %v", got, err)
			}
		})
	}
}

// The outbox's IDs are strings of any length: a damaged block among IDs shorter than 8 bytes
// loses its records alone too, the scan going on past it (the search for the records that
// read again takes an ID cut short as padded with zero bytes, never a position before it).
func TestDamagedOutboxBlockAmongShortIDsIsSkipped(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "db")
	table := writeOutboxStoreIDs(t, dir, "%d")
	fi, err := os.Stat(table)
	if err != nil {
		t.Fatal(err)
	}
	damageAt(t, table, fi.Size()/4)
	v := openVal(t, dir)
	var ids []string
	bounded(t, "ScanDeadLetters", func() {
		err = v.ScanDeadLetters(ctx, func(r store.DeadLetterRecord) error {
			ids = append(ids, r.ID)
			return nil
		})
	})
	if err != nil {
		t.Fatalf("ScanDeadLetters: %v; want the records it can read", err)
	}
	var all []string
	for i := range outboxRecords {
		all = append(all, strconv.Itoa(i+1))
	}
	slices.Sort(all)
	runs, j := 0, 0
	for _, id := range ids {
		at := slices.Index(all[j:], id)
		if at < 0 {
			t.Fatalf("read %q out of order or twice: %q", id, ids)
		}
		if at > 0 {
			runs++
		}
		j += at + 1
	}
	if lost := outboxRecords - len(ids); lost == 0 || lost > outboxRecords/2 || runs+boolInt(j < len(all)) != 1 {
		t.Errorf("read %d of %d records in %d gaps (through %d of %d); want all but the damaged block's, one gap", len(ids), outboxRecords, runs, j, len(all))
	}
	if c := v.damage(); c[DamageTable] != 1 || len(c) != 1 {
		t.Errorf("damage counted %v; want the block once", c)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
