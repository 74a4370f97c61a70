// Package wire is the binary encoding the durable stores (router/store/disk and
// router/store/jetstream) share: an event ([schemas.Event]), an instant, length-prefixed bytes,
// a parked event's delivery state, a value the store does not interpret, and a [Decoder]
// that reads them with bounds checks. Each store keeps its own format bytes
// and record layouts, and builds them from these pieces; the bytes these functions write are
// part of both stores' stored formats, which data of earlier releases must still decode with,
// so they do not change (the stores' golden tests pin them).
//
// wire imports only router/store and schemas of egrid.
package wire

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// ErrCorrupt is wrapped by every error of a [Decoder]: a stored value that does not decode.
// It matches [store.ErrCorrupt], so the router tells such damage from a store that is down.
var ErrCorrupt = store.CorruptSentinel("corrupt value")

// AppendTime encodes an instant as varint Unix seconds and uvarint nanoseconds. The zone and
// monotonic reading are not kept; the zero time round-trips to an instant IsZero reports.
func AppendTime(dst []byte, t time.Time) []byte {
	dst = binary.AppendVarint(dst, t.Unix())
	return binary.AppendUvarint(dst, uint64(t.Nanosecond()))
}

// TimeSize returns the length of AppendTime's output.
func TimeSize(t time.Time) int {
	var buf [2 * binary.MaxVarintLen64]byte
	return len(AppendTime(buf[:0], t))
}

// AppendBytes encodes b as its uvarint length and its bytes.
func AppendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// UvarintSize returns the length of v encoded as a uvarint.
func UvarintSize(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// AppendParkedState encodes the delivery state of a parked event: varint attempts, its
// publish, first attempt, last attempt and next due times, outcome byte, varint status. Its
// Seq and Event are each store's to place.
func AppendParkedState(dst []byte, p *store.Parked) []byte {
	dst = binary.AppendVarint(dst, int64(p.Attempts))
	dst = AppendTime(dst, p.PublishTime)
	dst = AppendTime(dst, p.FirstAttempt)
	dst = AppendTime(dst, p.LastAttempt)
	dst = AppendTime(dst, p.NextDue)
	dst = append(dst, byte(p.LastOutcome))
	return binary.AppendVarint(dst, int64(p.LastStatus))
}

// AppendOpaque encodes a value the store does not interpret: the store's version byte, then
// the caller's bytes.
func AppendOpaque(dst []byte, version byte, b []byte) []byte {
	dst = append(dst, version)
	return append(dst, b...)
}

// DecodeOpaque decodes what AppendOpaque wrote with version; the result is a copy (nil when
// empty).
func DecodeOpaque(b []byte, version byte) ([]byte, error) {
	d := NewDecoder(b)
	d.Version(version)
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) == 0 {
		return nil, nil
	}
	return append([]byte(nil), d.b...), nil
}

// Event encoding: a presence byte (0 for a nil event, 1 otherwise), the eight string lengths
// as uvarints, the eight strings back to back, and Raw as the rest of the value. Keeping the
// strings together lets the decoder allocate them as one string. An event is always the last
// thing of a value.
const (
	eventAbsent  = 0
	eventPresent = 1
)

func eventStrings(ev *schemas.Event) [8]string {
	return [8]string{ev.ID, ev.Type, ev.Subject, ev.Time, ev.DataVersion, ev.Source, ev.SpecVersion, ev.Traceparent}
}

// AppendEvent encodes ev (which may be nil) as the rest of a value.
func AppendEvent(dst []byte, ev *schemas.Event) []byte {
	if ev == nil {
		return append(dst, eventAbsent)
	}
	dst = append(dst, eventPresent)
	strs := eventStrings(ev)
	for _, s := range strs {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
	}
	for _, s := range strs {
		dst = append(dst, s...)
	}
	return append(dst, ev.Raw...)
}

// EventSize returns the length of AppendEvent's output.
func EventSize(ev *schemas.Event) int {
	if ev == nil {
		return 1
	}
	n := 1 + len(ev.Raw)
	for _, s := range eventStrings(ev) {
		n += UvarintSize(uint64(len(s))) + len(s)
	}
	return n
}

