package schemas

import "unicode/utf8"

// JSONKind is the kind of a JSON value.
type JSONKind = jsonKind

// JSON value kinds, as [JSONScanner.Skip] reports them.
const (
	JSONObject = kindObject
	JSONArray  = kindArray
	JSONString = kindString
	JSONNumber = kindNumber
	JSONBool   = kindBool
	JSONNull   = kindNull
)

// MaxJSONDepth bounds the nesting of arrays and objects, as encoding/json does, so a hostile
// text cannot exhaust the stack.
const MaxJSONDepth = maxDepth

// JSONScanner walks one JSON text token by token with the grammar the decoders use: egrid's
// one JSON scanner. router/filter reads the values at a filter's paths with it in one pass
// that decodes only those values, where encoding/json would decode the whole event.
//
// Every method but Peek, Pos and SkipSpace expects the position at the first byte of what it
// reads (whitespace skipped) and leaves it just after, followed whitespace skipped where the
// method says so; a malformed text gives an error naming the byte offset. The zero value scans
// an empty text. A JSONScanner is a small value meant to live on its user's stack.
type JSONScanner struct {
	s scanner
}

// NewJSONScanner returns a scanner at the start of buf. A lenient scanner accepts bytes that
// are not UTF-8 inside strings, as encoding/json does (reading them as U+FFFD); a strict one,
// as the decoders use, refuses them.
func NewJSONScanner(buf []byte, lenient bool) JSONScanner {
	return JSONScanner{s: scanner{buf: buf, lenient: lenient}}
}

// Pos returns the byte offset of the position.
func (j *JSONScanner) Pos() int { return j.s.pos }

// SkipSpace passes over whitespace.
func (j *JSONScanner) SkipSpace() { j.s.skipWS() }

// Peek returns the byte at the position, or 0 at the end.
func (j *JSONScanner) Peek() byte { return j.s.peek() }

// ObjectStart consumes '{' and the whitespace after it and reports whether the object is
// empty (its '}' consumed too).
func (j *JSONScanner) ObjectStart() (empty bool) {
	empty, _ = j.s.objectStart()
	return empty
}

// Key consumes a member name, its colon and the whitespace around it, and returns the name:
// the published bytes between the quotes, or a fresh decoded copy when it holds escapes or
// (lenient) bytes that are not UTF-8.
func (j *JSONScanner) Key() ([]byte, error) {
	s := &j.s
	if s.peek() != '"' {
		return nil, s.expected("a string naming an object member")
	}
	start := s.pos
	esc, err := s.scanString()
	if err != nil {
		return nil, err
	}
	key := s.buf[start+1 : s.pos-1]
	if esc || (s.lenient && !utf8.Valid(key)) {
		key = appendUnquoted(nil, s.buf[start:s.pos])
	}
	s.skipWS()
	if s.peek() != ':' {
		return nil, s.expected("':' after object member name")
	}
	s.pos++
	s.skipWS()
	return key, nil
}

// ObjectNext consumes whitespace and then ',' and whitespace (more members follow: true) or
// '}' (the end: false).
func (j *JSONScanner) ObjectNext() (more bool, err error) { return j.s.objectNext() }

// ArrayStart consumes '[' and the whitespace after it and reports whether the array is empty
// (its ']' consumed too).
func (j *JSONScanner) ArrayStart() (empty bool) {
	empty, _ = j.s.arrayStart()
	return empty
}

// ArrayNext consumes whitespace and then ',' and whitespace (more elements follow: true) or
// ']' (the end: false).
func (j *JSONScanner) ArrayNext() (more bool, err error) { return j.s.arrayNext() }

// String consumes a string and returns its token, quotes included, and whether it needs
// decoding ([UnquoteJSON]): it holds escapes or (lenient) bytes that are not UTF-8.
func (j *JSONScanner) String() (tok []byte, decode bool, err error) {
	s := &j.s
	if s.peek() != '"' {
		return nil, false, s.expected("a string")
	}
	start := s.pos
	esc, err := s.scanString()
	if err != nil {
		return nil, false, err
	}
	tok = s.buf[start:s.pos]
	return tok, esc || (s.lenient && !utf8.Valid(tok)), nil
}

// Number consumes a number and returns its token.
func (j *JSONScanner) Number() ([]byte, error) {
	start := j.s.pos
	err := j.s.scanNumber()
	return j.s.buf[start:j.s.pos], err
}

// Literal consumes true, false or null and returns its kind and, for a boolean, its value.
func (j *JSONScanner) Literal() (kind JSONKind, b bool, err error) {
	switch j.s.peek() {
	case 't':
		return kindBool, true, j.s.literal("true")
	case 'f':
		return kindBool, false, j.s.literal("false")
	case 'n':
		return kindNull, false, j.s.literal("null")
	}
	return kindNone, false, j.s.expected("true, false or null")
}

// Skip consumes and checks one value of any kind and returns its kind. depth is the number of
// arrays and objects the value is nested in; a value nested deeper than [MaxJSONDepth] in all
// is an error.
func (j *JSONScanner) Skip(depth int) (JSONKind, error) { return j.s.skipValue(depth) }

// End checks that only whitespace follows.
func (j *JSONScanner) End() error { return j.s.end() }

// UnquoteJSON returns the content of a string token from [JSONScanner.String], decoded as
// encoding/json decodes it (escapes resolved, lone surrogates and bytes that are not UTF-8
// read as U+FFFD).
func UnquoteJSON(tok []byte, decode bool) string { return unquote(tok, decode) }

// LoneSurrogate returns the first \u escape of the string token tok (from
// [JSONScanner.String] or [JSONScanner.Key]'s bytes, quotes included or not) that holds half of
// a UTF-16 surrogate pair without its other half, or "" when there is none. Decoded, such an
// escape reads as U+FFFD, so two different strings would decode the same; the decoders refuse
// it in every member they decode.
func LoneSurrogate(tok []byte) string { return loneSurrogate(tok) }
