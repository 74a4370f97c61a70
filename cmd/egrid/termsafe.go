package main

import (
	"unicode/utf8"

	"github.com/egridio/egrid/schemas/clip"
)

// termSafe is s as the CLI prints it on one line: its control characters (C0, DEL, C1) and
// bytes that are not UTF-8 escaped as %q escapes them, everything else as it is. What the CLI
// prints comes from the server, and much of that from others (an endpoint's answer, a
// publisher's event, names and keys read from a bucket): escaped, text such as
// "\x1b]0;title\a", "\x1b[2J" or an OSC 52 clipboard write is shown, not obeyed by the
// terminal. Every table cell and note, error and field printed from the server passes
// through termSafe or termSafeText.
func termSafe(s string) string { return clip.Escape(s, "") }

// termSafeText is [termSafe] for text that may run over several lines (an error with its
// details, an event's JSON, a request body): newlines and tabs are kept.
func termSafeText(s string) string { return clip.Escape(s, "\n\t") }

// termSafeJSON returns the JSON text js with its C1 control characters (U+0080–U+009F, such
// as U+009B, CSI as one character) written as \u0080–\u009f, DEL as \u007f, and each byte
// that is not UTF-8 as \ufffd. encoding/json escapes the C0 controls but writes C1 and DEL as
// they are, and passes JSON it was given (json.RawMessage: an event's data, an object as the
// server answered it) on as it came, bytes that are not UTF-8 included (a lone 0x9b is CSI to
// a terminal reading Latin-1); what -o json prints comes from the server, and much of that
// from others (a publisher's event id or subject), so unescaped a terminal would obey it (see
// termSafe). In JSON such a character or byte can only be in a string, where the escape
// stands for the same character, or for the U+FFFD encoding/json decodes a byte that is not
// UTF-8 to: the text decodes to the same values, and is UTF-8 as JSON must be.
func termSafeJSON(js []byte) []byte {
	unsafe := func(i int) (rune, int, bool) {
		if js[i] < utf8.RuneSelf {
			return rune(js[i]), 1, js[i] == 0x7f
		}
		r, size := utf8.DecodeRune(js[i:])
		return r, size, r <= 0x9f || r == utf8.RuneError && size == 1
	}
	i := 0
	for i < len(js) {
		_, size, bad := unsafe(i)
		if bad {
			break
		}
		i += size
	}
	if i == len(js) {
		return js
	}
	const hex = "0123456789abcdef"
	out := make([]byte, 0, len(js)+64)
	out = append(out, js[:i]...)
	for i < len(js) {
		r, size, bad := unsafe(i)
		switch {
		case !bad:
			out = append(out, js[i:i+size]...)
		case r == utf8.RuneError:
			out = append(out, `\ufffd`...)
		default:
			out = append(out, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
		}
		i += size
	}
	return out
}
