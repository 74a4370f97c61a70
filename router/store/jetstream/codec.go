package jetstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// formatV1 is the first byte of every value this version writes (journal messages, topic
// definitions, dead-letter records, subscription records of legacyEpoch). A later format gets
// a new number and the decoders keep reading the old ones.
const formatV1 = 1

// subRecordV2 is the first byte of a subscription record that carries its epoch
// ([store.SubscriptionState.Epoch]): format 1 with the epoch after the cursor. Records
// written before epochs existed are format 1 and read as legacyEpoch, and stay format 1 when
// written again, so a node of an earlier release still reads every record it could before.
const subRecordV2 = 2

// legacyEpoch is the epoch of a subscription record written before records carried one: a
// name has such a record at most once (a subscription created again gets a random epoch,
// never this one), so its epoch tells it apart from every later life of the name.
const legacyEpoch = 1

// errCorrupt marks a stored value that does not decode.
var errCorrupt = errors.New("corrupt value")

// subRecord is everything stored for one subscription under one key, so that one
// compare-and-set writes all of it: the definition's spec, the cursor, the parked events
// (without their event: each parked event's copy of the event is a message of the parked
// stream, written before the record that names it) and the probation state.
type subRecord struct {
	epoch     uint64 // legacyEpoch for a record written without one
	spec      []byte
	cursor    uint64
	parked    []store.Parked // ordered by Seq; Event is not encoded
	probation []byte         // nil when none
}

// appendEntry encodes a journal message: version, publish time, event. The sequence number is
// the message's stream sequence.
func appendEntry(dst []byte, publishTime time.Time, ev *schemas.Event) []byte {
	dst = append(dst, formatV1)
	dst = appendTime(dst, publishTime)
	return appendEvent(dst, ev)
}

func decodeEntry(seq uint64, b []byte) (store.Entry, error) {
	d := decoder{b: b}
	d.readVersion()
	e := store.Entry{Seq: seq, PublishTime: d.readTime()}
	e.Event = d.readEvent()
	return e, d.err
}

// appendSubRecord encodes a subscription record: version, uvarint cursor (first, so Cursors
// decodes only the head), uvarint epoch (subRecordV2; none in format 1, for legacyEpoch),
// spec, probation presence and bytes, the parked count and each parked event.
func appendSubRecord(dst []byte, r *subRecord) []byte {
	if r.epoch == legacyEpoch {
		dst = append(dst, formatV1)
		dst = binary.AppendUvarint(dst, r.cursor)
	} else {
		dst = append(dst, subRecordV2)
		dst = binary.AppendUvarint(dst, r.cursor)
		dst = binary.AppendUvarint(dst, r.epoch)
	}
	dst = appendBytes(dst, r.spec)
	if r.probation == nil {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
		dst = appendBytes(dst, r.probation)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.parked)))
	for i := range r.parked {
		dst = appendParked(dst, &r.parked[i])
	}
	return dst
}

// decodeCursor decodes only the cursor of a subscription record.
func decodeCursor(b []byte) (uint64, error) {
	d := decoder{b: b}
	d.readSubVersion()
	c := d.readUvarint()
	return c, d.err
}

// decodeEpoch decodes only the epoch of a subscription record (its head).
func decodeEpoch(b []byte) (uint64, error) {
	d := decoder{b: b}
	v := d.readSubVersion()
	d.readUvarint() // the cursor
	if v != subRecordV2 {
		return legacyEpoch, d.err
	}
	e := d.readUvarint()
	if d.err == nil && e <= legacyEpoch {
		d.fail("epoch")
	}
	return e, d.err
}

// decodeSubHead decodes the head of a subscription record: its cursor, its epoch (legacyEpoch
// for a record of the first format) and the definition's spec. A record whose head decodes but whose rest does not has
// lost its state, not its definition (see Store.load).
func decodeSubHead(b []byte) (cursor, epoch uint64, spec []byte, err error) {
	d := decoder{b: b}
	v := d.readSubVersion()
	cursor, epoch = d.readUvarint(), legacyEpoch
	if v == subRecordV2 {
		if epoch = d.readUvarint(); d.err == nil && epoch <= legacyEpoch {
			d.fail("epoch")
		}
	}
	spec = d.readBytes()
	return cursor, epoch, spec, d.err
}

func decodeSubRecord(b []byte) (subRecord, error) {
	d := decoder{b: b}
	r := subRecord{epoch: legacyEpoch}
	v := d.readSubVersion()
	r.cursor = d.readUvarint()
	if v == subRecordV2 {
		if r.epoch = d.readUvarint(); d.err == nil && r.epoch <= legacyEpoch {
			d.fail("epoch")
		}
	}
	r.spec = d.readBytes()
	if d.readByte() == 1 {
		r.probation = d.readBytes()
		if r.probation == nil {
			r.probation = []byte{}
		}
	}
	n := d.readUvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("parked count")
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.parked = append(r.parked, d.readParked())
	}
	return r, d.err
}

