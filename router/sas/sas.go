package sas

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/egridio/egrid/schemas/clip"
)

// Sentinels that [Verify] wraps with detail; callers branch on them with errors.Is.
var (
	// ErrMalformed means the token cannot be parsed: a missing, repeated or unknown field,
	// bad URL or base64 encoding, or an expiry in no known form.
	ErrMalformed = errors.New("malformed SAS token")
	// ErrExpired means the token is genuine but its expiry has passed.
	ErrExpired = errors.New("SAS token expired")
	// ErrSignature means the signature matches none of the topic's keys.
	ErrSignature = errors.New("SAS token signature does not match the topic's keys")
	// ErrResource means the token is genuine and current but signed for a resource that
	// does not cover the request's path.
	ErrResource = errors.New("SAS token resource does not cover this request")
)

// Prefix is the scheme name of a SAS token in an Authorization header
// ("Authorization: SharedAccessSignature r=...&e=...&s=...").
const Prefix = "SharedAccessSignature"

// Sign returns a SAS token "r=<enc resource>&e=<enc expiry>&s=<enc signature>" for resource,
// valid until expiry, signed with key (standard base64, as [NewKey] makes). The expiry is
// written in RFC 3339 in UTC, to the second (sub-second precision is dropped, so the token
// expires up to a second early). enc is form-style URL encoding.
func Sign(resource string, expiry time.Time, key string) (string, error) {
	k, err := decodeKey(key)
	if err != nil {
		return "", err
	}
	if resource == "" {
		return "", errors.New("signing SAS token: resource is empty; use the topic's URL, e.g. https://host/topics/orders/api/events")
	}
	signed := "r=" + url.QueryEscape(resource) + "&e=" + url.QueryEscape(expiry.UTC().Format(time.RFC3339))
	return signed + "&s=" + url.QueryEscape(signature(k, signed)), nil
}

// ValidateKey reports whether key can sign and verify tokens: non-empty standard base64.
func ValidateKey(key string) error {
	_, err := decodeKey(key)
	return err
}

func decodeKey(key string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		return nil, fmt.Errorf("SAS key is not standard base64 (%v); use the topic's key1 or key2 (standard base64, as NewKey makes)", err)
	}
	if len(k) == 0 {
		return nil, errors.New("SAS key is empty; use the topic's key1 or key2 (standard base64, as NewKey makes)")
	}
	return k, nil
}

