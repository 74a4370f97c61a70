package filter

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// kind is the JSON type of a key's value, plus "missing".
type kind uint8

const (
	kindMissing kind = iota
	kindNull
	kindBool
	kindNumber
	kindString
	kindObject
	kindArray
)

// value is the value of one key in one event. Objects carry no content (no operator looks
// inside them); arrays carry their scalar elements (nested arrays and objects are dropped,
// since their type never equals a filter's).
type value struct {
	kind  kind
	b     bool
	n     float64
	s     string
	elems []value
	// folds counts the path segments that matched only ignoring case, so an exact match
	// wins over a case-insensitive one (see the package documentation).
	folds int
}

// pathNode is a node of the trie of raw paths a filter reads: the root's children are top-level
// field names, and a node with slot >= 0 ends a path whose value goes to that slot.
type pathNode struct {
	seg      string
	slot     int
	children []*pathNode
}

// add inserts a path and returns its slot, allocating the next one (*n) for a new path.
func (p *pathNode) add(segs []string, n *int) int {
	node := p
	for _, seg := range segs {
		var next *pathNode
		for _, c := range node.children {
			if c.seg == seg {
				next = c
				break
			}
		}
		if next == nil {
			next = &pathNode{seg: seg, slot: -1}
			node.children = append(node.children, next)
		}
		node = next
	}
	if node.slot < 0 {
		node.slot = *n
		*n++
	}
	return node.slot
}

// maxDepth bounds nesting, as encoding/json does, so a hostile payload cannot exhaust the
// stack.
const maxDepth = 10000

// extract scans raw, a JSON object, and stores in vals (one per slot of the trie, all
// missing on entry) the values at the trie's paths. It stops as soon as every path has an
// exactly named value; until then it checks the JSON grammar, and when raw is not a valid JSON
// object it leaves every value missing. Raw that ingress accepted is always valid; the checks
// keep hand-built events from yielding garbage.
func extract(raw []byte, root *pathNode, vals []value, arrays bool) {
	s := scanner{data: raw, vals: vals, need: len(vals), arrays: arrays}
	s.ws()
	if s.pos >= len(s.data) || s.data[s.pos] != '{' {
		return
	}
	ok := s.value([]match{{node: root}})
	if s.done {
		return
	}
	s.ws()
	if !ok || s.pos != len(s.data) {
		clear(vals)
	}
}

// match is a trie node the scanner is positioned on, with the case-insensitive segment
// matches that led there.
type match struct {
	node  *pathNode
	folds int
}

type scanner struct {
	data   []byte
	pos    int
	depth  int
	vals   []value
	arrays bool
	// need counts the slots without an exactly named value; at zero the scan is done.
	need int
	done bool
}

func (s *scanner) ws() {
	data, i := s.data, s.pos
	for i < len(data) && (data[i] == ' ' || data[i] == '\n' || data[i] == '\t' || data[i] == '\r') {
		i++
	}
	s.pos = i
}

func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// value reads one JSON value at the scanner's position, recording it in the slots of the
// matches that end a path and walking into it for the matches that have children.
func (s *scanner) value(ms []match) bool {
	s.ws()
	slots, walk := false, false
	for _, m := range ms {
		slots = slots || m.node.slot >= 0
		walk = walk || len(m.node.children) > 0
	}
	if !slots && !walk {
		return s.skip()
	}
	var v value
	switch c := s.peek(); {
	case c == '{':
		v.kind = kindObject
		var ok bool
		if walk {
			ok = s.object(ms)
		} else {
			ok = s.skip()
		}
		if !ok {
			return false
		}
	case c == '[':
		v.kind = kindArray
		var ok bool
		if slots && s.arrays {
			v.elems, ok = s.array()
		} else {
			ok = s.skip()
		}
		if !ok {
			return false
		}
	default:
		var ok bool
		if v, ok = s.scalar(); !ok {
			return false
		}
	}
	for _, m := range ms {
		if m.node.slot < 0 {
			continue
		}
		cur := &s.vals[m.node.slot]
		if cur.kind == kindMissing || m.folds < cur.folds {
			*cur = v
			cur.folds = m.folds
			if m.folds == 0 {
				s.need--
				s.done = s.need == 0
			}
		}
	}
	return true
}

// object walks an object for the children of ms.
func (s *scanner) object(ms []match) bool {
	if !s.enter() {
		return false
	}
	s.pos++ // '{'
	s.ws()
	if s.peek() == '}' {
		s.pos++
		s.depth--
		return true
	}
	var buf [4]match
	for {
		s.ws()
		start, end, escaped, ok := s.str()
		if !ok {
			return false
		}
		key := s.data[start:end]
		if escaped || !utf8.Valid(key) {
			key = []byte(unescape(s.data[start-1 : end+1]))
		}
		next := buf[:0]
		for _, m := range ms {
			for _, c := range m.node.children {
				if string(key) == c.seg {
					next = append(next, match{node: c, folds: m.folds})
				} else if equalFoldBytes(key, c.seg) {
					next = append(next, match{node: c, folds: m.folds + 1})
				}
			}
		}
		s.ws()
		if s.peek() != ':' {
			return false
		}
		s.pos++
		if !s.value(next) {
			return false
		}
		if s.done {
			return true
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			s.depth--
			return true
		default:
			return false
		}
	}
}

// array reads an array's scalar elements.
func (s *scanner) array() ([]value, bool) {
	if !s.enter() {
		return nil, false
	}
	s.pos++ // '['
	s.ws()
	if s.peek() == ']' {
		s.pos++
		s.depth--
		return nil, true
	}
	var elems []value
	for {
		s.ws()
		switch s.peek() {
		case '{', '[':
			if !s.skip() {
				return nil, false
			}
		default:
			v, ok := s.scalar()
			if !ok {
				return nil, false
			}
			elems = append(elems, v)
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.depth--
			return elems, true
		default:
			return nil, false
		}
	}
}