func appendParked(dst []byte, p *store.Parked) []byte {
	dst = binary.AppendUvarint(dst, p.Seq)
	dst = binary.AppendVarint(dst, int64(p.Attempts))
	dst = appendTime(dst, p.PublishTime)
	dst = appendTime(dst, p.FirstAttempt)
	dst = appendTime(dst, p.LastAttempt)
	dst = appendTime(dst, p.NextDue)
	dst = append(dst, byte(p.LastOutcome))
	return binary.AppendVarint(dst, int64(p.LastStatus))
}

func (d *decoder) readParked() store.Parked {
	p := store.Parked{Seq: d.readUvarint()}
	p.Attempts = int(d.readVarint())
	p.PublishTime = d.readTime()
	p.FirstAttempt = d.readTime()
	p.LastAttempt = d.readTime()
	p.NextDue = d.readTime()
	p.LastOutcome = schemas.Outcome(d.readByte())
	p.LastStatus = int(d.readVarint())
	return p
}

// appendBody encodes a parked event's copy of its event: version, event.
func appendBody(dst []byte, ev *schemas.Event) []byte {
	dst = append(dst, formatV1)
	return appendEvent(dst, ev)
}

func decodeBody(b []byte) (*schemas.Event, error) {
	d := decoder{b: b}
	d.readVersion()
	ev := d.readEvent()
	return ev, d.err
}

// appendOpaque encodes a value the store does not interpret (a topic definition's spec, a
// dead-letter outbox record): version, then the caller's bytes.
func appendOpaque(dst, b []byte) []byte {
	dst = append(dst, formatV1)
	return append(dst, b...)
}

// decodeOpaque decodes what appendOpaque wrote; the result is a copy (nil when empty).
func decodeOpaque(b []byte) ([]byte, error) {
	d := decoder{b: b}
	d.readVersion()
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) == 0 {
		return nil, nil
	}
	return append([]byte(nil), d.b...), nil
}

// appendTime encodes an instant as varint Unix seconds and uvarint nanoseconds. The zone and
// monotonic reading are not kept; the zero time round-trips to an instant IsZero reports.
func appendTime(dst []byte, t time.Time) []byte {
	dst = binary.AppendVarint(dst, t.Unix())
	return binary.AppendUvarint(dst, uint64(t.Nanosecond()))
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// Event encoding: a presence byte (0 for a nil event, 1 otherwise), the eight string lengths
// as uvarints, the eight strings back to back, and Raw as the rest of the value. The store
// writes no value without an event, and its decoders take one for corrupt.
const (
	eventAbsent  = 0
	eventPresent = 1
)

func eventStrings(ev *schemas.Event) [8]string {
	return [8]string{ev.ID, ev.Type, ev.Subject, ev.Time, ev.DataVersion, ev.Source, ev.SpecVersion, ev.Traceparent}
}

func appendEvent(dst []byte, ev *schemas.Event) []byte {
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

// decoder reads a value; the first problem sticks in err and later reads return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: bad %s", errCorrupt, what)
	}
	d.b = nil
}

func (d *decoder) readVersion() {
	if v := d.readByte(); d.err == nil && v != formatV1 {
		d.err = fmt.Errorf("%w: unknown format version %d", errCorrupt, v)
	}
}

// readSubVersion reads a subscription record's version: formatV1 or subRecordV2.
func (d *decoder) readSubVersion() byte {
	v := d.readByte()
	if d.err == nil && v != formatV1 && v != subRecordV2 {
		d.err = fmt.Errorf("%w: unknown format version %d", errCorrupt, v)
	}
	return v
}

func (d *decoder) readByte() byte {
	if len(d.b) < 1 {
		d.fail("length")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) readUvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) readVarint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// readBytes reads a length-prefixed byte string; the result is a copy, nil when empty.
func (d *decoder) readBytes() []byte {
	n := d.readUvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("byte string length")
		return nil
	}
	var b []byte
	if n > 0 {
		b = append([]byte(nil), d.b[:n]...)
	}
	d.b = d.b[n:]
	return b
}

func (d *decoder) readTime() time.Time {
	sec := d.readVarint()
	nsec := d.readUvarint()
	if d.err != nil {
		return time.Time{}
	}
	if nsec >= uint64(time.Second) {
		d.fail("nanoseconds")
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// readEvent decodes an event from the rest of d.b, copying out of it (the buffer belongs to
// the NATS client).
func (d *decoder) readEvent() *schemas.Event {
	switch d.readByte() {
	case eventAbsent:
		// The store never writes one (Append refuses a nil event, and a parked event is
		// one of them): a foreign message, which a reader must not take for an event.
		if d.err == nil {
			d.err = fmt.Errorf("%w: no event (the store writes every entry with one)", errCorrupt)
		}
		d.b = nil
		return nil
	case eventPresent:
	default:
		d.fail("event marker")
		return nil
	}
	var lens [8]uint64
	var total uint64
	for i := range lens {
		lens[i] = d.readUvarint()
		total += lens[i]
		if d.err != nil || lens[i] > uint64(len(d.b)) || total > uint64(len(d.b)) {
			d.fail("event string length")
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
