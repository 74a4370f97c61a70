package disk

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// A cursor of 2⁶⁴−1, past its journal's end, as builds before 2026-11-23 could write, is
// lowered to the journal's trim floor when the store opens, with a warning: the subscription
// gets every event still in the journal again and every new one, where it got nothing more.
// Other cursors stay as they are.
func TestCursorPastTheJournalEndIsRepaired(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	s, err := Open("db", Options{fs: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTopic(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"stuck", "fine"} {
		if err := s.PutSubscription(ctx, "orders", sub, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		if _, err := s.Append(ctx, "orders", time.Now(), []*schemas.Event{{ID: string(rune('a' + i)), Raw: []byte(`{}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.UpdateSubscription(ctx, "orders", "fine", store.Update{Cursor: 4}); err != nil {
		t.Fatal(err)
	}
	if err := s.Trim(ctx, "orders", 2); err != nil {
		t.Fatal(err)
	}
	stuck := s.topics["orders"].subs["stuck"].id
	if err := s.gen.db.Set(idKey(prefixCursor, stuck), encodeUint64(math.MaxUint64), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A read-only open (egrid store check) sees the repaired cursor and writes nothing.
	ro, err := Open("db", Options{fs: fs, ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("read-only open of a store with a cursor of 2^64-1: %v", err)
	}
	if st, err := ro.LoadSubscription(ctx, "orders", "stuck"); err != nil || st.Cursor != 2 {
		t.Errorf("read-only: cursor of stuck = %d, %v; want 2", st.Cursor, err)
	}
	ro.Close()

	var logs bytes.Buffer
	r, err := Open("db", Options{fs: fs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for sub, want := range map[string]uint64{"stuck": 2, "fine": 4} {
		st, err := r.LoadSubscription(ctx, "orders", sub)
		if err != nil || st.Cursor != want {
			t.Errorf("cursor of %s after reopening = %d, %v; want %d", sub, st.Cursor, err, want)
		}
	}
	if !strings.Contains(logs.String(), "cursor was 2^64-1") || !strings.Contains(logs.String(), "subscription=stuck") {
		t.Errorf("no warning naming the repaired subscription in the log:\n%s", logs.String())
	}
	r.Close()
	// The repair is on disk: a third open finds nothing to repair.
	logs.Reset()
	r, err = Open("db", Options{fs: fs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if st, _ := r.LoadSubscription(ctx, "orders", "stuck"); st.Cursor != 2 || strings.Contains(logs.String(), "past its journal's end") {
		t.Errorf("third open: cursor %d, log %q; want 2 and no repair", st.Cursor, logs.String())
	}
}
