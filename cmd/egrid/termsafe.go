package main

import "github.com/egridio/egrid/schemas/clip"

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
