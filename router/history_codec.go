package router

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/egridio/egrid/schemas"
)

// A delivery history is stored (store.HistoryRecord.Payload) in one of two forms, told apart
// by its first byte:
//
//   - '{': JSON of an [Explanation], as egrid wrote it before the binary form. Still read, so
//     a store written then still explains its events; never written any more.
//   - historyFormatBinary (1): the binary form below, written by appendExplanation.
//   - historyFormatCut (2): the binary form with cutAttempts, a varint, after attemptsMade;
//     written only for a history with cut attempts, so every other history stays in format 1,
//     which releases before cut attempts were counted apart still read.
//
// The binary form holds what the history writer sets, in this order: the state, the publish
// time, earlierAttempts, attemptsMade, maxDeliveryAttempts, nextAttempt, deadline, reason,
// the number of attempts, then each attempt: attempt, time, duration, outcome, statusCode,
// response, heldBack, a flags byte (1 probe, 2 noAttempt, 4 pull step), decision, rule,
// explanation and due, and, for a pull step only (a queue subscription's; flag 4), its step
// and lockedUntil: a push attempt's bytes are the same as before queue subscriptions had
// histories. Integers and durations are zigzag varints; strings a uvarint length and the bytes; a
// time its seconds since the zero time (uvarint) and nanoseconds (uvarint), so the zero time
// is two zero bytes. The state is one byte: its index in historyStates, or 0 followed by the
// state as a string. The event id is the store's key, not repeated in the value. A first
// attempt delivered at once, the common case, is about 80 bytes (its JSON was about 400).

// historyFormatBinary is the first byte of a history in the binary form; historyFormatCut
// the first byte of one that also holds [Explanation.CutAttempts].
const (
	historyFormatBinary byte = 1
	historyFormatCut    byte = 2
)

// historyStates are the states with a one-byte code (their index); 0 is a state spelled out.
var historyStates = [...]EventState{1: EventRetrying, 2: EventDelivered, 3: EventDeadLettered, 4: EventDropped, 5: EventLocked, 6: EventAvailable}

// zeroTimeUnix is the Unix time of the zero time.Time.
var zeroTimeUnix = time.Time{}.Unix()

var errHistoryFormat = errors.New("malformed delivery history")

// appendExplanation appends e in the binary form to b.
func appendExplanation(b []byte, e *Explanation) []byte {
	format := historyFormatBinary
	if e.CutAttempts != 0 {
		format = historyFormatCut
	}
	b = append(b, format)
	code := byte(0)
	for i, s := range historyStates {
		if i > 0 && s == e.State {
			code = byte(i)
		}
	}
	b = append(b, code)
	if code == 0 {
		b = appendHistoryString(b, string(e.State))
	}
	b = appendHistoryTime(b, e.PublishTime)
	b = binary.AppendVarint(b, int64(e.EarlierAttempts))
	b = binary.AppendVarint(b, int64(e.AttemptsMade))
	if format == historyFormatCut {
		b = binary.AppendVarint(b, int64(e.CutAttempts))
	}
	b = binary.AppendVarint(b, int64(e.MaxDeliveryAttempts))
	b = appendHistoryTime(b, e.NextAttempt)
	b = appendHistoryTime(b, e.Deadline)
	b = appendHistoryString(b, string(e.Reason))
	b = binary.AppendUvarint(b, uint64(len(e.Attempts)))
	for i := range e.Attempts {
		a := &e.Attempts[i]
		b = binary.AppendVarint(b, int64(a.Attempt))
		b = appendHistoryTime(b, a.Time)
		b = binary.AppendVarint(b, int64(a.Duration))
		b = appendHistoryString(b, a.Outcome)
		b = binary.AppendVarint(b, int64(a.StatusCode))
		b = appendHistoryString(b, a.Response)
		b = binary.AppendVarint(b, int64(a.HeldBack))
		var flags byte
		if a.Probe {
			flags |= 1
		}
		if a.NoAttempt {
			flags |= 2
		}
		if a.Step != "" {
			flags |= 4
		}
		b = append(b, flags)
		b = appendHistoryString(b, a.Decision)
		b = appendHistoryString(b, a.Rule)
		b = appendHistoryString(b, a.Explanation)
		b = appendHistoryTime(b, a.Due)
		if a.Step != "" {
			b = appendHistoryString(b, a.Step)
			b = appendHistoryTime(b, a.LockedUntil)
		}
	}
	return b
}

func appendHistoryString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendHistoryTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0, 0)
	}
	b = binary.AppendUvarint(b, uint64(t.Unix()-zeroTimeUnix))
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

// decodeExplanation decodes a stored history of event eventID, in either form, into e. It
// replaces all of e but keeps the array of e.Attempts for reuse.
func decodeExplanation(b []byte, eventID string, e *Explanation) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty", errHistoryFormat)
	}
	switch b[0] {
	case '{':
		var j Explanation
		if err := json.Unmarshal(b, &j); err != nil {
			return err
		}
		*e = j
		if e.Attempts == nil {
			e.Attempts = []ExplainedAttempt{}
		}
		return nil
	case historyFormatBinary, historyFormatCut:
	default:
		return fmt.Errorf("%w: unknown format %d (written by a newer egrid?)", errHistoryFormat, b[0])
	}
	d := historyDecoder{b: b[1:]}
	*e = Explanation{EventID: eventID, Attempts: e.Attempts[:0]}
	if code := d.byte(); code == 0 {
		e.State = EventState(d.string())
	} else if int(code) < len(historyStates) {
		e.State = historyStates[code]
	} else {
		d.fail()
	}
	e.PublishTime = d.time()
	e.EarlierAttempts = d.int()
	e.AttemptsMade = d.int()
	if b[0] == historyFormatCut {
		e.CutAttempts = d.int()
	}
	e.MaxDeliveryAttempts = d.int()
	e.NextAttempt = d.time()
	e.Deadline = d.time()
	e.Reason = schemas.Reason(d.string())
	n := d.uvarint()
	if n > uint64(len(d.b)) { // every attempt takes more than a byte
		d.fail()
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		var a ExplainedAttempt
		a.Attempt = d.int()
		a.Time = d.time()
		a.Duration = time.Duration(d.varint())
		a.Outcome = d.string()
		a.StatusCode = d.int()
		a.Response = d.string()
		a.HeldBack = time.Duration(d.varint())
		flags := d.byte()
		a.Probe, a.NoAttempt = flags&1 != 0, flags&2 != 0
		a.Decision = d.string()
		a.Rule = d.string()
		a.Explanation = d.string()
		a.Due = d.time()
		if flags&4 != 0 {
			a.Step = d.string()
			a.LockedUntil = d.time()
		}
		e.Attempts = append(e.Attempts, a)
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail()
	}
	if e.Attempts == nil {
		e.Attempts = []ExplainedAttempt{}
	}
	return d.err
}

// historyDecoder reads the binary form; after the first error every read returns zero.
type historyDecoder struct {
	b   []byte
	err error
}

func (d *historyDecoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: cut short or damaged", errHistoryFormat)
	}
	d.b = nil
}

func (d *historyDecoder) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *historyDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *historyDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *historyDecoder) int() int { return int(d.varint()) }

func (d *historyDecoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *historyDecoder) time() time.Time {
	sec, nsec := d.uvarint(), d.uvarint()
	if sec == 0 && nsec == 0 {
		return time.Time{}
	}
	if nsec >= 1e9 || sec > 1<<62 {
		d.fail()
		return time.Time{}
	}
	return time.Unix(int64(sec)+zeroTimeUnix, int64(nsec))
}
