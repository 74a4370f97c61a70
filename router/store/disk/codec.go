package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/schemas"
)

// formatV1 is the first byte of every encoded value this version writes. A later format gets
// a new number and the decoders keep reading the old ones.
const formatV1 = 1

// errCorrupt marks a stored value that does not decode.
var errCorrupt = errors.New("corrupt value")

// appendDef encodes a topic or subscription definition: version, uvarint id, spec.
func appendDef(dst []byte, id uint64, spec []byte) []byte {
	dst = append(dst, formatV1)
	dst = binary.AppendUvarint(dst, id)
	return append(dst, spec...)
}

// decodeDef decodes a definition; spec is a copy (nil when empty).
func decodeDef(b []byte) (id uint64, spec []byte, err error) {
	d := decoder{b: b}
	d.readVersion()
	id = d.readUvarint()
	if d.err != nil {
		return 0, nil, d.err
	}
	if len(d.b) > 0 {
		spec = append([]byte(nil), d.b...)
	}
	return id, spec, nil
}

// appendEntry encodes a journal entry's value (the Seq is in the key): version, publish time,
// event.
func appendEntry(dst []byte, publishTime time.Time, ev *schemas.Event) []byte {
	dst = append(dst, formatV1)
	dst = appendTime(dst, publishTime)
	return appendEvent(dst, ev)
}

// encodedEntrySize is an upper bound of appendEntry's output, to size batches.
func encodedEntrySize(ev *schemas.Event) int {
	return 1 + 2*binary.MaxVarintLen64 + encodedEventSize(ev)
}

// formatBlock is the first byte of a journal block (format 2 of the store, format.go): the
// consecutive entries of one Append in one value, keyed by the last one's seq. Format 1
// stores hold one entry per key (formatV1); the decoder reads both.
const formatBlock = 2

// Journal blocks hold at most maxBlockEntries entries and, beyond the first, about
// maxBlockBytes: one key per block instead of one per event divides pebble's per-key work
// (memtable inserts, flushes, compactions) without making a read of a few entries decode a
// large value. Blocks of 64 entries and 64 KiB saved no more CPU than these in
// BenchmarkAppend100 (11% less per event than one key per entry, either way).
const (
	maxBlockEntries = 16
	maxBlockBytes   = 16 << 10
)

// appendBlock encodes events as one journal block: formatBlock, uvarint count, then each entry
// (appendEntry) with its uvarint length. It appends exactly blockSize(publishTime, events)
// bytes, so the caller can encode straight into a value of that size.
func appendBlock(dst []byte, publishTime time.Time, events []*schemas.Event) []byte {
	dst = append(dst, formatBlock)
	dst = binary.AppendUvarint(dst, uint64(len(events)))
	ts := timeSize(publishTime)
	for _, ev := range events {
		dst = binary.AppendUvarint(dst, uint64(1+ts+eventSize(ev)))
		dst = appendEntry(dst, publishTime, ev)
	}
	return dst
}

// blockSize returns the length of appendBlock's output.
func blockSize(publishTime time.Time, events []*schemas.Event) int {
	n := 1 + uvarintSize(uint64(len(events)))
	ts := timeSize(publishTime)
	for _, ev := range events {
		e := 1 + ts + eventSize(ev)
		n += uvarintSize(uint64(e)) + e
	}
	return n
}

// timeSize returns the length of appendTime's output.
func timeSize(t time.Time) int {
	var buf [2 * binary.MaxVarintLen64]byte
	return len(appendTime(buf[:0], t))
}

// eventSize returns the length of appendEvent's output.
func eventSize(ev *schemas.Event) int {
	if ev == nil {
		return 1
	}
	n := 1 + len(ev.Raw)
	for _, s := range eventStrings(ev) {
		n += uvarintSize(uint64(len(s))) + len(s)
	}
	return n
}

