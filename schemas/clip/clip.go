// Package clip shortens untrusted text before an error message or a log line repeats it: a
// value a client or a config file sent may be a megabyte long, and an answer that quotes it in
// full repeats the megabyte. Every message of egrid that quotes such a value passes it through
// [String] or [Quote] first, so a shortened value looks the same everywhere: its first
// [Default] bytes, never ending inside a UTF-8 sequence, then [Marker].
//
// clip imports only the standard library, and any package of egrid may import it.
package clip

import (
	"strconv"
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
