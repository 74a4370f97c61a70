package jetstream

import (
	"encoding/hex"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

var codecTime = time.Date(2026, 11, 22, 10, 30, 15, 123456789, time.UTC)

func codecEvent() *schemas.Event {
	return &schemas.Event{
		ID: "id-1", Type: "T", Subject: "/s", Time: "2026-11-22T10:30:15Z", DataVersion: "1.0",
		Source: "/src", SpecVersion: "1.0", Traceparent: "00-01-02-01", Raw: []byte(`{"id":"id-1"}`),
	}
}

// The values this store writes are what a node of a later release must still read, and what
// a node of an earlier one reads of a newer node's writes: the bytes of each kind are written
// out here, so a change of the encoding fails this test (a new encoding needs a new format
// number, and the old one still decoded).
func TestFormatGolden(t *testing.T) {
	parked := store.Parked{
		Seq: 7, PublishTime: codecTime, Attempts: 3,
		FirstAttempt: codecTime.Add(time.Second), LastAttempt: codecTime.Add(time.Minute),
		NextDue: codecTime.Add(time.Hour), LastOutcome: schemas.Busy, LastStatus: 503,
	}
	rec := subRecord{epoch: 1 << 40, spec: []byte(`{"s":1}`), cursor: 9, parked: []store.Parked{parked}, probation: []byte(`{"cause":5}`)}
	legacy := subRecord{epoch: legacyEpoch, spec: []byte(`{"s":1}`), cursor: 9}
	lived := rec
	lived.life = uint64(codecTime.UnixNano())
	tests := []struct {
		name    string
		encoded []byte
		golden  string
		decode  func(b []byte) (any, error)
		want    any
	}{
		{
			name:    "journal entry",
			encoded: appendEntry(nil, codecTime, codecEvent()),
			golden:  "01ee9096b00d959aef3a01040102140304030b69642d31542f73323032362d31312d32325431303a33303a31355a312e302f737263312e3030302d30312d30322d30317b226964223a2269642d31227d",
			decode:  func(b []byte) (any, error) { return decodeEntry(7, b) },
			want:    store.Entry{Seq: 7, PublishTime: codecTime, Event: codecEvent()},
		},
		{
			name:    "parked event's copy",
			encoded: appendBody(nil, codecEvent()),
			golden:  "0101040102140304030b69642d31542f73323032362d31312d32325431303a33303a31355a312e302f737263312e3030302d30312d30322d30317b226964223a2269642d31227d",
			decode:  func(b []byte) (any, error) { return decodeBody(b) },
			want:    codecEvent(),
		},
		{
			name:    "subscription record",
			encoded: appendSubRecord(nil, &rec),
			golden:  "0209808080808020077b2273223a317d010b7b226361757365223a357d010706ee9096b00d959aef3af09096b00d959aef3ae69196b00d959aef3a8ec996b00d959aef3a08ee07",
			decode:  func(b []byte) (any, error) { return decodeSubRecord(b) },
			want:    rec,
		},
		{
			// The life trails the record: the bytes before it are the record without it, which
			// a node of an earlier release decodes, stopping before the life.
			name:    "subscription record with its topic's life",
			encoded: appendSubRecord(nil, &lived),
			golden:  "0209808080808020077b2273223a317d010b7b226361757365223a357d010706ee9096b00d959aef3af09096b00d959aef3ae69196b00d959aef3a8ec996b00d959aef3a08ee0795e694e2aeea95f518",
			decode:  func(b []byte) (any, error) { return decodeSubRecord(b) },
			want:    lived,
		},
		{
			name:    "subscription record of legacyEpoch",
			encoded: appendSubRecord(nil, &legacy),
			golden:  "0109077b2273223a317d0000",
			decode:  func(b []byte) (any, error) { return decodeSubRecord(b) },
			want:    legacy,
		},
		{
			name:    "opaque value",
			encoded: appendOpaque(nil, []byte(`{"cause":5}`)),
			golden:  "017b226361757365223a357d",
			decode:  func(b []byte) (any, error) { return decodeOpaque(b) },
			want:    []byte(`{"cause":5}`),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := hex.EncodeToString(tc.encoded); got != tc.golden {
				t.Errorf("encoding changed; a new encoding needs a new format number and the old one still decoded\ngot:  %s\nwant: %s", got, tc.golden)
			}
			b, err := hex.DecodeString(tc.golden)
			if err != nil {
				t.Fatal(err)
			}
			v, err := tc.decode(b)
			if err != nil {
				t.Fatalf("decoding the golden bytes: %v", err)
			}
			if !reflect.DeepEqual(v, tc.want) {
				t.Errorf("the golden bytes decode to %+v, want %+v", v, tc.want)
			}
		})
	}
}

// A journal message or a parked event's copy that does not decode is errCorrupt, saying what
// is wrong with it; one without an event is no value this store wrote.
func TestDecodeRejectsCorruptValues(t *testing.T) {
	entry := appendEntry(nil, codecTime, codecEvent())
	body := appendBody(nil, codecEvent())
	tests := []struct {
		name   string
		decode func([]byte) error
		value  []byte
		want   string
	}{
		{"entry of an unknown format", decodeEntryErr, append([]byte{2}, entry[1:]...), "corrupt value: unknown format version 2"},
		{"entry cut in its time", decodeEntryErr, entry[:3], "corrupt value: bad varint"},
		{"entry without an event", decodeEntryErr, appendEntry(nil, codecTime, nil), "corrupt value: no event (the store writes every entry with one)"},
		{"copy of an unknown format", decodeBodyErr, append([]byte{3}, body[1:]...), "corrupt value: unknown format version 3"},
		{"copy cut in its string lengths", decodeBodyErr, body[:5], "corrupt value: bad event string length"},
		{"copy with a bad event marker", decodeBodyErr, []byte{formatV1, 7}, "corrupt value: bad event marker"},
		{"copy without an event", decodeBodyErr, appendBody(nil, nil), "corrupt value: no event (the store writes every entry with one)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.decode(tc.value); !errors.Is(err, errCorrupt) || err.Error() != tc.want {
				t.Errorf("decoding %x = %v, want errCorrupt %q", tc.value, err, tc.want)
			}
		})
	}
}

func decodeEntryErr(b []byte) error {
	_, err := decodeEntry(1, b)
	return err
}

func decodeBodyErr(b []byte) error {
	_, err := decodeBody(b)
	return err
}
