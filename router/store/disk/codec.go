package disk

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/egridio/egrid/router/store"
	"github.com/egridio/egrid/router/store/internal/wire"
	"github.com/egridio/egrid/schemas"
)

// formatV1 is the first byte of every encoded value this version writes. A later format gets
// a new number and the decoders keep reading the old ones.
const formatV1 = 1

// errCorrupt marks a stored value that does not decode: every decoder's error wraps it.
var errCorrupt = wire.ErrCorrupt

// appendDef encodes a topic or subscription definition: version, uvarint id, spec.
func appendDef(dst []byte, id uint64, spec []byte) []byte {
	dst = append(dst, formatV1)
	dst = binary.AppendUvarint(dst, id)
	return append(dst, spec...)
}

// decodeDef decodes a definition; spec is a copy (nil when empty).
func decodeDef(b []byte) (id uint64, spec []byte, err error) {
	d := wire.NewDecoder(b)
	d.Version(formatV1)
	id = d.Uvarint()
	if d.Err() != nil {
		return 0, nil, d.Err()
	}
	if rest := d.Rest(); len(rest) > 0 {
		spec = append([]byte(nil), rest...)
	}
	return id, spec, nil
}

// appendEntry encodes a journal entry's value (the Seq is in the key): version, publish time,
// event.
func appendEntry(dst []byte, publishTime time.Time, ev *schemas.Event) []byte {
	dst = append(dst, formatV1)
	dst = wire.AppendTime(dst, publishTime)
	return wire.AppendEvent(dst, ev)
}

// encodedEntrySize is an upper bound of appendEntry's output, to size batches.
func encodedEntrySize(ev *schemas.Event) int {
	return 1 + 2*binary.MaxVarintLen64 + wire.MaxEventSize(ev)
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
	ts := wire.TimeSize(publishTime)
	for _, ev := range events {
		dst = binary.AppendUvarint(dst, uint64(1+ts+wire.EventSize(ev)))
		dst = appendEntry(dst, publishTime, ev)
	}
	return dst
}

// blockSize returns the length of appendBlock's output.
func blockSize(publishTime time.Time, events []*schemas.Event) int {
	n := 1 + wire.UvarintSize(uint64(len(events)))
	ts := wire.TimeSize(publishTime)
	for _, ev := range events {
		e := 1 + ts + wire.EventSize(ev)
		n += wire.UvarintSize(uint64(e)) + e
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
	d := wire.NewDecoder(b)
	d.Version(formatV1)
	e := store.Entry{Seq: seq, PublishTime: d.Time()}
	e.Event = d.Event()
	return e, d.Err()
}

// appendParked encodes a parked event's value (the Seq is in the key): version, delivery
// state (wire.AppendParkedState), event.
func appendParked(dst []byte, p *store.Parked) []byte {
	dst = append(dst, formatV1)
	dst = wire.AppendParkedState(dst, p)
	return wire.AppendEvent(dst, p.Event)
}

func decodeParked(seq uint64, b []byte) (store.Parked, error) {
	d := wire.NewDecoder(b)
	p := readParkedHead(&d, seq)
	p.Event = d.Event()
	return p, d.Err()
}

// decodeParkedIndex decodes a parked event's value without its event (Event is nil): a
// subscription's start reads only these heads.
func decodeParkedIndex(seq uint64, b []byte) (store.Parked, error) {
	d := wire.NewDecoder(b)
	p := readParkedHead(&d, seq)
	return p, d.Err()
}

// readParkedHead reads what comes before the event in a parked event's value.
func readParkedHead(d *wire.Decoder, seq uint64) store.Parked {
	d.Version(formatV1)
	p := store.Parked{Seq: seq}
	d.ParkedState(&p)
	return p
}

// appendOpaque encodes a value the store does not interpret (a subscription's probation
// state, a dead-letter outbox record): version, then the caller's bytes.
func appendOpaque(dst, state []byte) []byte { return wire.AppendOpaque(dst, formatV1, state) }

// decodeOpaque decodes what appendOpaque wrote; the result is a copy (nil when empty).
func decodeOpaque(b []byte) ([]byte, error) { return wire.DecodeOpaque(b, formatV1) }
