package actors

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
)

// The lock tokens a queue subscription hands out with its received events, and their
// reading when a consumer settles by them.

// A lock token is base64url (no padding) of: a version byte, 8 bytes naming the subscription
// (a hash of topic and subscription names, case-folded), the event's journal sequence number
// and a random 96-bit nonce of the lock. The nonce makes it unguessable and tells one lock of
// an event from the next; the name hash tells another subscription's token (BadToken) from an
// expired one of this subscription (TokenLost).
const (
	tokenVersion = 1
	tagLen       = 8
	nonceLen     = 12
	tokenLen     = 1 + tagLen + 8 + nonceLen
	tokenChars   = (tokenLen*8 + 5) / 6 // its length: base64.RawURLEncoding.EncodedLen(tokenLen)
)

// tokenEncoding reads and writes lock tokens: base64url without padding, strict.
var tokenEncoding = base64.RawURLEncoding.Strict()

func tokenTag(topic, sub string) [tagLen]byte {
	sum := sha256.Sum256([]byte(strings.ToLower(topic) + "\x00" + strings.ToLower(sub)))
	var tag [tagLen]byte
	copy(tag[:], sum[:])
	return tag
}

func (q *queue) token(it *qitem) string {
	var b [tokenLen]byte
	b[0] = tokenVersion
	copy(b[1:], q.tag[:])
	binary.BigEndian.PutUint64(b[1+tagLen:], it.seq)
	copy(b[1+tagLen+8:], it.nonce[:])
	return tokenEncoding.EncodeToString(b[:])
}

func malformedToken(tok string) *FailedToken {
	return &FailedToken{LockToken: tok, Code: TokenBad, Message: "The lock token is malformed: pass a lockToken exactly as receive returned it."}
}

// lookup finds the locked event of tok, or says why it cannot be settled.
func (q *queue) lookup(tok string) (*qitem, *FailedToken) {
	// The length first: a token is the client's text, of any length, and Decode panics on
	// input that decodes to more than b holds.
	var b [tokenLen]byte
	if len(tok) != tokenChars {
		return nil, malformedToken(tok)
	}
	// Strict: the last character's two bits beyond the token must be zero, so that only the
	// string receive returned names the lock (a lenient decode took three others for it).
	// Decode also skips CR and LF: the token must be the re-encoding of what it decodes to.
	if n, err := tokenEncoding.Decode(b[:], []byte(tok)); err != nil || n != tokenLen || b[0] != tokenVersion || tokenEncoding.EncodeToString(b[:]) != tok {
		return nil, malformedToken(tok)
	}
	if !bytes.Equal(b[1:1+tagLen], q.tag[:]) {
		return nil, &FailedToken{LockToken: tok, Code: TokenBad, Message: "The lock token belongs to another event subscription: settle it on the subscription it was received from."}
	}
	it := q.items[binary.BigEndian.Uint64(b[1+tagLen:])]
	if it == nil || it.state != qLocked || !bytes.Equal(it.nonce[:], b[1+tagLen+8:]) {
		return nil, &FailedToken{LockToken: tok, Code: TokenLost, Message: "Token has expired."}
	}
	return it, nil
}
