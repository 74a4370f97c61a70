package router

import (
	"strings"
	"testing"
)

// TestExcerptEscapesControls: the excerpt of what a destination answered, which `egrid
// explain` prints, shows control characters escaped and stays within its bound.
func TestExcerptEscapesControls(t *testing.T) {
	got := excerpt("https://hook.example/x?code=s3cret answered 503 \x1b]0;PWNED\x07\x1b[2J\u009b2J")
	if strings.ContainsAny(got, "\x1b\x07\u009b") || strings.Contains(got, "s3cret") || !strings.Contains(got, `\x1b]0;PWNED\a\x1b[2J\u009b2J`) {
		t.Errorf("excerpt = %q; want the controls escaped and no query string", got)
	}
	long := excerpt(strings.Repeat("\x1b", 4*maxResponseExcerpt))
	if strings.Contains(long, "\x1b") || len(long) > maxResponseExcerpt+len("...") {
		t.Errorf("excerpt of escapes is %d bytes (%.40q...); want escaped and at most %d", len(long), long, maxResponseExcerpt+3)
	}
}
