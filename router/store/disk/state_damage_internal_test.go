package disk

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// lockedBuffer is a log sink that pebble's goroutines may write to as well.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

const stateEvents = 200

// noCompactions keeps the table files as flushed: a subscription's state in a file of its own.
func noCompactions(o *pebble.Options) { o.DisableAutomaticCompactions = true }

// writeStateStore writes, in dir, topic orders with subscriptions billing and audit and
// stateEvents events, trimmed through 50 (audit's cursor at 60), then billing's state in
// table files of their own: every event parked, a probation state, the cursor at the end. It
// returns the file of each part.
func writeStateStore(t *testing.T, dir string) (tables map[string]string) {
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
	for _, name := range []string{"billing", "audit"} { // billing's keys first
		if err := s.PutSubscription(ctx, "orders", name, nil); err != nil {
			t.Fatal(err)
		}
	}
	due := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	var put []store.Parked
	for i := range stateEvents {
		ev := &schemas.Event{ID: fmt.Sprint(i), Raw: fmt.Appendf(nil, `{"id":"%d","pad":%q}`, i, strings.Repeat(fmt.Sprint(i), 300))}
		seq, err := s.Append(ctx, "orders", due, []*schemas.Event{ev})
		if err != nil {
			t.Fatal(err)
		}
		put = append(put, store.Parked{Seq: seq, Attempts: 1, NextDue: due, Event: ev})
	}
	if err := s.UpdateSubscription(ctx, "orders", "audit", store.Update{Cursor: 60}); err != nil {
		t.Fatal(err)
	}
	if err := s.Trim(ctx, "orders", 50); err != nil {
		t.Fatal(err)
	}
	if err := s.gen.db.Flush(); err != nil {
		t.Fatal(err)
	}
	// A flush for each part of billing's state: a damaged table block can fail reads of
	// every key in its file's key range, and the files are kept apart from the other
	// subscription's keys.
	billing := s.topics["orders"].subs["billing"].id
	tables = map[string]string{}
	for _, part := range []struct {
		name   string
		u      store.Update
		lo, hi []byte
	}{
		{"parked retries", store.Update{Put: put}, seqKey(prefixParked, billing, 1), seqKey(prefixParked, billing, stateEvents)},
		{"probation state", store.Update{Probation: []byte("probation")}, idKey(prefixProbation, billing), idKey(prefixProbation, billing)},
		{"cursor", store.Update{Cursor: stateEvents}, idKey(prefixCursor, billing), idKey(prefixCursor, billing)},
	} {
		if err := s.UpdateSubscription(ctx, "orders", "billing", part.u); err != nil {
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
				if bytes.Equal(f.Smallest.UserKey, part.lo) && bytes.Equal(f.Largest.UserKey, part.hi) {
					tables[part.name] = filepath.Join(dir, fmt.Sprintf("%06d.sst", f.FileNum))
				}
			}
		}
		if tables[part.name] == "" {
			t.Fatalf("no table file holds billing's %s alone: %v", part.name, levels)
		}
	}
	return tables
}

// damageAt overwrites 64 bytes of file at off.
func damageAt(t *testing.T, file string, off int64) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, 64), off); err != nil {
		t.Fatal(err)
	}
}

