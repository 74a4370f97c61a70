package filter

import (
	"hash/maphash"
	"math/bits"
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
// inside them), and neither do arrays: the scan tests their elements as it reads them and
// keeps only which conditions held for some element ([scanner.array]), so an array costs no
// memory however long it is.
type value struct {
	n      float64
	s      string
	folded string // s case-folded ([foldString]), once isFolded; see [value.fold]
	// folds counts the path segments that matched only ignoring case, so an exact match
	// wins over a case-insensitive one (see the package documentation).
	folds int
	// hits has bit i set, for an array, when the positive form of the filter's conds[i]
	// holds for some element.
	hits     uint32
	kind     kind
	b        bool
	isFolded bool
}

// fold returns the string case-folded, folding it on the first call only: however many
// StringContains conditions read a value, it is folded once per Match.
func (v *value) fold() string {
	if !v.isFolded {
		v.folded, v.isFolded = foldString(v.s), true
	}
	return v.folded
}

// A condition's bit in [value.hits], and a slot's in the scanner's masks, is a uint32 bit.
const _ = uint32(1) << (MaxAdvancedFilters - 1)

// pathNode is a node of the trie of raw paths a filter reads: the root's children are top-level
// field names, and a node with slot >= 0 ends a path whose value goes to that slot.
type pathNode struct {
	seg      string
	ascii    bool // seg is ASCII, so only a name of its length can match it
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
			next = &pathNode{seg: seg, ascii: isASCII(seg), slot: -1}
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
// missing on entry) the values at the trie's paths; with arrays set, an array at a path is
// tested against conds (the filter's conditions) as it is read. It reads the whole object,
// since a later member of the same name replaces an earlier one, and checks the JSON grammar
// on the way: when raw is not a valid JSON object it leaves every value missing. Raw that
// ingress accepted is always valid; the checks keep hand-built events from yielding garbage.
//
// The grammar is schemas' ([schemas.JSONScanner], egrid's one JSON scanner), lenient about
// bytes that are not UTF-8 as encoding/json is: the walk here only decides which values to
// read and which to skip.
func extract(raw []byte, root *pathNode, vals []value, arrays bool, conds []cond) {
	s := scanner{js: schemas.NewJSONScanner(raw, true), vals: vals, arrays: arrays, conds: conds}
	if !s.run(root) && s.dup {
		s = scanner{js: schemas.NewJSONScanner(raw, true), vals: vals, arrays: arrays, conds: conds, exact: true}
		s.run(root)
	}
}

// run walks raw from its start, leaving every value missing when it is not a valid object.
func (s *scanner) run(root *pathNode) bool {
	s.js.SkipSpace()
	if s.js.Peek() != '{' {
		return false
	}
	if !s.value([]match{{node: root}}) || s.js.End() != nil {
		clear(s.vals)
		return false
	}
	return true
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
	conds  []cond
	// exact makes every object on a path be read twice, first to find the last occurrence of
	// each member name ([scanner.lastMembers]). A walk without it gives up, setting dup, at the
	// first name an object repeats that leads into the trie, and extract walks again with it:
	// so only an event with such a duplicate pays for the second reading.
	exact bool
	dup   bool
}

// value reads one JSON value at the scanner's position, recording it in the slots of the
// matches that end a path and walking into it for the matches that have children. A match
// takes the slot unless the slot holds a value reached with fewer case-insensitive segment
// matches: among equals the later one wins.
func (s *scanner) value(ms []match) bool {
	var take uint32 // the slots the value goes to
	walk := false
	for _, m := range ms {
		if slot := m.node.slot; slot >= 0 {
			if cur := &s.vals[slot]; cur.kind == kindMissing || m.folds <= cur.folds {
				take |= 1 << slot
			}
		}
		walk = walk || len(m.node.children) > 0
	}
	if take == 0 && !walk {
		return s.skip()
	}
	var v value
	var ok bool
	switch c := s.js.Peek(); {
	case c == '{':
		v.kind = kindObject
		if walk {
			ok = s.object(ms)
		} else {
			ok = s.skip()
		}
	case c == '[':
		v.kind = kindArray
		if need := s.elementConds(take); need != 0 {
			v.hits, ok = s.array(need)
		} else {
			ok = s.skip()
		}
	default:
		v, ok = s.scalar()
	}
	if !ok {
		return false
	}
	for _, m := range ms {
		if slot := m.node.slot; slot >= 0 && take&(1<<slot) != 0 {
			s.vals[slot] = v
			s.vals[slot].folds = m.folds
		}
	}
	return true
}

// elementConds returns the conditions (bit i for conds[i]) that read the elements of an
// array going to the given slots: none unless array filtering is on, and never
// IsNullOrUndefined or IsNotNull, which test only that the key is there.
func (s *scanner) elementConds(slots uint32) uint32 {
	if !s.arrays {
		return 0
	}
	var need uint32
	for i := range s.conds {
		c := &s.conds[i]
		if c.field == fieldRaw && slots&(1<<c.slot) != 0 && c.op != IsNullOrUndefined && c.op != IsNotNull {
			need |= 1 << i
		}
	}
	return need
}

// enter counts an array or object entered and reports whether the nesting is still allowed.
func (s *scanner) enter() bool {
	s.depth++
	return s.depth <= schemas.MaxJSONDepth
}

// object walks an object for the children of ms. When the object repeats a name that leads
// into the trie, only its last occurrence counts, as in the decoders of the languages
// receivers use (Go, JavaScript, Python, .NET): an earlier one and everything below it is
// ignored.
func (s *scanner) object(ms []match) bool {
	if !s.enter() {
		return false
	}
	if s.js.ObjectStart() {
		s.depth--
		return true
	}
	var last map[string]int
	if s.exact {
		var ok bool
		if last, ok = s.lastMembers(ms); !ok {
			return false
		}
	}
	var seen names
	var buf [4]match
	for i := 0; ; i++ {
		key, err := s.js.Key()
		if err != nil {
			return false
		}
		next := appendMatches(buf[:0], ms, key)
		if len(next) > 0 {
			if s.exact {
				if last[string(key)] != i {
					next = next[:0] // a later member of this name replaces this one
				}
			} else if !seen.add(key) {
				s.dup = true
				return false
			}
		}
		if !s.value(next) {
			return false
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

// appendMatches appends to dst the children of ms that a member named key leads to.
func appendMatches(dst, ms []match, key []byte) []match {
	ascii := -1 // whether key is ASCII, once known: 0 or 1
	for _, m := range ms {
		for _, c := range m.node.children {
			if len(key) != len(c.seg) && c.ascii {
				// Folding maps an ASCII name only to names of its length, or ones with
				// multi-byte runes (the Kelvin sign for k).
				if ascii < 0 {
					ascii = 0
					if isASCII(key) {
						ascii = 1
					}
				}
				if ascii == 1 {
					continue
				}
			}
			if string(key) == c.seg {
				dst = append(dst, match{node: c, folds: m.folds})
			} else if equalFoldBytes(key, c.seg) {
				dst = append(dst, match{node: c, folds: m.folds + 1})
			}
		}
	}
	return dst
}

// lastMembers reads ahead to the end of the object the scanner is in (just after its '{')
// and returns, for each member name that leads into the trie, the index of its last
// occurrence. The scanner's position does not move.
func (s *scanner) lastMembers(ms []match) (map[string]int, bool) {
	js := s.js
	last := make(map[string]int)
	var buf [4]match
	for i := 0; ; i++ {
		key, err := js.Key()
		if err != nil {
			return nil, false
		}
		if len(appendMatches(buf[:0], ms, key)) > 0 {
			last[string(key)] = i
		}
		if _, err := js.Skip(s.depth); err != nil {
			return nil, false
		}
		more, err := js.ObjectNext()
		if err != nil {
			return nil, false
		}
		if !more {
			return last, true
		}
	}
}

// names is a set of member names, kept as hashes (without allocating while it is small): a
// collision only makes extract read the event again, exactly.
type names struct {
	few  [8]uint64
	n    int
	many map[uint64]struct{}
}

var nameSeed = maphash.MakeSeed()

// add adds name to the set and reports whether it was new.
func (ns *names) add(name []byte) bool {
	h := maphash.Bytes(nameSeed, name)
	if ns.many == nil {
		for _, k := range ns.few[:ns.n] {
			if k == h {
				return false
			}
		}
		if ns.n < len(ns.few) {
			ns.few[ns.n] = h
			ns.n++
			return true
		}
		ns.many = make(map[uint64]struct{}, 2*len(ns.few))
		for _, k := range ns.few {
			ns.many[k] = struct{}{}
		}
	}
	if _, ok := ns.many[h]; ok {
		return false
	}
	ns.many[h] = struct{}{}
	return true
}

// array tests an array's scalar elements, as it reads them, against the conditions in need
// (bit i for conds[i]), and returns those whose positive form held for some element. Once
// every one has, the rest of the array is only checked and skipped. Each element is
// case-folded at most once, however many conditions read it.
func (s *scanner) array(need uint32) (hits uint32, ok bool) {
	if !s.enter() {
		return 0, false
	}
	if s.js.ArrayStart() {
		s.depth--
		return 0, true
	}
	for {
		if c := s.js.Peek(); hits == need || c == '{' || c == '[' {
			if !s.skip() {
				return 0, false
			}
		} else {
			e, ok := s.scalar()
			if !ok {
				return 0, false
			}
			for m := need &^ hits; m != 0; m &= m - 1 {
				i := bits.TrailingZeros32(m)
				if s.conds[i].holds(&e) {
					hits |= 1 << i
				}
			}
		}
		more, err := s.js.ArrayNext()
		if err != nil {
			return 0, false
		}
		if !more {
			s.depth--
			return hits, true
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
