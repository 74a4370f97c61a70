package wire

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

func testEvent() *schemas.Event {
	return &schemas.Event{
		ID: "id-1", Type: "T", Subject: "/s", Time: "2026-11-22T10:30:15Z", DataVersion: "1.0",
		Source: "/src", SpecVersion: "1.0", Traceparent: "00-01-02-01", Raw: []byte(`{"id":"id-1"}`),
	}
}

// Each piece reads back what was written, and the sizes are those of what was written (the
// disk store encodes straight into a value of EventSize's length).
func TestRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 30, 15, 123456789, time.UTC)
	p := store.Parked{
		PublishTime: at, Attempts: 3, FirstAttempt: at.Add(time.Second), LastAttempt: at.Add(time.Minute),
		NextDue: at.Add(time.Hour), LastOutcome: schemas.Busy, LastStatus: -503,
	}
	for _, ev := range []*schemas.Event{testEvent(), {}, nil} {
		var b []byte
		b = AppendTime(b, at)
		if len(b) != TimeSize(at) {
			t.Errorf("TimeSize = %d, AppendTime wrote %d", TimeSize(at), len(b))
		}
		b = AppendBytes(b, []byte("spec"))
		b = AppendBytes(b, nil)
		b = AppendParkedState(b, &p)
		n := len(b)
		b = AppendEvent(b, ev)
		if EventSize(ev) != len(b)-n || MaxEventSize(ev) < EventSize(ev) {
			t.Errorf("event %+v: AppendEvent wrote %d, EventSize %d, MaxEventSize %d", ev, len(b)-n, EventSize(ev), MaxEventSize(ev))
		}

		d := NewDecoder(b)
		gotTime, spec, none := d.Time(), d.Bytes(), d.Bytes()
		var q store.Parked
		d.ParkedState(&q)
		got := d.Event()
		if d.Err() != nil || len(d.Rest()) != 0 {
			t.Fatalf("decoding: %v, %d bytes left", d.Err(), len(d.Rest()))
		}
		if !gotTime.Equal(at) || string(spec) != "spec" || none != nil || !reflect.DeepEqual(q, p) || !reflect.DeepEqual(got, ev) {
			t.Errorf("read back %v, %q, %v, %+v, %+v; want %v, spec, nil, %+v, %+v", gotTime, spec, none, q, got, at, p, ev)
		}
	}
	for _, v := range []uint64{0, 0x7f, 0x80, 1 << 63} {
		if n := len(binary.AppendUvarint(nil, v)); UvarintSize(v) != n {
			t.Errorf("UvarintSize(%d) = %d, want %d", v, UvarintSize(v), n)
		}
	}
}

// An opaque value is the store's version byte and the caller's bytes; another version is
// refused.
func TestOpaque(t *testing.T) {
	b := AppendOpaque(nil, 4, []byte("x"))
	if string(b) != "\x04x" {
		t.Errorf("AppendOpaque = %q, want \"\\x04x\"", b)
	}
	if got, err := DecodeOpaque(b, 4); err != nil || string(got) != "x" {
		t.Errorf("DecodeOpaque = %q, %v; want x", got, err)
	}
	if got, err := DecodeOpaque([]byte{4}, 4); err != nil || got != nil {
		t.Errorf("DecodeOpaque of an empty value = %q, %v; want nil", got, err)
	}
	if _, err := DecodeOpaque(b, 1); !errors.Is(err, ErrCorrupt) || err.Error() != "corrupt value: unknown format version 4" {
		t.Errorf("DecodeOpaque of another version = %v, want ErrCorrupt naming the version", err)
	}
}

// The first problem sticks: it wraps ErrCorrupt and says what is wrong, and later reads
// return zero values.
func TestDecoderErrors(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		read func(d *Decoder) any
		want string
	}{
		{"no byte", nil, func(d *Decoder) any { return d.Byte() }, "corrupt value: bad length"},
		{"version not known", []byte{3}, func(d *Decoder) any { return d.Version(1, 2) }, "corrupt value: unknown format version 3"},
		{"uvarint cut short", []byte{0x80}, func(d *Decoder) any { return d.Uvarint() }, "corrupt value: bad uvarint"},
		{"varint cut short", []byte{0x80}, func(d *Decoder) any { return d.Varint() }, "corrupt value: bad varint"},
		{"nanoseconds of a second", []byte{0, 0x80, 0x94, 0xeb, 0xdc, 0x03}, func(d *Decoder) any { return d.Time() }, "corrupt value: bad nanoseconds"},
		{"bytes longer than the value", []byte{5, 1}, func(d *Decoder) any { return d.Bytes() }, "corrupt value: bad byte string length"},
		{"event marker", []byte{2}, func(d *Decoder) any { return d.Event() }, "corrupt value: bad event marker"},
		{"event string longer than the value", []byte{1, 9, 0, 0, 0, 0, 0, 0, 0, 1}, func(d *Decoder) any { return d.Event() }, "corrupt value: bad event string length"},
		{"event strings longer than the value", []byte{1, 1, 1, 0, 0, 0, 0, 0, 0, 1}, func(d *Decoder) any { return d.Event() }, "corrupt value: bad event string length"},
		{"event cut in its lengths", []byte{1, 0, 0}, func(d *Decoder) any { return d.Event() }, "corrupt value: bad uvarint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(tc.b)
			tc.read(&d)
			if err := d.Err(); !errors.Is(err, ErrCorrupt) || err.Error() != tc.want {
				t.Fatalf("Err() = %v, want ErrCorrupt %q", err, tc.want)
			}
			d.Fail("bad later")
			if d.Err().Error() != tc.want {
				t.Errorf("a later Fail replaced the first problem: %v", d.Err())
			}
			if v := d.Uvarint(); v != 0 {
				t.Errorf("a read after the problem = %d, want 0", v)
			}
		})
	}
}

// An event without an event (presence byte 0) is nil and no problem: a store that requires
// one says so itself.
func TestAbsentEvent(t *testing.T) {
	d := NewDecoder(AppendEvent(nil, nil))
	if ev := d.Event(); ev != nil || d.Err() != nil {
		t.Errorf("Event of an absent event = %+v, %v; want nil, nil", ev, d.Err())
	}
}

// Whatever decodes as an event encodes to bytes that decode to the same event.
func FuzzEvent(f *testing.F) {
	f.Add(AppendEvent(nil, testEvent()))
	f.Add(AppendEvent(nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(b)
		ev := d.Event()
		if d.Err() != nil {
			return
		}
		again := AppendEvent(nil, ev)
		d2 := NewDecoder(again)
		if ev2 := d2.Event(); d2.Err() != nil || !reflect.DeepEqual(ev, ev2) || len(again) != EventSize(ev) {
			t.Errorf("%x decodes to %+v, which encodes to %x, which decodes to %+v, %v", b, ev, again, ev2, d2.Err())
		}
	})
}