// scalar reads a string, number, true, false or null.
func (s *scanner) scalar() (value, bool) {
	switch c := s.peek(); {
	case c == '"':
		start, end, escaped, ok := s.str()
		if !ok {
			return value{}, false
		}
		raw := s.data[start:end]
		if escaped || !utf8.Valid(raw) {
			return value{kind: kindString, s: unescape(s.data[start-1 : end+1])}, true
		}
		return value{kind: kindString, s: string(raw)}, true
	case c == '-' || ('0' <= c && c <= '9'):
		start := s.pos
		if !s.number() {
			return value{}, false
		}
		// The grammar is checked, so the only possible error is a range error, whose
		// result (±Inf or 0) is the right value to compare with.
		n, _ := strconv.ParseFloat(string(s.data[start:s.pos]), 64)
		return value{kind: kindNumber, n: n}, true
	case c == 't':
		return value{kind: kindBool, b: true}, s.literal("true")
	case c == 'f':
		return value{kind: kindBool}, s.literal("false")
	case c == 'n':
		return value{kind: kindNull}, s.literal("null")
	}
	return value{}, false
}

// unescape decodes a quoted JSON string the way encoding/json does (escapes resolved,
// invalid UTF-8 replaced by U+FFFD). q has been checked by scanner.str.
func unescape(q []byte) string {
	var out string
	// The copy keeps the scanned bytes (and with them the scanner) from escaping to the
	// heap through json.Unmarshal: Match's small value buffer stays on the stack.
	_ = json.Unmarshal(bytes.Clone(q), &out)
	return out
}

func (s *scanner) enter() bool {
	s.depth++
	return s.depth <= maxDepth
}

// skip checks and passes over one JSON value.
func (s *scanner) skip() bool {
	s.ws()
	switch c := s.peek(); {
	case c == '{':
		if !s.enter() {
			return false
		}
		s.pos++
		s.ws()
		if s.peek() == '}' {
			s.pos++
			s.depth--
			return true
		}
		for {
			s.ws()
			if _, _, _, ok := s.str(); !ok {
				return false
			}
			s.ws()
			if s.peek() != ':' {
				return false
			}
			s.pos++
			if !s.skip() {
				return false
			}
			s.ws()
			switch s.peek() {
			case ',':
				s.pos++
			case '}':
				s.pos++
				s.depth--
				return true
			default:
				return false
			}
		}
	case c == '[':
		if !s.enter() {
			return false
		}
		s.pos++
		s.ws()
		if s.peek() == ']' {
			s.pos++
			s.depth--
			return true
		}
		for {
			if !s.skip() {
				return false
			}
			s.ws()
			switch s.peek() {
			case ',':
				s.pos++
			case ']':
				s.pos++
				s.depth--
				return true
			default:
				return false
			}
		}
	case c == '"':
		_, _, _, ok := s.str()
		return ok
	case c == '-' || ('0' <= c && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

// str passes over a string and returns the bounds of its contents (without quotes) and
// whether it has escapes.
func (s *scanner) str() (start, end int, escaped, ok bool) {
	if s.peek() != '"' {
		return 0, 0, false, false
	}
	s.pos++
	start = s.pos
	data := s.data
	for s.pos < len(data) {
		// Fast path: ordinary characters.
		i := s.pos
		for i < len(data) && plain[data[i]] {
			i++
		}
		s.pos = i
		if i == len(data) {
			break
		}
		c := data[i]
		switch {
		case c == '"':
			end = s.pos
			s.pos++
			return start, end, escaped, true
		case c == '\\':
			escaped = true
			s.pos++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos++
			case 'u':
				s.pos++
				for range 4 {
					if !isHex(s.peek()) {
						return 0, 0, false, false
					}
					s.pos++
				}
			default:
				return 0, 0, false, false
			}
		default: // a control character
			return 0, 0, false, false
		}
	}
	return 0, 0, false, false
}

// plain marks the bytes that stand for themselves inside a JSON string: not a quote, not a
// backslash, not a control character.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number passes over a number, checking the JSON grammar.
func (s *scanner) number() bool {
	if s.peek() == '-' {
		s.pos++
	}
	switch c := s.peek(); {
	case c == '0':
		s.pos++
	case '1' <= c && c <= '9':
		for isDigit(s.peek()) {
			s.pos++
		}
	default:
		return false
	}
	if s.peek() == '.' {
		s.pos++
		if !isDigit(s.peek()) {
			return false
		}
		for isDigit(s.peek()) {
			s.pos++
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.peek(); c == '+' || c == '-' {
			s.pos++
		}
		if !isDigit(s.peek()) {
			return false
		}
		for isDigit(s.peek()) {
			s.pos++
		}
	}
	return true
}

func (s *scanner) literal(lit string) bool {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return false
	}
	s.pos += len(lit)
	return true
}

// equalFoldBytes reports whether key and seg are equal ignoring case, without allocating
// unless a non-ASCII byte is involved.
func equalFoldBytes(key []byte, seg string) bool {
	if len(key) == len(seg) {
		i := 0
		for ; i < len(key); i++ {
			a, b := key[i], seg[i]
			if a >= utf8.RuneSelf || b >= utf8.RuneSelf {
				break
			}
			if lowerASCII(a) != lowerASCII(b) {
				return false
			}
		}
		if i == len(key) {
			return true
		}
	} else if isASCII(key) && isASCII(seg) {
		return false
	}
	return strings.EqualFold(string(key), seg)
}

func isASCII[T string | []byte](b T) bool {
	for i := 0; i < len(b); i++ {
		if b[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
