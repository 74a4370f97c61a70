package schemas

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is a small, strict JSON scanner. The decoders use it instead of encoding/json so
// that a publish is validated in one pass without maps or reflection, every value's bytes are
// kept (data is re-emitted verbatim) and every error names a byte offset.
//
// It accepts exactly RFC 8259 JSON with UTF-8 strings: unlike encoding/json it refuses invalid
// UTF-8 instead of replacing it, so a byte that was accepted is a byte that can be delivered.

// maxDepth bounds the nesting of arrays and objects so that a hostile body cannot exhaust the
// stack; encoding/json uses the same bound.
const maxDepth = 10000

// jsonKind is the kind of a JSON value, named in type errors ("must be a string, got number").
type jsonKind uint8

const (
	kindNone jsonKind = iota // absent
	kindObject
	kindArray
	kindString
	kindNumber
	kindBool
	kindNull
)

func (k jsonKind) String() string {
	switch k {
	case kindObject:
		return "object"
	case kindArray:
		return "array"
	case kindString:
		return "string"
	case kindNumber:
		return "number"
	case kindBool:
		return "boolean"
	case kindNull:
		return "null"
	}
	return "nothing"
}

// kindOf gives the kind of the value starting with c, or kindNone when no value starts so.
func kindOf(c byte) jsonKind {
	switch {
	case c == '{':
		return kindObject
	case c == '[':
		return kindArray
	case c == '"':
		return kindString
	case c == '-' || (c >= '0' && c <= '9'):
		return kindNumber
	case c == 't' || c == 'f':
		return kindBool
	case c == 'n':
		return kindNull
	}
	return kindNone
}

