package disk

import (
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/internal/wire"
	"github.com/egridio/egrid/schemas"
)

// updating reports whether the test binary runs with -update, the flag testkit defines (the
// package's external tests import testkit, which links it into this binary).
func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

var goldenTime = time.Date(2026, 11, 22, 10, 30, 15, 123456789, time.UTC)

func goldenEvent() *schemas.Event {
	return &schemas.Event{
		ID: "id-1", Type: "T", Subject: "/s", Time: "2026-11-22T10:30:15Z", DataVersion: "1.0",
		Source: "/src", SpecVersion: "1.0", Traceparent: "00-01-02-01", Raw: []byte(`{"id":"id-1"}`),
	}
}

func goldenParked() store.Parked {
	return store.Parked{
		Seq: 7, PublishTime: goldenTime, Event: goldenEvent(), Attempts: 3,
		FirstAttempt: goldenTime.Add(time.Second), LastAttempt: goldenTime.Add(time.Minute),
		NextDue: goldenTime.Add(time.Hour), LastOutcome: schemas.Busy, LastStatus: 503,
	}
}

// The stored format is what a later version must still read: a change to the encoding shows
// up here, and the golden bytes must still decode to the same values.
func TestFormatV1Golden(t *testing.T) {
	values := []struct {
		name    string
		encoded []byte
		decode  func(b []byte) (any, error)
		want    any
	}{
		{
			name:    "entry",
			encoded: appendEntry(nil, goldenTime, goldenEvent()),
			decode:  func(b []byte) (any, error) { return decodeEntry(7, b) },
			want:    store.Entry{Seq: 7, PublishTime: goldenTime, Event: goldenEvent()},
		},
		{
			name:    "parked",
			encoded: appendParked(nil, new(goldenParked())),
			decode:  func(b []byte) (any, error) { return decodeParked(7, b) },
			want:    goldenParked(),
		},
		{
			name:    "entry with a nil event",
			encoded: appendEntry(nil, time.Time{}, nil),
			decode:  func(b []byte) (any, error) { return decodeEntry(1, b) },
			want:    store.Entry{Seq: 1, PublishTime: time.Time{}.UTC()},
		},
		{
			name:    "probation",
			encoded: appendOpaque(nil, []byte(`{"cause":5}`)),
			decode:  func(b []byte) (any, error) { return decodeOpaque(b) },
			want:    []byte(`{"cause":5}`),
		},
	}
	var lines []string
	for _, v := range values {
		lines = append(lines, v.name+": "+hex.EncodeToString(v.encoded))
	}
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("testdata", "format_v1.golden")
	if updating() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(golden) != got {
		t.Errorf("encoding changed; a new encoding needs a new format version and the old one still decoded\ngot:\n%s\nwant:\n%s", got, golden)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(golden)), "\n") {
		b, err := hex.DecodeString(line[strings.Index(line, ": ")+2:])
		if err != nil {
			t.Fatalf("golden line %d: %v", i, err)
		}
		v, err := values[i].decode(b)
		if err != nil {
			t.Fatalf("decoding golden %s: %v", values[i].name, err)
		}
		if !reflect.DeepEqual(v, values[i].want) {
			t.Errorf("golden %s decodes to %+v, want %+v", values[i].name, v, values[i].want)
		}
	}
}

func TestDecodeRejectsCorruptValues(t *testing.T) {
	entry := appendEntry(nil, goldenTime, goldenEvent())
	tests := []struct {
		name  string
		value []byte
		want  string
	}{
		{"empty", nil, "corrupt value: bad length"},
		{"unknown version", append([]byte{2}, entry[1:]...), "corrupt value: unknown format version 2"},
		{"cut in the time", entry[:3], "corrupt value: bad varint"},
		{"bad nanoseconds", []byte{formatV1, 0, 0x80, 0x94, 0xeb, 0xdc, 0x03, 1}, "corrupt value: bad nanoseconds"},
		{"cut in the string lengths", entry[:14], "corrupt value: bad event string length"},
		{"bad event marker", append(append([]byte{}, entry[:wire.TimeSize(goldenTime)+1]...), 9), "corrupt value: bad event marker"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeEntry(1, tc.value); !errors.Is(err, errCorrupt) || err.Error() != tc.want {
				t.Errorf("decodeEntry(%x) = %v, want errCorrupt %q", tc.value, err, tc.want)
			}
		})
	}
}

