package jetstream

import (
	"encoding/binary"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/internal/wire"
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

// errCorrupt marks a stored value that does not decode: every decoder's error wraps it.
var errCorrupt = wire.ErrCorrupt

// subRecord is everything stored for one subscription under one key, so that one
// compare-and-set writes all of it: the definition's spec, the cursor, the parked events
// (without their event: each parked event's copy of the event is a message of the parked
// stream, written before the record that names it), the probation state, and the life of the
// topic the record was created for.
type subRecord struct {
	epoch     uint64 // legacyEpoch for a record written without one
	spec      []byte
	cursor    uint64
	parked    []store.Parked // ordered by Seq; Event is not encoded
	probation []byte         // nil when none
	// life is the creation time (Unix nanoseconds) of the topic's journal stream the record
	// was created for, the one its cursor numbers: a topic deleted and created again has
	// another stream, so a record of an earlier life of the name is told apart (staleLife).
	// 0 for a record written without it (by an earlier release): its life is not known.
	life uint64
}

// appendEntry encodes a journal message: version, publish time, event. The sequence number is
// the message's stream sequence.
func appendEntry(dst []byte, publishTime time.Time, ev *schemas.Event) []byte {
	dst = append(dst, formatV1)
	dst = wire.AppendTime(dst, publishTime)
	return wire.AppendEvent(dst, ev)
}

func decodeEntry(seq uint64, b []byte) (store.Entry, error) {
	d := wire.NewDecoder(b)
	d.Version(formatV1)
	e := store.Entry{Seq: seq, PublishTime: d.Time()}
	e.Event = readEvent(&d)
	return e, d.Err()
}

// appendSubRecord encodes a subscription record: version, uvarint cursor (first, so Cursors
// decodes only the head), uvarint epoch (subRecordV2; none in format 1, for legacyEpoch),
// spec, probation presence and bytes, the parked count and each parked event, and last the
// uvarint life when it is known: a decoder of an earlier release stops before it (and writes
// the record again without it).
func appendSubRecord(dst []byte, r *subRecord) []byte {
	if r.epoch == legacyEpoch {
		dst = append(dst, formatV1)
		dst = binary.AppendUvarint(dst, r.cursor)
	} else {
		dst = append(dst, subRecordV2)
		dst = binary.AppendUvarint(dst, r.cursor)
		dst = binary.AppendUvarint(dst, r.epoch)
	}
	dst = wire.AppendBytes(dst, r.spec)
	if r.probation == nil {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
		dst = wire.AppendBytes(dst, r.probation)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.parked)))
	for i := range r.parked {
		dst = appendParked(dst, &r.parked[i])
	}
	if r.life != 0 {
		dst = binary.AppendUvarint(dst, r.life)
	}
	return dst
}

// decodeCursor decodes only the cursor of a subscription record.
func decodeCursor(b []byte) (uint64, error) {
	d := wire.NewDecoder(b)
	d.Version(formatV1, subRecordV2)
	c := d.Uvarint()
	return c, d.Err()
}

// decodeEpoch decodes only the epoch of a subscription record (its head).
func decodeEpoch(b []byte) (uint64, error) {
	d := wire.NewDecoder(b)
	v := d.Version(formatV1, subRecordV2)
	d.Uvarint() // the cursor
	if v != subRecordV2 {
		return legacyEpoch, d.Err()
	}
	e := d.Uvarint()
	if d.Err() == nil && e <= legacyEpoch {
		d.Fail("bad epoch")
	}
	return e, d.Err()
}

// decodeSubHead decodes the head of a subscription record: its cursor, its epoch (legacyEpoch
// for a record of the first format) and the definition's spec. A record whose head decodes but whose rest does not has
// lost its state, not its definition (see Store.load).
func decodeSubHead(b []byte) (cursor, epoch uint64, spec []byte, err error) {
	d := wire.NewDecoder(b)
	v := d.Version(formatV1, subRecordV2)
	cursor, epoch = d.Uvarint(), legacyEpoch
	if v == subRecordV2 {
		if epoch = d.Uvarint(); d.Err() == nil && epoch <= legacyEpoch {
			d.Fail("bad epoch")
		}
	}
	spec = d.Bytes()
	return cursor, epoch, spec, d.Err()
}

func decodeSubRecord(b []byte) (subRecord, error) {
	d := wire.NewDecoder(b)
	r := subRecord{epoch: legacyEpoch}
	v := d.Version(formatV1, subRecordV2)
	r.cursor = d.Uvarint()
	if v == subRecordV2 {
		if r.epoch = d.Uvarint(); d.Err() == nil && r.epoch <= legacyEpoch {
			d.Fail("bad epoch")
		}
	}
	r.spec = d.Bytes()
	if d.Byte() == 1 {
		r.probation = d.Bytes()
		if r.probation == nil {
			r.probation = []byte{}
		}
	}
	n := d.Uvarint()
	if d.Err() == nil && n > uint64(len(d.Rest())) {
		d.Fail("bad parked count")
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		r.parked = append(r.parked, readParked(&d))
	}
	if d.Err() == nil && len(d.Rest()) > 0 {
		r.life = d.Uvarint()
	}
	return r, d.Err()
}

// appendParked encodes a parked event in a subscription record (without its event, a message
// of the parked stream): uvarint seq, delivery state (wire.AppendParkedState).
func appendParked(dst []byte, p *store.Parked) []byte {
	dst = binary.AppendUvarint(dst, p.Seq)
	return wire.AppendParkedState(dst, p)
}

func readParked(d *wire.Decoder) store.Parked {
	p := store.Parked{Seq: d.Uvarint()}
	d.ParkedState(&p)
	return p
}

// appendBody encodes a parked event's copy of its event: version, event.
func appendBody(dst []byte, ev *schemas.Event) []byte {
	dst = append(dst, formatV1)
	return wire.AppendEvent(dst, ev)
}

func decodeBody(b []byte) (*schemas.Event, error) {
	d := wire.NewDecoder(b)
	d.Version(formatV1)
	ev := readEvent(&d)
	return ev, d.Err()
}

// appendOpaque encodes a value the store does not interpret (a topic definition's spec, a
// dead-letter outbox record): version, then the caller's bytes.
func appendOpaque(dst, b []byte) []byte { return wire.AppendOpaque(dst, formatV1, b) }

// decodeOpaque decodes what appendOpaque wrote; the result is a copy (nil when empty).
func decodeOpaque(b []byte) ([]byte, error) { return wire.DecodeOpaque(b, formatV1) }

// readEvent reads an event (wire.Decoder.Event); a value without one is corrupt. The store
// never writes one (Append refuses a nil event, and a parked event is one of them): it is a
// foreign message, which a reader must not take for an event.
func readEvent(d *wire.Decoder) *schemas.Event {
	ev := d.Event()
	if ev == nil && d.Err() == nil {
		d.Fail("no event (the store writes every entry with one)")
	}
	return ev
}