// syntaxError is malformed JSON at a byte offset of the scanned buffer.
type syntaxError struct {
	offset int
	msg    string
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at offset %d", e.msg, e.offset) }

// plain[c] is true for ASCII bytes that stand for themselves inside a JSON string.
var plain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanner walks one JSON text. Value methods expect pos at the first byte of the value
// (whitespace already skipped) and leave it just after the value.
type scanner struct {
	buf []byte
	pos int
	// ws is set whenever whitespace is skipped, so a caller can tell whether a value's bytes
	// are already compact.
	ws bool
	// lenient accepts invalid UTF-8 in strings, as encoding/json does (see [JSONScanner]).
	lenient bool
}

func (s *scanner) skipWS() {
	// Whitespace is ' ' and three control characters, all at most ' ': one comparison passes
	// over any other byte, which is what follows most tokens of a compact body.
	for s.pos < len(s.buf) && s.buf[s.pos] <= ' ' {
		switch s.buf[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
			s.ws = true
		default:
			return
		}
	}
}

// peek returns the byte at pos, or 0 at the end.
func (s *scanner) peek() byte {
	if s.pos < len(s.buf) {
		return s.buf[s.pos]
	}
	return 0
}

// expected reports that the byte at pos is not what the grammar wants.
func (s *scanner) expected(what string) error {
	if s.pos >= len(s.buf) {
		return &syntaxError{s.pos, "unexpected end of input, expected " + what}
	}
	return &syntaxError{s.pos, "invalid character " + quoteByte(s.buf[s.pos]) + ", expected " + what}
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < utf8.RuneSelf {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// scanString consumes a string token and reports whether it holds escapes.
func (s *scanner) scanString() (esc bool, err error) {
	start, buf := s.pos, s.buf
	pos := start + 1 // after the opening quote
	// Most strings (member names, ids, types, times) are plain up to their closing quote
	// within a few words: those end here, without the general loop's calls.
	for pos+8 <= len(buf) && pos-start <= shortString {
		m := specialMask(binary.LittleEndian.Uint64(buf[pos : pos+8]))
		if m == 0 {
			pos += 8
			continue
		}
		pos += bits.TrailingZeros64(m) >> 3
		if buf[pos] == '"' {
			s.pos = pos + 1
			return false, nil
		}
		break
	}
	s.pos = pos
	return s.scanStringRest(start)
}

// scanStringRest goes on with the string token that starts at start once scanString has
// met a byte other than its closing quote, or a long or unfinished run.
func (s *scanner) scanStringRest(start int) (esc bool, err error) {
	// Where the next quote and backslash are, once plainRun has looked.
	quote, backslash := -1, -1
	// A run is tested word by word for its first shortString bytes (from the opening quote,
	// then from each escape or multi-byte character on), and goes on in plainRun after them.
	for lim := start + 1 + shortString; ; lim = s.pos + shortString {
		s.toSpecial(&quote, &backslash, lim)
		if s.pos >= len(s.buf) {
			return esc, &syntaxError{start, "unterminated string"}
		}
		switch c := s.buf[s.pos]; {
		case c == '"':
			s.pos++
			return esc, nil
		case c == '\\':
			esc = true
			if s.pos+1 >= len(s.buf) {
				return esc, &syntaxError{start, "unterminated string"}
			}
			switch s.buf[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				if s.pos+6 > len(s.buf) {
					return esc, &syntaxError{s.pos, "incomplete \\u escape in string"}
				}
				for _, h := range s.buf[s.pos+2 : s.pos+6] {
					if unhex(h) < 0 {
						return esc, &syntaxError{s.pos, "invalid \\u escape in string"}
					}
				}
				s.pos += 6
			default:
				return esc, &syntaxError{s.pos, "invalid escape " + quoteByte(s.buf[s.pos+1]) + " in string"}
			}
		case c < 0x20:
			return esc, &syntaxError{s.pos, "control character " + quoteByte(c) + " in string (escape it)"}
		default:
			r, size := utf8.DecodeRune(s.buf[s.pos:])
			if r == utf8.RuneError && size <= 1 && !s.lenient {
				return esc, &syntaxError{s.pos, "invalid UTF-8 in string"}
			}
			s.pos += size
		}
	}
}

// toSpecial moves pos to the next byte that is not plain inside a string (a quote, a
// backslash, a control character or a byte of a multi-byte UTF-8 sequence), or to the end.
//
// It tests eight bytes at a time, and the first word holding such a byte says which byte it
// is (specialMask), so a string costs a word test per eight bytes and no test per byte. Most
// strings (member names, ids, types, times) end within their first shortString bytes; a run
// still plain at lim goes on in plainRun.
func (s *scanner) toSpecial(quote, backslash *int, lim int) {
	buf, pos := s.buf, s.pos
	for pos+8 <= len(buf) {
		if m := specialMask(binary.LittleEndian.Uint64(buf[pos : pos+8])); m != 0 {
			s.pos = pos + bits.TrailingZeros64(m)>>3
			return
		}
		if pos >= lim {
			s.pos = pos
			pos = s.plainRun(quote, backslash) // at least this plain word further
			lim = len(buf)
			continue
		}
		pos += 8
	}
	for pos < len(buf) {
		if c := buf[pos]; c >= utf8.RuneSelf || !plain[c] {
			break
		}
		pos++
	}
	s.pos = pos
}

// shortString is how many bytes of a plain run scanString tests word by word before it hands
// the rest to plainRun, whose two searches cost more than they save in shorter runs
// (BenchmarkScanString).
const shortString = 64

// plainRun returns where the plain bytes of a long string that start at s.pos end: at the
// next quote or backslash, or in the first word after s.pos holding a control character or a
// byte of a multi-byte UTF-8 sequence. bytes.IndexByte (vectorised) finds the quote and the
// backslash, and each remaining word needs one bit test (outsideASCIIText) instead of the
// four of special: BenchmarkScanString/820 scans its string in less than half the time.
//
// *quote and *backslash carry the positions found from one call to the next within a string,
// so a string is searched once however many multi-byte characters interrupt its runs: the
// next quote at or after s.pos (len(s.buf) if none) and the next backslash before it (*quote
// if none; it is only looked for up to the quote, or every string would search the rest of
// the body for one). A position the scan has passed (an escaped quote, a backslash) is looked
// up again.
func (s *scanner) plainRun(quote, backslash *int) int {
	if *quote < s.pos {
		*quote = nextByte(s.buf, s.pos, '"') // and *backslash, never after *quote, is passed too
	}
	if *backslash < s.pos {
		*backslash = nextByte(s.buf[:*quote], s.pos, '\\')
	}
	pos, end := s.pos, *backslash
	// Four words at a time while they are all plain (the test is exact for each word, so it
	// is for their union), then the last of them one at a time.
	for ; pos+32 <= end; pos += 32 {
		b := s.buf[pos : pos+32]
		w0, w1 := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		w2, w3 := binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
		if ((w0-lsb*0x20)|w0|(w1-lsb*0x20)|w1|(w2-lsb*0x20)|w2|(w3-lsb*0x20)|w3)&msb != 0 {
			break // some word is outsideASCIIText
		}
	}
	for pos+8 <= end && !outsideASCIIText(binary.LittleEndian.Uint64(s.buf[pos:])) {
		pos += 8
	}
	return pos
}

// special reports whether any of the eight bytes in x is not plain inside a JSON string: a
// control character, '"', '\\' or a byte of a multi-byte UTF-8 sequence.
func special(x uint64) bool { return specialMask(x) != 0 }

// specialMask marks the bytes of x that are not plain inside a JSON string (see bytesBelow:
// its lowest set bit marks the first such byte).
func specialMask(x uint64) uint64 {
	return x&msb | bytesBelow(x, 0x20) | bytesEqual(x, '"') | bytesEqual(x, '\\')
}

// Eight bytes at a time: lsb and msb are the lowest and the highest bit of every byte of a
// little-endian word.
const lsb, msb = 0x0101010101010101, 0x8080808080808080

// bytesBelow sets the top bit of each byte of x below n (at most 0x80), by the "some byte is
// less than n" bit trick. It may also set it in a byte above one that is below n (the borrow
// carries only upwards from such a byte), so whether the result is zero, and which byte its
// lowest set bit marks, are exact.
func bytesBelow(x uint64, n byte) uint64 { return (x - lsb*uint64(n)) &^ x & msb }

// bytesEqual marks the bytes of x equal to c, as exactly as bytesBelow.
func bytesEqual(x uint64, c byte) uint64 { return bytesBelow(x^(lsb*uint64(c)), 1) }

// nextByte returns the index of the first c in b at or after from, or len(b).
func nextByte(b []byte, from int, c byte) int {
	if i := bytes.IndexByte(b[from:], c); i >= 0 {
		return from + i
	}
	return len(b)
}

// outsideASCIIText reports whether any of the eight bytes in x is a control character or a
// byte of a multi-byte UTF-8 sequence (below 0x20 or from 0x80). x - 0x20 in each byte sets the
// byte's top bit when the byte is below 0x20; the borrow that carries into the next byte only
// ever follows such a byte, so the answer is exact though the bit may mark the wrong byte.
func outsideASCIIText(x uint64) bool {
	return ((x-lsb*0x20)|x)&msb != 0
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// scanNumber consumes a number token.
func (s *scanner) scanNumber() error {
	b := s.buf
	if s.pos < len(b) && b[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(b) && b[s.pos] == '0':
		s.pos++
	case s.pos < len(b) && b[s.pos] >= '1' && b[s.pos] <= '9':
		for s.pos < len(b) && b[s.pos] >= '0' && b[s.pos] <= '9' {
			s.pos++
		}
	default:
		return s.expected("a digit")
	}
	if s.pos < len(b) && b[s.pos] == '.' {
		s.pos++
		if s.pos >= len(b) || b[s.pos] < '0' || b[s.pos] > '9' {
			return s.expected("a digit after the decimal point")
		}
		for s.pos < len(b) && b[s.pos] >= '0' && b[s.pos] <= '9' {
			s.pos++
		}
	}
	if s.pos < len(b) && (b[s.pos] == 'e' || b[s.pos] == 'E') {
		s.pos++
		if s.pos < len(b) && (b[s.pos] == '+' || b[s.pos] == '-') {
			s.pos++
		}
		if s.pos >= len(b) || b[s.pos] < '0' || b[s.pos] > '9' {
			return s.expected("a digit in the exponent")
		}
		for s.pos < len(b) && b[s.pos] >= '0' && b[s.pos] <= '9' {
			s.pos++
		}
	}
	return nil
}

func (s *scanner) literal(word string) error {
	if len(s.buf)-s.pos >= len(word) && string(s.buf[s.pos:s.pos+len(word)]) == word {
		s.pos += len(word)
		return nil
	}
	// Point at the first byte that differs.
	for i := 0; i < len(word); i++ {
		if s.pos >= len(s.buf) || s.buf[s.pos] != word[i] {
			return s.expected(strconv.Quote(word))
		}
		s.pos++
	}
	return nil // unreachable
}

// skipValue consumes and validates one value of any kind and returns its kind.
func (s *scanner) skipValue(depth int) (jsonKind, error) {
	if s.pos >= len(s.buf) {
		return kindNone, s.expected("a value")
	}
	switch c := s.buf[s.pos]; c {
	case '{':
		if depth >= maxDepth {
			return kindNone, &syntaxError{s.pos, "nesting too deep"}
		}
		empty, err := s.objectStart()
		if err != nil || empty {
			return kindObject, err
		}
		for {
			if _, _, err := s.objectKey(); err != nil {
				return kindObject, err
			}
			if _, err := s.skipValue(depth + 1); err != nil {
				return kindObject, err
			}
			more, err := s.objectNext()
			if err != nil || !more {
				return kindObject, err
			}
		}
	case '[':
		if depth >= maxDepth {
			return kindNone, &syntaxError{s.pos, "nesting too deep"}
		}
		empty, err := s.arrayStart()
		if err != nil || empty {
			return kindArray, err
		}
		for {
			if _, err := s.skipValue(depth + 1); err != nil {
				return kindArray, err
			}
			more, err := s.arrayNext()
			if err != nil || !more {
				return kindArray, err
			}
		}
	case '"':
		_, err := s.scanString()
		return kindString, err
	case 't':
		return kindBool, s.literal("true")
	case 'f':
		return kindBool, s.literal("false")
	case 'n':
		return kindNull, s.literal("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return kindNumber, s.scanNumber()
		}
		return kindNone, s.expected("a value")
	}
}

// objectStart consumes '{' and following whitespace and reports whether the object is empty
// (then the closing '}' is consumed too).
func (s *scanner) objectStart() (empty bool, err error) {
	s.pos++
	s.skipWS()
	if s.peek() == '}' {
		s.pos++
		return true, nil
	}
	return false, nil
}

// objectKey consumes a member name, the colon and whitespace around it. key is the name's
// content without quotes, decoded when it holds escapes (then it is a fresh slice).
func (s *scanner) objectKey() (key []byte, esc bool, err error) {
	if s.peek() != '"' {
		return nil, false, s.expected("a string naming an object member")
	}
	start := s.pos
	if esc, err = s.scanString(); err != nil {
		return nil, esc, err
	}
	key = s.buf[start+1 : s.pos-1]
	if esc {
		key = appendUnquoted(nil, s.buf[start:s.pos])
	}
	s.skipWS()
	if s.peek() != ':' {
		return nil, esc, s.expected("':' after object member name")
	}
	s.pos++
	s.skipWS()
	return key, esc, nil
}

// objectNext consumes whitespace and then ',' (more members follow) or '}' (the end).
func (s *scanner) objectNext() (more bool, err error) {
	s.skipWS()
	switch s.peek() {
	case ',':
		s.pos++
		s.skipWS()
		return true, nil
	case '}':
		s.pos++
		return false, nil
	}
	return false, s.expected("',' or '}' after object member")
}

// arrayStart consumes '[' and following whitespace and reports whether the array is empty
// (then the closing ']' is consumed too).
func (s *scanner) arrayStart() (empty bool, err error) {
	s.pos++
	s.skipWS()
	if s.peek() == ']' {
		s.pos++
		return true, nil
	}
	return false, nil
}

// arrayNext consumes whitespace and then ',' (more elements follow) or ']' (the end).
func (s *scanner) arrayNext() (more bool, err error) {
	s.skipWS()
	switch s.peek() {
	case ',':
		s.pos++
		s.skipWS()
		return true, nil
	case ']':
		s.pos++
		return false, nil
	}
	return false, s.expected("',' or ']' after array element")
}

// end checks that only whitespace follows the top-level value.
func (s *scanner) end() error {
	s.skipWS()
	if s.pos < len(s.buf) {
		return &syntaxError{s.pos, "unexpected " + quoteByte(s.buf[s.pos]) + " after the top-level value"}
	}
	return nil
}

// memberStrings holds the unquoted values of an event's string members in one string, so
// they cost one allocation together; each value is a slice of it.
type memberStrings struct {
	all   string
	spans [maxMembers][2]int
}

// maxMembers bounds the members of a schema that memberStrings takes (ceMembers, egMembers).
const maxMembers = 16

// unquoteMembers unquotes the string members of ms whose data reports false: not the
// payload, which can be large and is kept only in the event's Raw.
func (v *memberStrings) unquoteMembers(ms []member, data func(k int) bool) {
	var scratch [256]byte
	b := scratch[:0]
	for k := range ms {
		if ms[k].kind != kindString || data(k) {
			continue
		}
		v.spans[k][0] = len(b)
		if ms[k].esc {
			b = appendUnquoted(b, ms[k].tok)
		} else {
			b = append(b, ms[k].tok[1:len(ms[k].tok)-1]...)
		}
		v.spans[k][1] = len(b)
	}
	v.all = string(b)
}

// get returns the value of string member k ("" for any other).
func (v *memberStrings) get(k int) string { return v.all[v.spans[k][0]:v.spans[k][1]] }

// unquote returns the content of a scanned string token (quotes included in tok).
func unquote(tok []byte, esc bool) string {
	if !esc {
		return string(tok[1 : len(tok)-1])
	}
	return string(appendUnquoted(nil, tok))
}

// appendUnquoted appends the decoded content of a scanned (hence valid) string token. Lone
// surrogates in \u escapes and bytes that are not UTF-8 (which only a lenient scan lets
// through) become U+FFFD, as encoding/json does. The event decoders refuse lone surrogates in
// the members they decode ([loneSurrogate]), so two different ids never decode to one.
func appendUnquoted(dst, tok []byte) []byte {
	b := tok[1 : len(tok)-1]
	for i := 0; i < len(b); {
		c := b[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, b[i:i+size]...)
			}
			i += size
			continue
		}
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		switch b[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(b[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
					if dec := utf16.DecodeRune(r, hex4(b[i+2:])); dec != utf8.RuneError {
						dst = utf8.AppendRune(dst, dec)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, b[i+1])
		}
		i += 2
	}
	return dst
}

// loneSurrogate returns the first \u escape of the scanned (hence valid) string token tok
// that is half of a UTF-16 surrogate pair without its other half ("\ud800"), or "". Such an
// escape names no character: decoding turns it into U+FFFD, so "a\ud800" and "a\ud801"
// would decode to the same string, and .NET's System.Text.Json (Utf8JsonReader.GetString),
// which Event Grid's front end reads events with, refuses it as invalid UTF-16.
func loneSurrogate(tok []byte) string {
	for i := bytes.IndexByte(tok, '\\'); i >= 0 && i+1 < len(tok); {
		n := 2
		if tok[i+1] == 'u' {
			n = 6
			if r := hex4(tok[i+2:]); utf16.IsSurrogate(r) {
				if r >= 0xdc00 || i+12 > len(tok) || tok[i+6] != '\\' || tok[i+7] != 'u' ||
					utf16.DecodeRune(r, hex4(tok[i+8:])) == utf8.RuneError {
					return string(tok[i : i+6])
				}
				n = 12
			}
		}
		i += n
		j := bytes.IndexByte(tok[i:], '\\')
		if j < 0 {
			break
		}
		i += j
	}
	return ""
}

// loneSurrogateIn returns the first lone surrogate escape of the string member m, or "".
func loneSurrogateIn(m *member) string {
	if m.kind != kindString || !m.esc {
		return ""
	}
	return loneSurrogate(m.tok)
}

// loneSurrogateReason is the problem reported for a string member holding the lone surrogate
// escape esc ([loneSurrogate]); it reads after the member's name.
func loneSurrogateReason(esc string) string {
	return "holds the escape " + esc + ", half of a UTF-16 surrogate pair without its other half, which is not a character (.NET and Event Grid refuse it as invalid UTF-16): " +
		"write a character outside the Basic Multilingual Plane as a high and low surrogate pair such as \"\\ud83d\\ude00\", or as UTF-8"
}

func hex4(b []byte) rune {
	return rune(unhex(b[0])<<12 | unhex(b[1])<<8 | unhex(b[2])<<4 | unhex(b[3]))
}

// appendCompact appends the valid JSON value v without insignificant whitespace.
func appendCompact(dst, v []byte) []byte {
	inString := false
	start := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ' ', '\t', '\n', '\r':
			dst = append(dst, v[start:i]...)
			start = i + 1
		}
	}
	return append(dst, v[start:]...)
}

// hexDigits are the digits of \u escapes written by appendString.
const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Like encoding/json it escapes control characters,
// '"', '\\', U+2028 and U+2029, and replaces invalid UTF-8 with U+FFFD; it does not escape
// HTML characters.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