// A table block of a subscription's state that fails its checksum stops only what it holds:
// the store opens, the subscription's state loads with what can be read, and each lost part
// is reported once (an ERROR naming the topic, the subscription and what is lost; a table
// damage count; a problem in egrid store check). A lost cursor starts the subscription again at
// the oldest event the journal holds (delivered again, none skipped), written so that the next
// start does not find the damage again; lost parked retries are lost; a lost probation state
// leaves the endpoint healthy. The other subscription is untouched. Before, the load failed
// (or, for the cursor, Open did) at every attempt: the subscription stopped for good.
func TestDamagedSubscriptionStateIsReportedAndSkipped(t *testing.T) {
	for _, tc := range []struct {
		part       string // the part of billing's state whose table file is damaged
		at         func(size int64) int64
		wantCursor uint64
	}{
		{part: "parked retries", at: func(size int64) int64 { return size / 4 }, wantCursor: stateEvents},
		{part: "probation state", at: func(int64) int64 { return 8 }, wantCursor: stateEvents},
		{part: "cursor", at: func(int64) int64 { return 8 }, wantCursor: 50},
	} {
		wantLost := []string{tc.part}
		t.Run(tc.part, func(t *testing.T) {
			ctx := t.Context()
			dir := filepath.Join(t.TempDir(), "db")
			table := writeStateStore(t, dir)[tc.part]
			fi, err := os.Stat(table)
			if err != nil {
				t.Fatal(err)
			}
			damageAt(t, table, tc.at(fi.Size()))

			// egrid store check lists each lost part.
			r, err := Check(ctx, dir, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if len(r.Problems) != len(wantLost) {
				t.Errorf("Check found %d problems, want %d (%v): %v", len(r.Problems), len(wantLost), wantLost, r.Problems)
			}
			for _, p := range r.Problems {
				if !strings.Contains(p.Error(), `subscription "billing" of topic "orders"`) {
					t.Errorf("Check problem %q does not name the subscription", p)
				}
			}

			var logs lockedBuffer
			var mu sync.Mutex
			counts := map[string]int{}
			opts := Options{tune: noCompactions, Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnCorruption: func(kind string) {
				mu.Lock()
				counts[kind]++
				mu.Unlock()
			}}
			s, err := Open(dir, opts)
			if err != nil {
				t.Fatalf("Open: %v; want the store open with billing's state damaged", err)
			}
			if c, err := s.Cursors(ctx, "orders"); err != nil || c["billing"] != tc.wantCursor || c["audit"] != 60 {
				t.Errorf("Cursors = %v, %v; want billing at %d and audit at 60", c, err, tc.wantCursor)
			}
			var parked []uint64
			for pass := range 2 {
				st, err := s.LoadSubscriptionIndex(ctx, "orders", "billing")
				if err != nil {
					t.Fatalf("pass %d: LoadSubscriptionIndex: %v; want what can be read", pass, err)
				}
				parked = parked[:0]
				for _, p := range st.Parked {
					parked = append(parked, p.Seq)
				}
				lost := stateEvents - len(parked)
				if want := tc.part == "parked retries"; (lost > 0) != want || lost > 50 {
					t.Fatalf("pass %d: %d of %d parked retries loaded; want all but a damaged block's only when it holds them", pass, len(parked), stateEvents)
				}
				if wantProbation := tc.part != "probation state"; (st.Probation != nil) != wantProbation {
					t.Errorf("pass %d: probation %q; want it loaded: %v", pass, st.Probation, wantProbation)
				}
			}
			all := make([]uint64, stateEvents)
			for i := range all {
				all[i] = uint64(i + 1)
			}
			// Asked for every seq, the ones lost are left out, as forgotten.
			got, err := s.ParkedEvents(ctx, "orders", "billing", all)
			if err != nil || len(got) != len(parked) {
				t.Errorf("ParkedEvents of every seq: %d, %v; want the %d loaded", len(got), err, len(parked))
			}
			if st, err := s.LoadSubscription(ctx, "orders", "audit"); err != nil || st.Cursor != 60 || len(st.Parked) != 0 {
				t.Errorf("audit's state: %+v, %v; want it untouched", st, err)
			}
			if mu.Lock(); counts[DamageTable] != len(wantLost) || len(counts) != 1 {
				t.Errorf("damage counted %v; want %d table damage, each reported once", counts, len(wantLost))
			}
			mu.Unlock()
			l := logs.String()
			for _, part := range wantLost {
				if !strings.Contains(l, "level=ERROR msg=\"disk store: a subscription's "+part) {
					t.Errorf("no ERROR about billing's %s; logs:\n%s", part, l)
				}
			}
			if n := strings.Count(l, "level=ERROR"); n != len(wantLost) || strings.Count(l, "topic=orders subscription=billing") != n {
				t.Errorf("%d ERRORs; want %d, each naming topic and subscription; logs:\n%s", n, len(wantLost), l)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			// The cursor written at the first start is read at the next: delivery does not go
			// back again.
			s, err = Open(dir, Options{tune: noCompactions})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if c, err := s.Cursors(ctx, "orders"); err != nil || c["billing"] != tc.wantCursor {
				t.Errorf("after a restart: Cursors = %v, %v; want billing at %d", c, err, tc.wantCursor)
			}
		})
	}
}
