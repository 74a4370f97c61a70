package schemas

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Header-bound fields: egrid copies an event's id into the aeg-output-event-id delivery header,
// its dataVersion into aeg-data-version and its traceparent into traceparent (SPEC §2.4). An
// HTTP header value cannot hold control characters (RFC 9110 §5.5), and receivers refuse long
// header lines (8 KB per line is common), so an event whose header-bound field breaks either
// rule could never be delivered. The decoders refuse such events at publish with a
// *[ValidationError] naming the field (SPEC §8: an accepted event must be deliverable).

// Limits of header-bound fields, in bytes of UTF-8.
const (
	// MaxIDBytes bounds an event's id (Event Grid, CloudEvents, or mapped from a custom
	// event's field). Event Grid documents no limit; ids are GUIDs or paths in practice.
	MaxIDBytes = 1024
	// MaxHeaderAttributeBytes bounds the other header-bound fields: dataVersion and the
	// traceparent extension (a W3C traceparent is 55 bytes).
	MaxHeaderAttributeBytes = 1024
)

// HeaderValueProblem returns why v cannot be sent as a delivery header value of at most max
// bytes (0: no length limit), or "" when it can: it is longer than max, or it holds a control
// character (C0, DEL or C1, tab included — receivers strip it at the ends of a value, so the
// header would not read back as the event's value). The reason reads after a field name and
// says what to do.
func HeaderValueProblem(v string, max int) string {
	if max > 0 && len(v) > max {
		return "is " + strconv.Itoa(len(v)) + " bytes, over the limit of " + strconv.Itoa(max) +
			" bytes for a field egrid copies into a delivery header: shorten it"
	}
	if i, r := controlChar(v); i >= 0 {
		return "holds the control character " + runeName(r) + " at byte " + strconv.Itoa(i) +
			"; egrid copies this field into a delivery header, which cannot carry control characters: remove it"
	}
	return ""
}

// controlChar returns the byte offset and value of the first control character in v (C0,
// DEL, or C1 as UTF-8), or -1. Bytes that are not valid UTF-8 are not control characters.
func controlChar(v string) (int, rune) {
	// Eight bytes at a time while none of them is below 0x20, DEL or 0xc2 (the lead byte of
	// every C1 character).
	i := 0
	for ; i+8 <= len(v); i += 8 {
		w := v[i : i+8]
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		if bytesBelow(x, 0x20)|bytesEqual(x, 0x7f)|bytesEqual(x, 0xc2) != 0 {
			break
		}
	}
	for ; i < len(v); i++ {
		c := v[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return i, rune(c)
		case c == 0xc2 && i+1 < len(v) && v[i+1] >= 0x80 && v[i+1] <= 0x9f:
			r, _ := utf8.DecodeRuneInString(v[i:])
			return i, r
		}
	}
	return -1, 0
}

// runeName renders r as U+XXXX.
func runeName(r rune) string { return fmt.Sprintf("U+%04X", r) }

// checkHeaderBound reports to p a header-bound field of event i whose value cannot be sent,
// and tells whether it did.
func checkHeaderBound(p *problems, i int, field, v string, max int) bool {
	if reason := HeaderValueProblem(v, max); reason != "" {
		p.add(i, field, reason)
		return true
	}
	return false
}
