// Package natstoken escapes topic, subscription and dead-letter names into NATS tokens: the
// parts of stream names, subjects and key-value keys between dots. The JetStream store
// (router/store/jetstream) names its streams, subjects and keys with it, and the cluster
// (router/cluster) its subscription leases, so the two spell a name alike.
//
// natstoken imports no egrid package, so both, which import nothing of each other, use it.
package natstoken

import (
	"errors"
	"fmt"
	"strings"
)

const hex = "0123456789ABCDEF"

// plain reports whether c stays as it is in a token: letters, digits and '-'.
func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-'
}

// Escape returns name as a token: letters, digits and '-' stay, every other byte becomes '_'
// and two upper-case hex digits. Distinct names give distinct tokens.
func Escape(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// ErrBadToken is wrapped by Unescape's error for a token Escape does not write.
var ErrBadToken = errors.New("not a token egrid writes")

// Unescape returns the name tok is the token of (Escape(name) == tok). A token Escape does
// not write fails with an error wrapping [ErrBadToken] that quotes tok and says what is wrong
// in it: an escape cut short or with other than two upper-case hex digits, a byte that is
// escaped although it stays as it is ("_61" for "a"), or one that is not although it is
// escaped ("." or "_"). So no token other than a name's own decodes to the name: a key that
// something other than egrid wrote never aliases the key of another name.
func Unescape(tok string) (string, error) {
	var b strings.Builder
	b.Grow(len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c != '_' {
			if !plain(c) {
				return "", fmt.Errorf("%w: %q has %q at byte %d, which is escaped in a name's token", ErrBadToken, tok, c, i)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(tok) {
			return "", fmt.Errorf("%w: %q ends in an escape cut short", ErrBadToken, tok)
		}
		hi, lo := strings.IndexByte(hex, tok[i+1]), strings.IndexByte(hex, tok[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: %q has the escape %q at byte %d, not '_' and two upper-case hex digits", ErrBadToken, tok, tok[i:i+3], i)
		}
		v := byte(hi<<4 | lo)
		if plain(v) {
			return "", fmt.Errorf("%w: %q escapes %q at byte %d, which stays as it is in a name's token", ErrBadToken, tok, v, i)
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}