// MaxEventSize is an upper bound of AppendEvent's output, cheaper than [EventSize], to size
// batches.
func MaxEventSize(ev *schemas.Event) int {
	if ev == nil {
		return 1
	}
	n := 1 + 8*binary.MaxVarintLen32 + len(ev.Raw)
	for _, s := range eventStrings(ev) {
		n += len(s)
	}
	return n
}

// Decoder reads a value; the first problem sticks in Err and later reads return zero values.
type Decoder struct {
	b   []byte
	err error
}

// NewDecoder returns a Decoder reading b.
func NewDecoder(b []byte) Decoder { return Decoder{b: b} }

// Err returns the first problem met, wrapping [ErrCorrupt], or nil.
func (d *Decoder) Err() error { return d.err }

// Rest returns what is left to read, not a copy.
func (d *Decoder) Rest() []byte { return d.b }

// Fail records that the value is corrupt, saying what (as "bad epoch"), unless a problem was
// met before, and drops the rest.
func (d *Decoder) Fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	d.b = nil
}

// Version reads a value's version byte and records a problem unless it is one of known.
func (d *Decoder) Version(known ...byte) byte {
	v := d.Byte()
	if d.err != nil {
		return v
	}
	for _, k := range known {
		if v == k {
			return v
		}
	}
	d.err = fmt.Errorf("%w: unknown format version %d", ErrCorrupt, v)
	return v
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if len(d.b) < 1 {
		d.Fail("bad length")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// Uvarint reads a uvarint.
func (d *Decoder) Uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.Fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Varint reads a varint.
func (d *Decoder) Varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Time reads what AppendTime wrote, in UTC.
func (d *Decoder) Time() time.Time {
	sec := d.Varint()
	nsec := d.Uvarint()
	if d.err != nil {
		return time.Time{}
	}
	if nsec >= uint64(time.Second) {
		d.Fail("bad nanoseconds")
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// Bytes reads what AppendBytes wrote; the result is a copy, nil when empty.
func (d *Decoder) Bytes() []byte {
	n := d.Uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.Fail("bad byte string length")
		return nil
	}
	var b []byte
	if n > 0 {
		b = append([]byte(nil), d.b[:n]...)
	}
	d.b = d.b[n:]
	return b
}

// ParkedState reads what AppendParkedState wrote into p.
func (d *Decoder) ParkedState(p *store.Parked) {
	p.Attempts = int(d.Varint())
	p.PublishTime = d.Time()
	p.FirstAttempt = d.Time()
	p.LastAttempt = d.Time()
	p.NextDue = d.Time()
	p.LastOutcome = schemas.Outcome(d.Byte())
	p.LastStatus = int(d.Varint())
}

// Event reads what AppendEvent wrote: nil for a nil event (or after a problem), else an event
// whose eight strings share one allocation. It copies out of the value, whose buffer belongs
// to the caller's storage (pebble, the NATS client).
func (d *Decoder) Event() *schemas.Event {
	switch d.Byte() {
	case eventAbsent:
		return nil
	case eventPresent:
	default:
		d.Fail("bad event marker")
		return nil
	}
	var lens [8]uint64
	var total uint64
	for i := range lens {
		lens[i] = d.Uvarint()
		total += lens[i]
		if d.err != nil || lens[i] > uint64(len(d.b)) || total > uint64(len(d.b)) {
			d.Fail("bad event string length")
			return nil
		}
	}
	all := string(d.b[:total]) // one allocation for the eight strings
	var strs [8]string
	var off uint64
	for i, n := range lens {
		strs[i] = all[off : off+n]
		off += n
	}
	ev := &schemas.Event{
		ID: strs[0], Type: strs[1], Subject: strs[2], Time: strs[3],
		DataVersion: strs[4], Source: strs[5], SpecVersion: strs[6], Traceparent: strs[7],
	}
	if rest := d.b[total:]; len(rest) > 0 {
		ev.Raw = append([]byte(nil), rest...)
	}
	d.b = nil
	return ev
}
