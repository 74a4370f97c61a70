package disk_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/disk"
	"github.com/egridio/egrid/schemas"
)

// Deleting a topic or a subscription, and trimming a journal, release what they held: the
// keys are gone at once and, once pebble has compacted, so are the bytes on disk (DESIGN.md
// §4: "deleting a subscription or topic releases its data").
func TestDeletesReleaseSpace(t *testing.T) {
	const entries, parked = 2000, 1000 // about 2 MB of journal and 1 MB of parked copies
	const unchanged = -1
	// Each event carries 900 random base64 bytes, which compress to no less than 600.
	tests := []struct {
		name string
		do   func(t *testing.T, s *disk.Store)
		// released is the least number of bytes that must be gone from disk.
		released uint64
		// want is the number of live keys per kind afterwards; unchanged: as many as before.
		want map[byte]int
	}{
		{
			name: "DeleteTopic",
			do: func(t *testing.T, s *disk.Store) {
				if err := s.DeleteTopic(t.Context(), "big"); err != nil {
					t.Fatalf("DeleteTopic: %v", err)
				}
			},
			released: (entries + parked) * 600,
			want:     map[byte]int{disk.KindJournal: 1, disk.KindParked: 1, disk.KindCursor: 1, disk.KindSubDef: 1},
		},
		{
			name: "DeleteSubscription",
			do: func(t *testing.T, s *disk.Store) {
				if err := s.DeleteSubscription(t.Context(), "big", "sub"); err != nil {
					t.Fatalf("DeleteSubscription: %v", err)
				}
			},
			released: parked * 600,
			want:     map[byte]int{disk.KindJournal: unchanged, disk.KindParked: 1, disk.KindCursor: 1, disk.KindSubDef: 1},
		},
		{
			name: "Trim",
			do: func(t *testing.T, s *disk.Store) {
				if err := s.Trim(t.Context(), "big", entries); err != nil {
					t.Fatalf("Trim: %v", err)
				}
			},
			released: entries * 600,
			want:     map[byte]int{disk.KindJournal: 1, disk.KindParked: parked + 1, disk.KindCursor: 2, disk.KindSubDef: 2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			s, err := disk.Open(t.TempDir(), disk.Options{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			// "big" holds the data; "small" must keep its one entry, cursor and parked event.
			for _, topic := range []string{"big", "small"} {
				if err := s.PutTopic(ctx, topic, nil); err != nil {
					t.Fatalf("PutTopic: %v", err)
				}
				if err := s.PutSubscription(ctx, topic, "sub", nil); err != nil {
					t.Fatalf("PutSubscription: %v", err)
				}
			}
			evs := make([]*schemas.Event, entries)
			for i := range evs {
				evs[i] = incompressibleEvent(fmt.Sprint("big-", i))
			}
			if _, err := s.Append(ctx, "big", publishTime, evs); err != nil {
				t.Fatalf("Append: %v", err)
			}
			u := store.Update{Cursor: entries}
			for i := range parked {
				u.Put = append(u.Put, store.Parked{Seq: uint64(i + 1), Attempts: 1, Event: evs[i], NextDue: publishTime})
			}
			if err := s.UpdateSubscription(ctx, "big", "sub", u); err != nil {
				t.Fatalf("UpdateSubscription: %v", err)
			}
			if _, err := s.Append(ctx, "small", publishTime, []*schemas.Event{testEvent("small")}); err != nil {
				t.Fatalf("Append: %v", err)
			}
			small := store.Update{Cursor: 1, Put: []store.Parked{{Seq: 1, Attempts: 1, Event: testEvent("small")}}}
			if err := s.UpdateSubscription(ctx, "small", "sub", small); err != nil {
				t.Fatalf("UpdateSubscription: %v", err)
			}

			before, err := s.CompactedSize(ctx)
			if err != nil {
				t.Fatalf("measuring: %v", err)
			}
			keysBefore := make(map[byte]int)
			for kind := range tc.want {
				if keysBefore[kind], err = s.Keys(kind); err != nil {
					t.Fatalf("counting keys: %v", err)
				}
			}
			tc.do(t, s)
			after, err := s.CompactedSize(ctx)
			if err != nil {
				t.Fatalf("measuring: %v", err)
			}
			t.Logf("%s: %d bytes on disk before, %d after", tc.name, before, after)
			if after > before || before-after < tc.released {
				t.Errorf("%s released %d bytes (%d before, %d after), want at least %d", tc.name, int64(before)-int64(after), before, after, tc.released)
			}
			for kind, want := range tc.want {
				got, err := s.Keys(kind)
				if err != nil {
					t.Fatalf("counting keys: %v", err)
				}
				if want == unchanged {
					want = keysBefore[kind]
				}
				if got != want {
					t.Errorf("%s: %d live %c keys, want %d", tc.name, got, kind, want)
				}
			}
			// What was not deleted is intact.
			got, err := s.Read(ctx, "small", 0, 10)
			if err != nil || len(got) != 1 || got[0].Event.ID != "small" {
				t.Errorf("journal of the other topic = %+v, %v; want its one entry", got, err)
			}
		})
	}
}

// incompressibleEvent is testEvent with 900 random base64 bytes as data, so that what it
// takes on disk does not shrink under compression.
func incompressibleEvent(id string) *schemas.Event {
	ev := testEvent(id)
	data := make([]byte, 675)
	_, _ = rand.Read(data) // never fails (crypto/rand)
	ev.Raw = fmt.Appendf(nil, `{"id":%q,"data":%q}`, id, base64.StdEncoding.EncodeToString(data))
	return ev
}
