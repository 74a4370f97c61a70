package clip_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/egridio/egrid/schemas/clip"
)

func TestN(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{name: "empty", s: "", n: 4, want: ""},
		{name: "shorter than the bound", s: "abc", n: 4, want: "abc"},
		{name: "exactly the bound", s: "abcd", n: 4, want: "abcd"},
		{name: "one byte over", s: "abcde", n: 4, want: "abcd..."},
		{name: "bound zero", s: "a", n: 0, want: "..."},
		{name: "negative bound", s: "a", n: -3, want: "..."},
		{name: "two-byte character whole at the bound", s: "abé!", n: 4, want: "abé..."},
		{name: "two-byte character across the bound", s: "abcé", n: 4, want: "abc..."},
		{name: "three-byte character across the bound by one", s: "ab€", n: 4, want: "ab..."},
		{name: "three-byte character across the bound by two", s: "a€", n: 2, want: "a..."},
		{name: "four-byte character across the bound", s: "a😀b", n: 4, want: "a..."},
		{name: "four-byte character whole at the bound", s: "a😀b", n: 5, want: "a😀..."},
		{name: "only multibyte characters", s: "ééé", n: 3, want: "é..."},
		{name: "bytes that are not UTF-8 are cut where the bound is", s: "\x80\x80\x80\x80\x80", n: 3, want: "\x80\x80\x80..."},
		{name: "a lead byte without its continuation is cut as a byte", s: "ab\xe2cd", n: 3, want: "ab\xe2..."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := clip.N(tt.s, tt.n); got != tt.want {
				t.Errorf("N(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
			}
		})
	}
}

// TestNNeverSplitsACharacter cuts text of 1- to 4-byte characters at every bound: the kept part
// is valid UTF-8, a prefix of the text, at most the bound long, and at most 3 bytes shorter.
func TestNNeverSplitsACharacter(t *testing.T) {
	s := strings.Repeat("aé€😀", 8)
	for n := 0; n < len(s); n++ {
		got := clip.N(s, n)
		kept, ok := strings.CutSuffix(got, clip.Marker)
		if !ok || !utf8.ValidString(kept) || !strings.HasPrefix(s, kept) || len(kept) > n || len(kept) < n-3 {
			t.Fatalf("N(s, %d) = %q: want a valid prefix of %d to %d bytes and %q", n, got, max(n-3, 0), n, clip.Marker)
		}
	}
}

func TestString(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	if got := clip.String(long); got != long[:clip.Default]+clip.Marker {
		t.Errorf("String(1 MB) is %d bytes, want the first %d and %q", len(got), clip.Default, clip.Marker)
	}
	at := strings.Repeat("x", clip.Default)
	if got := clip.String(at); got != at {
		t.Errorf("String(%d bytes) = %q, want it unchanged", clip.Default, got)
	}
}

func TestQuote(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    string
		want string
	}{
		{name: "plain", s: "topic-1", want: `"topic-1"`},
		{name: "control characters are escaped", s: "a\nb\tc\x00d\x1b", want: `"a\nb\tc\x00d\x1b"`},
		{name: "quotes and backslashes are escaped", s: `say "hi" \o/`, want: `"say \"hi\" \\o/"`},
		{name: "bytes that are not UTF-8 are escaped", s: "a\xffb", want: `"a\xffb"`},
		{name: "printable characters are kept", s: "é€", want: `"é€"`},
		{name: "a long value is shortened inside the quotes", s: strings.Repeat("\n", 200), want: `"` + strings.Repeat(`\n`, clip.Default) + `..."`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := clip.Quote(tt.s); got != tt.want {
				t.Errorf("Quote(%q) = %s, want %s", tt.s, got, tt.want)
			}
			if got, want := clip.Quote(tt.s), fmt.Sprintf("%q", clip.String(tt.s)); got != want {
				t.Errorf("Quote(%q) = %s, but %%q of String renders %s", tt.s, got, want)
			}
		})
	}
	if got, want := clip.QuoteN("ab€", 4), `"ab..."`; got != want {
		t.Errorf("QuoteN(ab€, 4) = %s, want %s", got, want)
	}
}

func TestEscape(t *testing.T) {
	for _, tt := range []struct {
		name, s, keep, want string
	}{
		{name: "plain text is kept", s: `503 Service Unavailable {"a":"é€"}`, want: `503 Service Unavailable {"a":"é€"}`},
		{name: "OSC title and clear screen", s: "503 \x1b]0;PWNED\x07\x1b[2J", want: `503 \x1b]0;PWNED\a\x1b[2J`},
		{name: "DEL and C1 (CSI as one character)", s: "a\x7fb\u009b2Jc\u0085", want: `a\x7fb\u009b2Jc\u0085`},
		{name: "bytes that are not UTF-8", s: "a\xffb\xe2", want: `a\xffb\xe2`},
		{name: "newline and tab escaped unless kept", s: "a\nb\tc\r", want: `a\nb\tc\r`},
		{name: "kept newline and tab", s: "a\nb\tc\r", keep: "\n\t", want: "a\nb\tc\\r"},
		{name: "a backslash is kept", s: `a\x1b`, want: `a\x1b`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := clip.Escape(tt.s, tt.keep); got != tt.want {
				t.Errorf("Escape(%q, %q) = %q, want %q", tt.s, tt.keep, got, tt.want)
			}
		})
	}
}