// signature is the base64 HMAC-SHA256 of signed keyed with key.
func signature(key []byte, signed string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signed))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks a SAS token, with or without the "SharedAccessSignature " prefix, for a
// request to requestPath (the URL path, e.g. "/topics/orders/api/events") against each of
// keys, at time now. It returns nil when the token is signed with one of keys, has not
// expired and its resource covers requestPath; otherwise an error wrapping one of
// [ErrMalformed], [ErrSignature], [ErrExpired] or [ErrResource], checked in that order. The
// package documentation gives the accepted encodings, expiry forms and resource rules.
func Verify(token, requestPath string, keys []string, now time.Time) error {
	t, err := parse(token)
	if err != nil {
		return err
	}
	if !signatureMatches(t, keys) {
		return fmt.Errorf("%w: sign the token with key1 or key2 of the topic", ErrSignature)
	}
	if !now.Before(t.expiry) {
		return fmt.Errorf("%w at %s (now %s); sign a new token", ErrExpired, t.expiry.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if !covers(t.resourcePath, requestPath) {
		return fmt.Errorf("%w: token path %q does not cover %q; sign the token for the topic's URL", ErrResource, t.resourcePath, requestPath)
	}
	return nil
}

// token is a parsed SAS token.
type token struct {
	signed       string // "r=...&e=..." exactly as in the token: what the signature covers
	sig          []byte // the decoded signature
	resourcePath string // the resource URL's path, cleaned
	expiry       time.Time
}

// parse splits a token into its fields and decodes them, reporting every problem at once.
func parse(raw string) (*token, error) {
	raw = strings.TrimSpace(raw)
	if len(raw) > len(Prefix) && strings.EqualFold(raw[:len(Prefix)], Prefix) && raw[len(Prefix)] == ' ' {
		raw = strings.TrimLeft(raw[len(Prefix):], " ")
	}
	// The signature comes last and covers everything before "&s=".
	t := &token{}
	var encSig string
	if i := strings.LastIndex(raw, "&s="); i >= 0 {
		t.signed, encSig = raw[:i], raw[i+len("&s="):]
	} else if rest, ok := strings.CutPrefix(raw, "s="); ok {
		encSig = rest
	} else {
		return nil, fmt.Errorf("%w: no s= (signature) field; the token reads r=<resource>&e=<expiry>&s=<signature>", ErrMalformed)
	}
	var (
		problems []string
		values   = map[string]string{} // r and e, still encoded
		fields   []string
	)
	if t.signed != "" {
		fields = strings.Split(t.signed, "&")
	}
	for _, f := range fields {
		name, value, ok := strings.Cut(f, "=")
		_, seen := values[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("field %q has no '='", clip.N(f, shown)))
		case name != "r" && name != "e":
			problems = append(problems, fmt.Sprintf("unknown field %q before s=; only r and e are signed", clip.N(name, shown)))
		case seen:
			problems = append(problems, fmt.Sprintf("field %s appears twice", name))
		default:
			values[name] = value
		}
	}
	for _, name := range []string{"r", "e"} {
		switch v, ok := values[name]; {
		case !ok:
			problems = append(problems, fmt.Sprintf("no %s= field", name))
		case v == "":
			problems = append(problems, fmt.Sprintf("field %s is empty", name))
		}
	}
	if enc := values["r"]; enc != "" {
		if p, err := resourcePath(enc); err != nil {
			problems = append(problems, err.Error())
		} else {
			t.resourcePath = p
		}
	}
	if enc := values["e"]; enc != "" {
		if e, err := url.QueryUnescape(enc); err != nil {
			problems = append(problems, fmt.Sprintf("expiry is not URL-encoded text (%v)", err))
		} else if t.expiry, err = parseExpiry(e); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if s, err := url.QueryUnescape(encSig); err != nil {
		problems = append(problems, fmt.Sprintf("signature is not URL-encoded text (%v)", err))
	} else if t.sig, err = base64.StdEncoding.DecodeString(s); err != nil || len(t.sig) != sha256.Size {
		problems = append(problems, "signature is not a base64 HMAC-SHA256 (44 characters before URL encoding)")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrMalformed, strings.Join(problems, "; "))
	}
	return t, nil
}

// shown is how many bytes of a token's field an error message repeats, fewer than
// [clip.Default]: a token's text may be a credential pasted in the wrong place (a key sent as a
// field without '='), and an answer or a log line should repeat little of it.
const shown = 32

// resourcePath decodes the r field and returns the path of its URL, cleaned, without a
// trailing slash ("" for the root).
func resourcePath(enc string) (string, error) {
	r, err := url.QueryUnescape(enc)
	if err != nil {
		return "", fmt.Errorf("resource is not URL-encoded text (%v)", err)
	}
	u, err := url.Parse(r)
	if err == nil && u.Scheme == "" && u.Host == "" && !strings.HasPrefix(r, "/") {
		// "host/path" without a scheme, as some clients send: the first segment is the host.
		u, err = url.Parse("//" + r)
	}
	if err != nil {
		return "", fmt.Errorf("resource %q is not an URL; use the topic's URL", clip.N(r, shown))
	}
	if u.Opaque != "" {
		return "", fmt.Errorf("resource %q has no path; use the topic's URL", clip.N(r, shown))
	}
	p := u.Path
	if p == "" {
		return "", nil
	}
	p = path.Clean("/" + p)
	return strings.TrimSuffix(p, "/"), nil
}

// covers reports whether a resource path (from resourcePath) covers requestPath: it is a
// case-insensitive prefix ending at a segment boundary ('/' or ':', as in
// "/topics/orders:publish").
func covers(resource, requestPath string) bool {
	if resource == "" {
		return true
	}
	if len(requestPath) < len(resource) || !strings.EqualFold(requestPath[:len(resource)], resource) {
		return false
	}
	if len(requestPath) == len(resource) {
		return true
	}
	c := requestPath[len(resource)]
	return c == '/' || c == ':'
}

// signatureMatches reports whether t is signed with one of keys. Keys that are not valid
// base64 cannot sign and are skipped. Every key is tried, so the time taken does not say which
// one matched.
func signatureMatches(t *token, keys []string) bool {
	match := 0
	for _, key := range keys {
		k, err := decodeKey(key)
		if err != nil {
			continue
		}
		m := hmac.New(sha256.New, k)
		m.Write([]byte(t.signed))
		match |= subtle.ConstantTimeCompare(m.Sum(nil), t.sig)
	}
	return match == 1
}

// en-US DateTime layouts (C#, Java and .NET's DateTimeOffset). Go's 1-digit fields also accept
// two digits, so one layout covers padded and unpadded minutes and seconds.
var enUSLayouts = []string{
	"1/2/2006 3:4:5 PM",
	"1/2/2006 3:4:5 PM Z07:00", // .NET DateTimeOffset appends " +00:00"
}

// ISO 8601 layouts, tried after a space between date and time became 'T'. Go accepts a
// fractional second after the seconds when parsing, whatever the layout says.
var isoLayouts = []string{
	time.RFC3339,               // 2017-06-15T18:20:15Z, +02:00
	"2006-01-02T15:04:05Z0700", // +0200
	"2006-01-02T15:04:05Z07",   // +02
	"2006-01-02T15:04:05",      // no zone: UTC
}

// parseExpiry reads a token's expiry in any of the forms the package documentation lists.
// Forms without a zone are UTC.
func parseExpiry(e string) (time.Time, error) {
	e = strings.TrimSpace(e)
	if e == "" {
		return time.Time{}, errors.New("expiry is empty")
	}
	if isDigits(e) {
		n, err := strconv.ParseInt(e, 10, 64)
		if err != nil || n > 1<<40 { // beyond year 36000: not a real expiry
			return time.Time{}, fmt.Errorf("expiry %q is out of range for Unix seconds", clip.N(e, shown))
		}
		return time.Unix(n, 0).UTC(), nil
	}
	layouts := isoLayouts
	if strings.Contains(e, "/") {
		layouts = enUSLayouts
		e = strings.ToUpper(e) // "pm" as well as "PM"
	} else if len(e) > 10 && e[10] == ' ' {
		e = e[:10] + "T" + e[11:] // Python's str(datetime)
	}
	for _, layout := range layouts {
		if t, err := time.Parse(layout, e); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("expiry %q is not a date; use ISO 8601 (2017-06-15T18:20:15Z), en-US (6/15/2017 6:20:15 PM) or Unix seconds", clip.N(e, shown))
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// KeyMatches reports whether given equals one of keys, in time that depends on neither the
// keys' contents nor their lengths (both sides are hashed before the constant-time compare).
// An empty given or an empty key never matches.
func KeyMatches(given string, keys []string) bool {
	if given == "" {
		return false
	}
	g := sha256.Sum256([]byte(given))
	match := 0
	for _, key := range keys {
		if key == "" {
			continue // an unset key must not match anything
		}
		k := sha256.Sum256([]byte(key))
		match |= subtle.ConstantTimeCompare(g[:], k[:])
	}
	return match == 1
}

// NewKey returns a new random key: 32 bytes from crypto/rand in standard base64 (44
// characters), the shape of an Azure topic key.
func NewKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a SAS key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}