// The decoders never panic, and what decodes encodes to bytes that decode to the same value.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(appendEntry(nil, goldenTime, goldenEvent()))
	f.Add(appendEntry(nil, time.Time{}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(1, b)
		if err != nil {
			return
		}
		again := appendEntry(nil, e.PublishTime, e.Event)
		e2, err := decodeEntry(1, again)
		if err != nil || !reflect.DeepEqual(e, e2) {
			t.Errorf("%x decodes to %+v, which encodes to %x, which decodes to %+v, %v", b, e, again, e2, err)
		}
	})
}

func FuzzDecodeParked(f *testing.F) {
	f.Add(appendParked(nil, new(goldenParked())))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeParked(1, b)
		if err != nil {
			return
		}
		again := appendParked(nil, &p)
		p2, err := decodeParked(1, again)
		if err != nil || !reflect.DeepEqual(p, p2) {
			t.Errorf("%x decodes to %+v, which encodes to %x, which decodes to %+v, %v", b, p, again, p2, err)
		}
	})
}

// A journal block (format 2) is what a later version must still read, like the values of
// TestFormatV1Golden.
func TestJournalBlockGolden(t *testing.T) {
	second := goldenEvent()
	second.ID = "second"
	block := appendBlock(nil, goldenTime, []*schemas.Event{goldenEvent(), second})
	if n := blockSize(goldenTime, []*schemas.Event{goldenEvent(), second}); n != len(block) {
		t.Fatalf("blockSize = %d, appendBlock wrote %d", n, len(block))
	}
	got := "block 8..9: " + hex.EncodeToString(block) + "\n"
	path := filepath.Join("testdata", "format_v2_block.golden")
	if updating() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(golden) != got {
		t.Errorf("encoding changed; a new encoding needs a new format version and the old one still decoded\ngot:\n%s\nwant:\n%s", got, golden)
	}
	b, err := hex.DecodeString(strings.TrimSpace(string(golden))[len("block 8..9: "):])
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Entry{{Seq: 8, PublishTime: goldenTime, Event: goldenEvent()}, {Seq: 9, PublishTime: goldenTime, Event: second}}
	for from := uint64(0); from <= 10; from++ {
		var entries []store.Entry
		if err := decodeJournal(9, b, from, func(e store.Entry) error { entries = append(entries, e); return nil }); err != nil {
			t.Fatalf("decodeJournal from %d: %v", from, err)
		}
		w := want[min(max(from, 8), 10)-8:]
		if len(w) == 0 {
			w = nil
		}
		if !reflect.DeepEqual(entries, w) {
			t.Errorf("decodeJournal from %d = %+v, want %+v", from, entries, w)
		}
	}
	// A format-1 entry decodes as a block of one keyed by its seq.
	var one []store.Entry
	if err := decodeJournal(7, appendEntry(nil, goldenTime, goldenEvent()), 1, func(e store.Entry) error { one = append(one, e); return nil }); err != nil || len(one) != 1 || one[0].Seq != 7 {
		t.Fatalf("format-1 entry through decodeJournal = %+v, %v", one, err)
	}
}

func TestDecodeRejectsCorruptBlocks(t *testing.T) {
	block := appendBlock(nil, goldenTime, []*schemas.Event{goldenEvent(), goldenEvent()})
	tests := []struct {
		name  string
		last  uint64
		value []byte
	}{
		{"count zero", 9, []byte{formatBlock, 0}},
		{"count above the key's seq", 1, block},
		{"cut in the second entry", 9, block[:len(block)-5]},
		{"bytes after the last entry", 9, append(append([]byte{}, block...), 1, 2)},
		{"bad entry", 9, append([]byte{formatBlock, 1, 3}, 9, 9, 9)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := decodeJournal(tc.last, tc.value, 0, func(store.Entry) error { return nil }); !errors.Is(err, errCorrupt) {
				t.Errorf("decodeJournal(%x) = %v, want errCorrupt", tc.value, err)
			}
		})
	}
}
