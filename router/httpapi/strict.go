package httpapi

import (
	"fmt"
	"strings"
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
	problem, err := w.value(0, "")
	if err != nil {
		return nil // not JSON: encoding/json reports it
	}
	return problem
}

// strictWalk is checkStrictJSON's walk over a body.
type strictWalk struct {
	body []byte
	sc   schemas.JSONScanner
}

// value walks one value at the scanner's position (whitespace skipped), path naming it, and
// returns the first problem checkStrictJSON looks for, or a syntax error.
func (w *strictWalk) value(depth int, path string) (problem, err error) {
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
		var seen []string
		for {
			start := sc.Pos()
			key, err := sc.Key()
			if err != nil {
				return nil, err
			}
			name := string(key)
			member := strings.TrimPrefix(path+"."+name, ".")
			if esc := schemas.LoneSurrogate(w.body[start:sc.Pos()]); esc != "" {
				return loneSurrogateProblem(clip.String(path), esc), nil
			}
			for _, s := range seen {
				if strings.EqualFold(s, name) {
					if s == name {
						return fmt.Errorf("%s: the member is sent twice in one object: send it once", clip.Quote(member)), nil
					}
					return fmt.Errorf("%s: the member is sent twice in one object, as %s and %s (names match ignoring case): send it once", clip.Quote(strings.TrimPrefix(path+"."+s, ".")), clip.Quote(s), clip.Quote(name)), nil
				}
			}
			seen = append(seen, name)
			if problem, err := w.value(depth+1, member); problem != nil || err != nil {
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
		for i := 0; ; i++ {
			if problem, err := w.value(depth+1, fmt.Sprintf("%s[%d]", path, i)); problem != nil || err != nil {
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
			return loneSurrogateProblem(clip.String(path), esc), nil
		}
		return nil, nil
	}
	_, err = sc.Skip(depth)
	sc.SkipSpace()
	return nil, err
}

// loneSurrogateProblem is the problem of a member name or value at path holding the lone
// surrogate escape esc.
func loneSurrogateProblem(path, esc string) error {
	return fmt.Errorf("%q holds the escape %s, half of a UTF-16 surrogate pair without its other half, which is not a character: write a character outside the Basic Multilingual Plane as a surrogate pair such as \"\\ud83d\\ude00\", or as UTF-8", path, esc)
}
