package jetstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/egridio/egrid/router/store"
)

// legacyRecord is a subscription record as releases before epochs wrote it (format 1):
// version, cursor, spec, probation presence, parked count.
func legacyRecord(cursor uint64, spec string) []byte {
	b := []byte{formatV1}
	b = binary.AppendUvarint(b, cursor)
	b = binary.AppendUvarint(b, uint64(len(spec)))
	b = append(b, spec...)
	return append(b, 0, 0) // no probation, nothing parked
}

// A record written before epochs reads as legacyEpoch and is written again in its own
// format, byte for byte, so a node of an earlier release still reads it; a record with an
// epoch carries it in format 2, whose cursor Cursors reads as before; an epoch at or below
// legacyEpoch in format 2 is damage.
func TestSubRecordEpochs(t *testing.T) {
	old := legacyRecord(7, `{"s":1}`)
	rec, err := decodeSubRecord(old)
	if err != nil {
		t.Fatalf("decoding a format-1 record: %v", err)
	}
	if rec.epoch != legacyEpoch || rec.cursor != 7 || string(rec.spec) != `{"s":1}` {
		t.Errorf("format-1 record decoded as epoch %d, cursor %d, spec %q; want %d, 7, {\"s\":1}", rec.epoch, rec.cursor, rec.spec, legacyEpoch)
	}
	if got := appendSubRecord(nil, &rec); !bytes.Equal(got, old) {
		t.Errorf("a format-1 record written again = %x, want it as it was, %x", got, old)
	}

	rec.epoch = 1 << 60
	b := appendSubRecord(nil, &rec)
	if b[0] != subRecordV2 {
		t.Errorf("a record with an epoch starts with %d, want %d", b[0], subRecordV2)
	}
	back, err := decodeSubRecord(b)
	if err != nil || back.epoch != rec.epoch || back.cursor != 7 || string(back.spec) != `{"s":1}` {
		t.Errorf("format-2 record decoded as %+v, %v; want epoch %d, cursor 7", back, err, rec.epoch)
	}
	if c, err := decodeCursor(b); err != nil || c != 7 {
		t.Errorf("decodeCursor of a format-2 record = %d, %v; want 7", c, err)
	}
	if e, err := decodeEpoch(b); err != nil || e != rec.epoch {
		t.Errorf("decodeEpoch of a format-2 record = %d, %v; want %d", e, err, rec.epoch)
	}
	if e, err := decodeEpoch(old); err != nil || e != legacyEpoch {
		t.Errorf("decodeEpoch of a format-1 record = %d, %v; want %d", e, err, legacyEpoch)
	}
	for _, e := range []uint64{0, legacyEpoch} {
		bad := []byte{subRecordV2}
		bad = binary.AppendUvarint(bad, 7)
		bad = binary.AppendUvarint(bad, e)
		bad = append(bad, old[2:]...) // spec, probation, parked
		if _, err := decodeSubRecord(bad); !errors.Is(err, errCorrupt) {
			t.Errorf("format-2 record with epoch %d: %v, want errCorrupt", e, err)
		}
		if _, err := decodeEpoch(bad); !errors.Is(err, errCorrupt) {
			t.Errorf("decodeEpoch of a format-2 record with epoch %d: %v, want errCorrupt", e, err)
		}
	}
	if _, err := decodeSubRecord(append([]byte{3}, old[1:]...)); !errors.Is(err, errCorrupt) {
		t.Errorf("record of format 3: %v, want errCorrupt", err)
	}
}

// A subscription whose record an earlier release wrote loads with legacyEpoch and takes its
// actor's updates, its record staying in format 1; deleted and created again, it gets another
// epoch, and an update of the old one applies nothing.
func TestLegacySubscriptionRecord(t *testing.T) {
	s, _ := holesStore(t, 3)
	ctx := t.Context()
	key := subKey("orders", "legacy")
	if _, err := s.meta.Create(ctx, key, legacyRecord(1, `{}`)); err != nil {
		t.Fatal(err)
	}
	st, err := s.LoadSubscription(ctx, "orders", "legacy")
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch != legacyEpoch || st.Cursor != 1 {
		t.Fatalf("loaded epoch %d, cursor %d; want %d, 1", st.Epoch, st.Cursor, legacyEpoch)
	}
	if err := s.UpdateSubscription(ctx, "orders", "legacy", store.Update{Epoch: st.Epoch, Cursor: 2}); err != nil {
		t.Fatalf("update of the loaded epoch: %v", err)
	}
	kv, err := s.meta.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if want := legacyRecord(2, `{}`); !bytes.Equal(kv.Value(), want) {
		t.Errorf("record after the update = %x, want %x (format 1)", kv.Value(), want)
	}

	if err := s.DeleteSubscription(ctx, "orders", "legacy"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSubscription(ctx, "orders", "legacy", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	again, err := s.LoadSubscription(ctx, "orders", "legacy")
	if err != nil {
		t.Fatal(err)
	}
	if again.Epoch <= legacyEpoch {
		t.Fatalf("epoch of the subscription created again = %d, want one above %d", again.Epoch, legacyEpoch)
	}
	err = s.UpdateSubscription(ctx, "orders", "legacy", store.Update{Epoch: st.Epoch, Cursor: 3, Put: []store.Parked{{Seq: 3, Attempts: 1}}})
	if !errors.Is(err, store.ErrStaleEpoch) {
		t.Errorf("update of the legacy epoch after the subscription was created again: %v, want ErrStaleEpoch", err)
	}
	if got, err := s.LoadSubscription(ctx, "orders", "legacy"); err != nil || got.Cursor != 3 || len(got.Parked) != 0 {
		t.Errorf("state of the subscription created again = cursor %d, %d parked, %v; want cursor 3 (the journal's end), nothing parked", got.Cursor, len(got.Parked), err)
	}
}
