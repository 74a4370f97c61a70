package filter

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Case-insensitive comparison uses Unicode simple case folding, the same equivalence as
// strings.EqualFold: two runes are equal ignoring case when they are in one SimpleFold orbit
// (so "K", "k" and the Kelvin sign are all equal). Prefix and suffix tests walk rune by rune
// without allocating; substring search folds both sides to a canonical form once and then uses
// strings.Contains, so it stays linear on long values.

// foldRune maps r to a canonical member of its case-folding orbit: the lower-case ASCII letter
// when the orbit has one, else the smallest rune of the orbit.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	if r < foldTableSize {
		return rune(foldTable[r])
	}
	return foldOrbit(r)
}

// foldTableSize bounds the runes whose canonical form is looked up rather than found by
// walking the orbit: Latin, Greek, Cyrillic, Armenian, Hebrew and Arabic, the scripts of most
// text that is not ASCII. A rune's canonical form is never above the rune, so it fits.
const foldTableSize = 0x800

// foldTable holds [foldOrbit] of every rune below [foldTableSize], computed once: walking an
// orbit with unicode.SimpleFold costs tens of nanoseconds a rune, which a long value of such
// runes multiplies.
var foldTable = func() (t [foldTableSize]uint16) {
	for r := range rune(foldTableSize) {
		t[r] = uint16(foldOrbit(r))
	}
	return t
}()

// foldOrbit is [foldRune] computed by walking r's case-folding orbit.
func foldOrbit(r rune) rune {
	m := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		m = min(m, f)
	}
	if 'A' <= m && m <= 'Z' {
		m += 'a' - 'A'
	}
	return m
}

// foldString returns s with every rune replaced by [foldRune]; s itself when nothing changes.
func foldString(s string) string {
	i := 0
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				break
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || foldRune(r) != r {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			b.WriteByte(lowerASCII(c))
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(foldRune(r))
		i += n
	}
	return b.String()
}

// appendFold appends s with every rune replaced by [foldRune] to dst: [foldString] without
// an allocation when dst has room.
func appendFold(dst []byte, s string) []byte {
	for _, r := range s {
		dst = utf8.AppendRune(dst, foldRune(r))
	}
	return dst
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// hasPrefixFold reports whether s begins with prefix, ignoring case.
func hasPrefixFold(s, prefix string) bool {
	for prefix != "" {
		if s == "" {
			return false
		}
		if s[0] < utf8.RuneSelf && prefix[0] < utf8.RuneSelf {
			if lowerASCII(s[0]) != lowerASCII(prefix[0]) {
				return false
			}
			s, prefix = s[1:], prefix[1:]
			continue
		}
		r, n := utf8.DecodeRuneInString(s)
		t, m := utf8.DecodeRuneInString(prefix)
		if r != t && foldRune(r) != foldRune(t) {
			return false
		}
		s, prefix = s[n:], prefix[m:]
	}
	return true
}

// hasSuffixFold reports whether s ends with suffix, ignoring case.
func hasSuffixFold(s, suffix string) bool {
	for suffix != "" {
		if s == "" {
			return false
		}
		a, b := s[len(s)-1], suffix[len(suffix)-1]
		if a < utf8.RuneSelf && b < utf8.RuneSelf {
			if lowerASCII(a) != lowerASCII(b) {
				return false
			}
			s, suffix = s[:len(s)-1], suffix[:len(suffix)-1]
			continue
		}
		r, n := utf8.DecodeLastRuneInString(s)
		t, m := utf8.DecodeLastRuneInString(suffix)
		if r != t && foldRune(r) != foldRune(t) {
			return false
		}
		s, suffix = s[:len(s)-n], suffix[:len(suffix)-m]
	}
	return true
}