func uvarintSize(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// decodeJournal decodes the journal value v stored under the key of seq last: a block
// (format 2) or a single entry (format 1). It calls fn with each entry whose seq is at least
// from, in order, and stops when fn returns an error, returning it.
func decodeJournal(last uint64, v []byte, from uint64, fn func(store.Entry) error) error {
	if len(v) == 0 || v[0] != formatBlock {
		if last < from {
			return nil
		}
		e, err := decodeEntry(last, v)
		if err != nil {
			return err
		}
		return fn(e)
	}
	n, k := binary.Uvarint(v[1:])
	if k <= 0 || n == 0 || n > last {
		return fmt.Errorf("%w: bad journal block count", errCorrupt)
	}
	b := v[1+k:]
	seq := last - n + 1
	for ; seq <= last; seq++ {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return fmt.Errorf("%w: journal block entry %d cut short", errCorrupt, seq)
		}
		entry := b[k : k+int(l)]
		b = b[k+int(l):]
		if seq < from {
			continue
		}
		e, err := decodeEntry(seq, entry)
		if err != nil {
			return fmt.Errorf("entry %d: %w", seq, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d bytes after the last entry of journal block %d", errCorrupt, len(b), last)
	}
	return nil
}

func decodeEntry(seq uint64, b []byte) (store.Entry, error) {
	d := decoder{b: b}
	d.readVersion()
	e := store.Entry{Seq: seq, PublishTime: d.readTime()}
	e.Event = d.readEvent()
	return e, d.err
}

// appendParked encodes a parked event's value (the Seq is in the key): version, varint
// attempts, four times, outcome byte, varint status, event.
func appendParked(dst []byte, p *store.Parked) []byte {
	dst = append(dst, formatV1)
	dst = binary.AppendVarint(dst, int64(p.Attempts))
	dst = appendTime(dst, p.PublishTime)
	dst = appendTime(dst, p.FirstAttempt)
	dst = appendTime(dst, p.LastAttempt)
	dst = appendTime(dst, p.NextDue)
	dst = append(dst, byte(p.LastOutcome))
	dst = binary.AppendVarint(dst, int64(p.LastStatus))
	return appendEvent(dst, p.Event)
}

func decodeParked(seq uint64, b []byte) (store.Parked, error) {
	d := decoder{b: b}
	p := readParkedHead(&d, seq)
	p.Event = d.readEvent()
	return p, d.err
}

// decodeParkedIndex decodes a parked event's value without its event (Event is nil): a
// subscription's start reads only these heads.
func decodeParkedIndex(seq uint64, b []byte) (store.Parked, error) {
	d := decoder{b: b}
	p := readParkedHead(&d, seq)
	return p, d.err
}

// readParkedHead reads what comes before the event in a parked event's value.
func readParkedHead(d *decoder, seq uint64) store.Parked {
	d.readVersion()
	p := store.Parked{Seq: seq}
	p.Attempts = int(d.readVarint())
	p.PublishTime = d.readTime()
	p.FirstAttempt = d.readTime()
	p.LastAttempt = d.readTime()
	p.NextDue = d.readTime()
	p.LastOutcome = schemas.Outcome(d.readByte())
	p.LastStatus = int(d.readVarint())
	return p
}

// appendTime encodes an instant as varint Unix seconds and uvarint nanoseconds. The zone and
// monotonic reading are not kept; the zero time round-trips to an instant IsZero reports.
func appendTime(dst []byte, t time.Time) []byte {
	dst = binary.AppendVarint(dst, t.Unix())
	return binary.AppendUvarint(dst, uint64(t.Nanosecond()))
}

// Event encoding: a presence byte (0 for a nil event, 1 otherwise), the eight string lengths
// as uvarints, the eight strings back to back, and Raw as the rest of the value. Keeping the
// strings together lets the decoder allocate them as one string.
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

// encodedEventSize is an upper bound of appendEvent's output, to size batches.
func encodedEventSize(ev *schemas.Event) int {
	if ev == nil {
		return 1
	}
	n := 1 + 8*binary.MaxVarintLen32 + len(ev.Raw)
	for _, s := range eventStrings(ev) {
		n += len(s)
	}
	return n
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

// event decodes an event; it copies out of d.b, which belongs to pebble.
func (d *decoder) readEvent() *schemas.Event {
	switch d.readByte() {
	case eventAbsent:
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

// appendOpaque encodes a value the store does not interpret (a subscription's probation
// state, a dead-letter outbox record): version, then the caller's bytes.
func appendOpaque(dst, state []byte) []byte {
	dst = append(dst, formatV1)
	return append(dst, state...)
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
