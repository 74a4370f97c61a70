// Package clip shortens untrusted text before an error message or a log line repeats it: a
// value a client or a config file sent may be a megabyte long, and an answer that quotes it in
// full repeats the megabyte. Every message of egrid that quotes such a value passes it through
// [String] or [Quote] first, so a shortened value looks the same everywhere: its first
// [Default] bytes, never ending inside a UTF-8 sequence, then [Marker]. Text that a terminal
// may show unquoted (an excerpt of an endpoint's answer, a table cell) passes through [Escape],
// so its control characters are shown, not obeyed.
//
// clip imports only the standard library, and any package of egrid may import it.
package clip

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Default is how many bytes of a value a message repeats unless its caller has a reason for
// another bound: enough to recognise a name, an URL's host and path or a date, small enough
// that twenty problems in one answer stay a few kilobytes.
const Default = 128

// Marker ends a shortened value, so a reader can tell the value went on.
const Marker = "..."

// String returns s shortened to [Default] bytes, as [N] does.
func String(s string) string { return N(s, Default) }

// N returns s when it is at most n bytes long; otherwise its longest prefix of at most n bytes
// that does not end inside a valid UTF-8 sequence, followed by [Marker]. Bytes that are not
// UTF-8 are kept as they are (a message quotes them with %q, which escapes them). A negative n
// counts as 0.
func N(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	// Back up to the first byte of the character s[cut-1] belongs to, if that character is
	// whole only past cut (at most utf8.UTFMax-1 bytes back).
	for i := cut - 1; i >= 0 && i >= cut-(utf8.UTFMax-1); i-- {
		if utf8.RuneStart(s[i]) {
			if r, size := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || size > 1 {
				if i+size > cut {
					cut = i
				}
			}
			break
		}
	}
	return s[:cut] + Marker
}

// Quote returns [String] of s as a Go double-quoted string, as the %q verb renders it:
// control characters, quotes and bytes that are not UTF-8 are escaped, so a message stays on
// one line and shows what was sent.
func Quote(s string) string { return strconv.Quote(String(s)) }

// QuoteN returns [N] of s and n as a Go double-quoted string, as [Quote] does.
func QuoteN(s string, n int) string { return strconv.Quote(N(s, n)) }

// Escape returns s with its control characters (C0 but those in keep, DEL and C1, U+0080 to
// U+009F) and its bytes that are not UTF-8 escaped as the %q verb escapes them (\x1b, \a,
// \u0085, \xff), and everything else as it is. Text from outside (what an endpoint answered,
// names and keys read from a bucket) that a terminal shows unquoted can then neither move the
// cursor, clear the screen, retitle the window nor set the clipboard, and stays readable.
// keep holds the controls a multi-line field may have, such as "\n\t".
func Escape(s, keep string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafe(r, size) && !strings.ContainsRune(keep, r) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case !unsafe(r, size) || strings.ContainsRune(keep, r):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError:
			q := strconv.Quote(s[i : i+1])
			b.WriteString(q[1 : len(q)-1])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// unsafe reports whether the character r, size bytes of UTF-8 (a size-1 [utf8.RuneError] being
// a byte that is not UTF-8), is one [Escape] escapes.
func unsafe(r rune, size int) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || (r == utf8.RuneError && size == 1)
}
