package httpapi

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
)

// checkStrictJSON reports what encoding/json would take from a definition's body without a
// word, changing what the client sent: bytes that are not UTF-8 and \u escapes of half a
// surrogate pair, both read as U+FFFD (a filter value or label would be stored as other text
// than was sent), and a member sent twice in one object — names compared ignoring case, as
// encoding/json matches them —, of which it keeps the last (a second "properties" dropped
// the first whole). A publish refuses the same (package schemas). The problem names the
// member's path and says what to send; nil means the body has none of them. A body that is
// not JSON at all is left to encoding/json, whose error says so. what names the body in the
// problem ("the definition", "the lock token list").
//
// A settle body is checked too: encoding/json would put U+FFFD in a lock token sent as bytes
// that are not UTF-8, and the answer would repeat, as failed, a token the client never sent.
//
// The check takes time and memory in proportion to the body whatever its shape (a settle body
// is read with a topic key only, and a definition of at most 1 MB is not trusted either):
// member names are looked up, not compared with every earlier one (foldSet), and a member's
// path is written out only for a problem (strictWalk).
func checkStrictJSON(body []byte, what string) error {
	if !utf8.Valid(body) {
		n := 0
		for n < len(body) {
			r, size := utf8.DecodeRune(body[n:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			n += size
		}
		return fmt.Errorf("the body is not valid UTF-8 (byte %d is not): send %s as UTF-8 JSON", n, what)
	}
	w := strictWalk{body: body, sc: schemas.NewJSONScanner(body, false)}
	w.sc.SkipSpace()
	problem, err := w.value(0)
	if err != nil {
		return nil // not JSON: encoding/json reports it
	}
	return problem
}

// strictWalk is checkStrictJSON's walk over a body. It keeps the path to the value it is at
// as a stack of segments and joins them only for a problem: a path string built for every
// member and element would copy its parent's path each time, and one 1 MB body of an array
// of 400 000 elements under a 100 KB member name would copy 40 GB.
type strictWalk struct {
	body []byte
	sc   schemas.JSONScanner
	path []pathSegment
}

// pathSegment is one step of a strictWalk's path: a member name, or an array index when
// index is not negative.
type pathSegment struct {
	name  string
	index int
}

// pathString returns the walk's path as a problem names it: member names joined by dots,
// array indexes in brackets ("properties.filter.advancedFilters[0].values[1]"). Each name
// step drops one leading dot of the path so far, as the path has always been written
// (strings.TrimPrefix(path+"."+name, ".")), in one pass however deep the path.
func (w *strictWalk) pathString() string {
	var b []byte
	start := 0 // b[start:] is the path so far
	for _, seg := range w.path {
		if seg.index >= 0 {
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(seg.index), 10)
			b = append(b, ']')
			continue
		}
		b = append(b, '.')
		b = append(b, seg.name...)
		if b[start] == '.' {
			start++
		}
	}
	return string(b[start:])
}

// memberPath returns the path of the member name of the object the walk is in.
func (w *strictWalk) memberPath(name string) string {
	w.path = append(w.path, pathSegment{name: name, index: -1})
	path := w.pathString()
	w.path = w.path[:len(w.path)-1]
	return path
}

// value walks one value at the scanner's position (whitespace skipped), the walk's path
// naming it, and returns the first problem checkStrictJSON looks for, or a syntax error.
func (w *strictWalk) value(depth int) (problem, err error) {
	sc := &w.sc
	switch sc.Peek() {
	case '{':
		if depth >= schemas.MaxJSONDepth {
			_, err := sc.Skip(depth) // reports the depth
			return nil, err
		}
		if sc.ObjectStart() {
			return nil, nil
		}
		var seen foldSet
		for {
			start := sc.Pos()
			key, err := sc.Key()
			if err != nil {
				return nil, err
			}
			if esc := schemas.LoneSurrogate(w.body[start:sc.Pos()]); esc != "" {
				return loneSurrogateProblem(clip.String(w.pathString()), esc), nil
			}
			name := string(key)
			if s, dup := seen.add(name); dup {
				if s == name {
					return fmt.Errorf("%s: the member is sent twice in one object: send it once", clip.Quote(w.memberPath(name))), nil
				}
				return fmt.Errorf("%s: the member is sent twice in one object, as %s and %s (names match ignoring case): send it once", clip.Quote(w.memberPath(s)), clip.Quote(s), clip.Quote(name)), nil
			}
			w.path = append(w.path, pathSegment{name: name, index: -1})
			problem, err := w.value(depth + 1)
			w.path = w.path[:len(w.path)-1]
			if problem != nil || err != nil {
				return problem, err
			}
			more, err := sc.ObjectNext()
			if err != nil || !more {
				return nil, err
			}
		}
	case '[':
		if depth >= schemas.MaxJSONDepth {
			_, err := sc.Skip(depth)
			return nil, err
		}
		if sc.ArrayStart() {
			return nil, nil
		}
		w.path = append(w.path, pathSegment{})
		defer func() { w.path = w.path[:len(w.path)-1] }()
		for i := 0; ; i++ {
			w.path[len(w.path)-1].index = i
			if problem, err := w.value(depth + 1); problem != nil || err != nil {
				return problem, err
			}
			more, err := sc.ArrayNext()
			if err != nil || !more {
				return nil, err
			}
		}
	case '"':
		tok, _, err := sc.String()
		if err != nil {
			return nil, err
		}
		sc.SkipSpace()
		if esc := schemas.LoneSurrogate(tok); esc != "" {
			return loneSurrogateProblem(clip.String(w.pathString()), esc), nil
		}
		return nil, nil
	}
	_, err = sc.Skip(depth)
	sc.SkipSpace()
	return nil, err
}

// foldSet holds the member names of one object, to find a name sent twice, names compared
// ignoring case as strings.EqualFold compares them. A list is enough for the few members of
// a usual object; past maxListedNames it becomes a map keyed by the names' case folds, or one
// object of 100 000 members would cost 5·10⁹ comparisons (seconds of CPU) to check. The map
// holds the name as sent, so a problem names the earlier of the two whichever phase found it.
type foldSet struct {
	list []string
	set  map[string]string // fold → name
	buf  []byte
}

// maxListedNames is how many names a foldSet compares one by one before it uses a map.
const maxListedNames = 32

// add adds name and, when a name matching it ignoring case was added before, returns that
// name and true instead.
func (s *foldSet) add(name string) (earlier string, seen bool) {
	if s.set != nil {
		s.buf = appendFold(s.buf[:0], name)
		if earlier, seen = s.set[string(s.buf)]; !seen {
			s.set[string(s.buf)] = name
		}
		return earlier, seen
	}
	for _, e := range s.list {
		if strings.EqualFold(e, name) {
			return e, true
		}
	}
	s.list = append(s.list, name)
	if len(s.list) > maxListedNames {
		s.set = make(map[string]string, 4*len(s.list))
		for _, e := range s.list {
			s.buf = appendFold(s.buf[:0], e)
			s.set[string(s.buf)] = e
		}
		s.list = nil
	}
	return "", false
}

// appendFold appends to dst the case fold of s: each character replaced by the least of the
// characters unicode.SimpleFold cycles through from it, so two names have the same fold
// exactly when strings.EqualFold matches them ("K", "k" and the Kelvin sign all fold to "K").
func appendFold(dst []byte, s string) []byte {
	for _, r := range s {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			dst = append(dst, byte(r))
			continue
		}
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		dst = utf8.AppendRune(dst, least)
	}
	return dst
}

// loneSurrogateProblem is the problem of a member name or value at path holding the lone
// surrogate escape esc.
func loneSurrogateProblem(path, esc string) error {
	return fmt.Errorf("%q holds the escape %s, half of a UTF-16 surrogate pair without its other half, which is not a character: write a character outside the Basic Multilingual Plane as a surrogate pair such as \"\\ud83d\\ude00\", or as UTF-8", path, esc)
}
