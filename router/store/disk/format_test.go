package disk_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// copyStore copies the store directory src (testdata) into a new temporary directory, with
// the modes the store gives its files, and returns the copy's path.
func copyStore(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "store")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestOpensFormat1Store opens a store written before the format version was recorded
// (testdata/store-format1, made by that code: topic "orders" with five events, one key each,
// subscription "s1" at cursor 3 with event 2 parked after two attempts, dead letter "dl-1")
// and finds everything in it, delivers from it, records the current format in it, goes on
// numbering after it in journal blocks, and reads and trims the old entries and the new
// blocks together.
func TestOpensFormat1Store(t *testing.T) {
	dir := copyStore(t, "testdata/store-format1")
	ctx := t.Context()

	rep, err := disk.Check(ctx, dir, nil, nil)
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("Check of the format-1 store: %+v, %v", rep.Problems, err)
	}
	if rep.Topics != 1 || rep.Subscriptions != 1 || rep.JournalEntries != 5 || rep.ParkedEvents != 1 || rep.DeadLetters != 1 {
		t.Fatalf("Check counted %+v, want 1 topic, 1 subscription, 5 entries, 1 parked, 1 dead letter", rep)
	}

	s, err := disk.Open(dir, disk.Options{PrivateDir: true})
	if err != nil {
		t.Fatalf("Open of a format-1 store: %v", err)
	}
	if v, ok, err := s.Format(); err != nil || !ok || v != disk.FormatVersion {
		t.Fatalf("format after Open = %d, recorded %v, %v; want %d recorded", v, ok, err, disk.FormatVersion)
	}
	topics, err := s.Topics(ctx)
	if err != nil || len(topics) != 1 || topics[0].Name != "orders" || string(topics[0].Spec) != `{"inputSchema":"EventGridSchema"}` {
		t.Fatalf("Topics = %+v, %v", topics, err)
	}
	subs, err := s.Subscriptions(ctx, "orders")
	if err != nil || len(subs) != 1 || subs[0].Name != "s1" {
		t.Fatalf("Subscriptions = %+v, %v", subs, err)
	}
	st, err := s.LoadSubscription(ctx, "orders", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Cursor != 3 || len(st.Parked) != 1 || st.Parked[0].Seq != 2 || st.Parked[0].Attempts != 2 ||
		st.Parked[0].LastOutcome != schemas.Busy || st.Parked[0].LastStatus != 503 || st.Parked[0].Event.ID != "ev-2" {
		t.Fatalf("subscription state = %+v", st)
	}
	// What a subscription delivers next: the parked event and the journal after its cursor.
	got, err := s.Read(ctx, "orders", st.Cursor+1, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, fmt.Sprint(e.Seq, ":", e.Event.ID))
		want := testEvent(e.Event.ID)
		if !e.PublishTime.Equal(publishTime) || string(e.Event.Raw) != string(want.Raw) || e.Event.Subject != want.Subject || e.Event.Traceparent != want.Traceparent {
			t.Errorf("entry %d = %+v, want the event as written", e.Seq, e.Event)
		}
	}
	if want := []string{"4:ev-4", "5:ev-5"}; !slices.Equal(ids, want) {
		t.Fatalf("journal after the cursor = %v, want %v", ids, want)
	}
	dls, err := s.DeadLetters(ctx)
	if err != nil || len(dls) != 1 || dls[0].ID != "dl-1" || string(dls[0].Payload) != "payload" {
		t.Fatalf("DeadLetters = %+v, %v", dls, err)
	}
	last, err := s.Append(ctx, "orders", publishTime, []*schemas.Event{testEvent("ev-6")})
	if err != nil || last != 6 {
		t.Fatalf("Append after the upgrade = %d, %v; want 6", last, err)
	}
	// Format-1 entries and format-2 blocks are read together, in order.
	last, err = s.Append(ctx, "orders", publishTime, []*schemas.Event{testEvent("ev-7"), testEvent("ev-8"), testEvent("ev-9")})
	if err != nil || last != 9 {
		t.Fatalf("Append after the upgrade = %d, %v; want 9", last, err)
	}
	if got := readIDs(t, s, "orders", 4); !slices.Equal(got, []string{"4:ev-4", "5:ev-5", "6:ev-6", "7:ev-7", "8:ev-8", "9:ev-9"}) {
		t.Fatalf("journal from 4 = %v", got)
	}
	// A trim through the middle of a block hides the trimmed part of it.
	if err := s.UpdateSubscription(ctx, "orders", "s1", store.Update{Cursor: 9, Delete: []uint64{2}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Trim(ctx, "orders", 7); err != nil {
		t.Fatal(err)
	}
	if got := readIDs(t, s, "orders", 1); !slices.Equal(got, []string{"8:ev-8", "9:ev-9"}) {
		t.Fatalf("journal after Trim(7) = %v, want 8 and 9", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened: the version stays recorded and the new writes are there.
	s, err = disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, ok, _ := s.Format(); !ok || v != disk.FormatVersion {
		t.Fatalf("format after reopening = %d, recorded %v", v, ok)
	}
	if last, _ := s.LastSeq(ctx, "orders"); last != 9 {
		t.Fatalf("LastSeq after reopening = %d, want 9", last)
	}
	if st, _ := s.LoadSubscription(ctx, "orders", "s1"); st.Cursor != 9 || len(st.Parked) != 0 {
		t.Fatalf("state after reopening = %+v", st)
	}
	if got := readIDs(t, s, "orders", 1); !slices.Equal(got, []string{"8:ev-8", "9:ev-9"}) {
		t.Fatalf("journal after reopening = %v, want 8 and 9", got)
	}
	// Files the upgrade created are private too.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // an obsolete file pebble deleted during the walk
		}
		if err == nil && info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", path, info.Mode().Perm())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readIDs reads topic's journal from seq from on, as "seq:id".
func readIDs(t *testing.T, s *disk.Store, topic string, from uint64) []string {
	t.Helper()
	got, err := s.Read(t.Context(), topic, from, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, fmt.Sprint(e.Seq, ":", e.Event.ID))
	}
	return ids
}

// TestCheckWritesNoFormat: egrid store check on a format-1 store leaves it as it was.
func TestCheckWritesNoFormat(t *testing.T) {
	dir := copyStore(t, "testdata/store-format1")
	if _, err := disk.Check(t.Context(), dir, nil, nil); err != nil {
		t.Fatal(err)
	}
	s, err := disk.Open(dir, disk.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok, err := s.Format(); ok || err != nil {
		t.Fatalf("a read-only open recorded the format (%v, %v)", ok, err)
	}
}

// TestRefusesNewerFormat: a store a newer egrid wrote (format FormatVersion+1) is refused
// with an error that names both versions and says what to do; nothing in it is changed.
func TestRefusesNewerFormat(t *testing.T) {
	dir := t.TempDir()
	s, err := disk.Open(dir, disk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFormat(disk.FormatVersion + 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, opts := range []disk.Options{{}, {ReadOnly: true}} {
		_, err = disk.Open(dir, opts)
		if !errors.Is(err, disk.ErrNewerFormat) {
			t.Fatalf("Open(ReadOnly=%v) of a newer store: %v, want ErrNewerFormat", opts.ReadOnly, err)
		}
		msg := err.Error()
		for _, want := range []string{fmt.Sprintf("format %d", disk.FormatVersion+1), fmt.Sprintf("up to %d", disk.FormatVersion), "run the egrid release that wrote it"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not say %q", msg, want)
			}
		}
	}
}
