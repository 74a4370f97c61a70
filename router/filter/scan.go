package filter

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/egridio/egrid/schemas"
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

// extract scans raw, a JSON object, and stores in vals (one per slot of the trie, all
// missing on entry) the values at the trie's paths. It stops as soon as every path has an
// exactly named value; until then it checks the JSON grammar, and when raw is not a valid JSON
// object it leaves every value missing. Raw that ingress accepted is always valid; the checks
// keep hand-built events from yielding garbage.
//
// The grammar is schemas' ([schemas.JSONScanner], egrid's one JSON scanner), lenient about
// bytes that are not UTF-8 as encoding/json is: the walk here only decides which values to
// read and which to skip.
func extract(raw []byte, root *pathNode, vals []value, arrays bool) {
	s := scanner{js: schemas.NewJSONScanner(raw, true), vals: vals, need: len(vals), arrays: arrays}
	s.js.SkipSpace()
	if s.js.Peek() != '{' {
		return
	}
	ok := s.value([]match{{node: root}})
	if s.done {
		return
	}
	if !ok || s.js.End() != nil {
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
	js     schemas.JSONScanner
	depth  int // arrays and objects entered
	vals   []value
	arrays bool
	// need counts the slots without an exactly named value; at zero the scan is done.
	need int
	done bool
}

// value reads one JSON value at the scanner's position, recording it in the slots of the
// matches that end a path and walking into it for the matches that have children.
func (s *scanner) value(ms []match) bool {
	slots, walk := false, false
	for _, m := range ms {
		slots = slots || m.node.slot >= 0
		walk = walk || len(m.node.children) > 0
	}
	if !slots && !walk {
		return s.skip()
	}
	var v value
	switch c := s.js.Peek(); {
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

// enter counts an array or object entered and reports whether the nesting is still allowed.
func (s *scanner) enter() bool {
	s.depth++
	return s.depth <= schemas.MaxJSONDepth
}

// object walks an object for the children of ms.
func (s *scanner) object(ms []match) bool {
	if !s.enter() {
		return false
	}
	if s.js.ObjectStart() {
		s.depth--
		return true
	}
	var buf [4]match
	for {
		key, err := s.js.Key()
		if err != nil {
			return false
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
		if !s.value(next) {
			return false
		}
		if s.done {
			return true
		}
		more, err := s.js.ObjectNext()
		if err != nil {
			return false
		}
		if !more {
			s.depth--
			return true
		}
	}
}

// array reads an array's scalar elements.
func (s *scanner) array() ([]value, bool) {
	if !s.enter() {
		return nil, false
	}
	if s.js.ArrayStart() {
		s.depth--
		return nil, true
	}
	var elems []value
	for {
		switch s.js.Peek() {
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
		more, err := s.js.ArrayNext()
		if err != nil {
			return nil, false
		}
		if !more {
			s.depth--
			return elems, true
		}
	}
}

// scalar reads a string, number, true, false or null.
func (s *scanner) scalar() (value, bool) {
	switch c := s.js.Peek(); {
	case c == '"':
		tok, decode, err := s.js.String()
		if err != nil {
			return value{}, false
		}
		return value{kind: kindString, s: schemas.UnquoteJSON(tok, decode)}, true
	case c == '-' || ('0' <= c && c <= '9'):
		tok, err := s.js.Number()
		if err != nil {
			return value{}, false
		}
		// The grammar is checked, so the only possible error is a range error, whose
		// result (±Inf or 0) is the right value to compare with.
		n, _ := strconv.ParseFloat(string(tok), 64)
		return value{kind: kindNumber, n: n}, true
	}
	k, b, err := s.js.Literal()
	if err != nil {
		return value{}, false
	}
	if k == schemas.JSONNull {
		return value{kind: kindNull}, true
	}
	return value{kind: kindBool, b: b}, true
}

// skip checks and passes over one JSON value.
func (s *scanner) skip() bool {
	_, err := s.js.Skip(s.depth)
	return err == nil
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
