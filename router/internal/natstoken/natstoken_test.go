package natstoken

import (
	"errors"
	"strings"
	"testing"
)

// Every byte survives Escape and Unescape, and the token holds only letters, digits, '-' and
// '_'.
func TestEscapeRoundTrips(t *testing.T) {
	var all []byte
	for c := range 256 {
		all = append(all, byte(c))
	}
	for _, name := range []string{"", "orders", "Orders-1", "a.b*c>d", "a_b", "ünï", string(all)} {
		tok := Escape(name)
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; !plain(c) && c != '_' {
				t.Fatalf("Escape(%q) = %q holds %q", name, tok, c)
			}
		}
		if got, err := Unescape(tok); err != nil || got != name {
			t.Errorf("Unescape(Escape(%q)) = %q, %v", name, got, err)
		}
	}
}

// A token Escape does not write is refused, quoted, rather than decoded to some name: cut
// short, bad hex digits, and the tokens that would alias another name's ("a_62" for "ab",
// lower-case hex, a literal byte that Escape escapes).
func TestUnescapeRefusesTokensEscapeDoesNotWrite(t *testing.T) {
	for _, tok := range []string{"_", "a_", "a_4", "a_zz", "a_4g", "a_2e_", "a_62", "_2D", "a_2f", "a=b", "a/b", "a.b", "a_b"} {
		got, err := Unescape(tok)
		if !errors.Is(err, ErrBadToken) {
			t.Errorf("Unescape(%q) = %q, %v; want ErrBadToken", tok, got, err)
			continue
		}
		if want := `"` + tok + `"`; !strings.Contains(err.Error(), want) {
			t.Errorf("Unescape(%q) error %q does not quote the token", tok, err)
		}
	}
}
