package sas_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/egridio/egrid/router/sas"
)

var (
	key1 = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	key2 = base64.StdEncoding.EncodeToString([]byte("ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvu"))
	// keyPy is the key of the Python vector below: the bytes 0..31.
	keyPy = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	keys  = []string{key1, key2}
)

const ordersPath = "/topics/orders/api/events"

// csharpEncode is .NET's HttpUtility.UrlEncode, which the C# sample and SDK use: form style,
// '+' for a space, lower-case hex, and "-_.!*()" left as they are.
func csharpEncode(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("-_.!*()", c) >= 0:
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02x", c)
		}
	}
	return b.String()
}

// pythonQuote is urllib.parse.quote with the Python SDK's safe set "~()*!.'": %20 for a
// space, upper-case hex, '/' encoded.
func pythonQuote(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("_.-~()*!'", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// handToken signs a token by hand the way the official samples do, from the r and e fields as
// they will appear in the token, encoding the signature with enc.
func handToken(encResource, encExpiry, key string, enc func(string) string) string {
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		panic(err)
	}
	unsigned := "r=" + encResource + "&e=" + encExpiry
	m := hmac.New(sha256.New, k)
	m.Write([]byte(unsigned))
	return unsigned + "&s=" + enc(base64.StdEncoding.EncodeToString(m.Sum(nil)))
}

func mustSign(t *testing.T, resource string, expiry time.Time, key string) string {
	t.Helper()
	tok, err := sas.Sign(resource, expiry, key)
	if err != nil {
		t.Fatalf("Sign(%q, %v): %v", resource, expiry, err)
	}
	return tok
}

// requireErr asserts err wraps want (nil meaning success).
func requireErr(t *testing.T, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("Verify = %v; want nil", err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("Verify = %v; want an error wrapping %q", err, want)
	}
}

func TestSignMatchesThePythonSample(t *testing.T) {
	// Computed with the Python sample's algorithm (quote_plus, HMAC-SHA256 over r=&e=, base64,
	// quote_plus) by an independent implementation.
	const want = "r=https%3A%2F%2Fegrid.example%2Ftopics%2Forders%2Fapi%2Fevents&e=2017-06-15T18%3A20%3A15Z&s=BAKU0SKSNe7WqAKk6IoYP49kEOJGOGJsRxD%2FPCDPFqc%3D"
	expiry := time.Date(2017, 6, 15, 20, 20, 15, 0, time.FixedZone("CEST", 2*3600))
	if got := mustSign(t, "https://egrid.example/topics/orders/api/events", expiry, keyPy); got != want {
		t.Fatalf("Sign =\n%s\nwant\n%s", got, want)
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	expiry := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name     string
		resource string
		signKey  string
		path     string
		now      time.Time
		want     error
	}{
		{name: "key1", resource: "https://egrid.example/topics/orders/api/events", signKey: key1, path: ordersPath, now: expiry.Add(-time.Minute)},
		{name: "key2 accepted", resource: "https://egrid.example/topics/orders/api/events", signKey: key2, path: ordersPath, now: expiry.Add(-time.Minute)},
		{name: "one second before expiry", resource: "http://127.0.0.1:8080/topics/orders", signKey: key1, path: ordersPath, now: expiry.Add(-time.Second)},
		{name: "at expiry", resource: "http://127.0.0.1:8080/topics/orders", signKey: key1, path: ordersPath, now: expiry, want: sas.ErrExpired},
		{name: "after expiry", resource: "http://127.0.0.1:8080/topics/orders", signKey: key1, path: ordersPath, now: expiry.Add(time.Hour), want: sas.ErrExpired},
		{name: "wrong key", resource: "https://egrid.example/topics/orders/api/events", signKey: base64.StdEncoding.EncodeToString([]byte("not a topic key")), path: ordersPath, now: expiry.Add(-time.Minute), want: sas.ErrSignature},
		{name: "other topic", resource: "https://egrid.example/topics/orders/api/events", signKey: key1, path: "/topics/billing/api/events", now: expiry.Add(-time.Minute), want: sas.ErrResource},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := mustSign(t, tt.resource, expiry, tt.signKey)
			requireErr(t, sas.Verify(tok, tt.path, keys, tt.now), tt.want)
			requireErr(t, sas.Verify(sas.Prefix+" "+tok, tt.path, keys, tt.now), tt.want)
		})
	}
}

func TestVerifyPrefix(t *testing.T) {
	expiry := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tok := mustSign(t, "https://egrid.example/", expiry, key1)
	for _, raw := range []string{
		tok,
		"SharedAccessSignature " + tok,
		"sharedaccesssignature   " + tok,
		"  " + tok + " ",
	} {
		requireErr(t, sas.Verify(raw, ordersPath, keys, expiry.Add(-time.Hour)), nil)
	}
}

func TestVerifyExpiryFormats(t *testing.T) {
	const resource = "https://egrid.example/topics/orders/api/events?api-version=2018-01-01"
	at := func(h, m, s, ns int) time.Time { return time.Date(2017, 6, 15, h, m, s, ns, time.UTC) }
	tests := []struct {
		name      string
		encode    func(string) string // how the client encodes r, e and s
		expiry    string              // before encoding
		encExpiry string              // when set, e exactly as the client sends it
		want      time.Time
	}{
		{name: "C# sample, en-US", encode: csharpEncode, encExpiry: "6%2f15%2f2017+6%3a20%3a15+PM", want: at(18, 20, 15, 0)},
		{name: "en-US, morning", encode: csharpEncode, expiry: "6/15/2017 9:05:07 AM", want: at(9, 5, 7, 0)},
		{name: "en-US, noon", encode: csharpEncode, expiry: "6/15/2017 12:00:00 PM", want: at(12, 0, 0, 0)},
		{name: "en-US, midnight", encode: csharpEncode, expiry: "6/15/2017 12:00:01 AM", want: at(0, 0, 1, 0)},
		{name: "en-US, lower-case pm", encode: csharpEncode, expiry: "6/15/2017 6:20:15 pm", want: at(18, 20, 15, 0)},
		{name: "Java SDK, unpadded minutes and seconds", encode: url.QueryEscape, expiry: "6/15/2017 6:5:3 PM", want: at(18, 5, 3, 0)},
		{name: ".NET SDK DateTimeOffset, UTC", encode: csharpEncode, expiry: "6/15/2017 6:20:15 PM +00:00", want: at(18, 20, 15, 0)},
		{name: ".NET SDK DateTimeOffset, local offset", encode: csharpEncode, expiry: "6/15/2017 8:20:15 PM +02:00", want: at(18, 20, 15, 0)},
		{name: "RFC 3339, Z", encode: url.QueryEscape, expiry: "2017-06-15T18:20:15Z", want: at(18, 20, 15, 0)},
		{name: "RFC 3339, offset", encode: url.QueryEscape, expiry: "2017-06-15T20:20:15+02:00", want: at(18, 20, 15, 0)},
		{name: "RFC 3339, fractional seconds", encode: url.QueryEscape, expiry: "2017-06-15T18:20:15.5Z", want: at(18, 20, 15, 5e8)},
		{name: "ISO 8601, basic offset", encode: url.QueryEscape, expiry: "2017-06-15T13:20:15-0500", want: at(18, 20, 15, 0)},
		{name: "Python sample, isoformat without zone", encode: url.QueryEscape, expiry: "2017-06-15T18:20:15.123456", want: at(18, 20, 15, 123456000)},
		{name: "Python SDK, str of aware datetime", encode: pythonQuote, expiry: "2017-06-15 18:20:15+00:00", want: at(18, 20, 15, 0)},
		{name: "Python SDK, str of naive datetime", encode: pythonQuote, expiry: "2017-06-15 18:20:15.250000", want: at(18, 20, 15, 25e7)},
		{name: "Unix seconds", encode: url.QueryEscape, expiry: "1497550815", want: at(18, 20, 15, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			encExpiry := tt.encExpiry
			if encExpiry == "" {
				encExpiry = tt.encode(tt.expiry)
			}
			tok := handToken(tt.encode(resource), encExpiry, key2, tt.encode)
			requireErr(t, sas.Verify(tok, ordersPath, keys, tt.want.Add(-time.Nanosecond)), nil)
			requireErr(t, sas.Verify(tok, ordersPath, keys, tt.want), sas.ErrExpired)
		})
	}
}

// The same expiry, encoded with '+' or with %20 for its space, verifies either way: the
// signature covers the text as sent.
func TestVerifyBothSpaceEncodings(t *testing.T) {
	const expiry = "6/15/2017 6:20:15 PM"
	now := time.Date(2017, 6, 15, 18, 0, 0, 0, time.UTC)
	for _, enc := range []string{url.QueryEscape(expiry), url.PathEscape(expiry), csharpEncode(expiry)} {
		tok := handToken(url.QueryEscape("https://egrid.example/"), enc, key1, url.QueryEscape)
		requireErr(t, sas.Verify(tok, ordersPath, keys, now), nil)
	}
}

func TestVerifyKeys(t *testing.T) {
	expiry := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	now := expiry.Add(-time.Hour)
	tok1 := mustSign(t, "https://egrid.example/", expiry, key1)
	tests := []struct {
		name  string
		token string
		keys  []string
		want  error
	}{
		{name: "key1 of two", token: tok1, keys: []string{key1, key2}},
		{name: "key2 slot holds the signing key", token: tok1, keys: []string{key2, key1}},
		{name: "unusable key skipped", token: tok1, keys: []string{"not base64!", key1}},
		{name: "neither key", token: tok1, keys: []string{key2}, want: sas.ErrSignature},
		{name: "no keys", token: tok1, keys: nil, want: sas.ErrSignature},
		{name: "empty key", token: tok1, keys: []string{""}, want: sas.ErrSignature},
		{name: "expiry changed after signing", token: strings.Replace(tok1, "2030", "2031", 1), keys: keys, want: sas.ErrSignature},
		{name: "resource changed after signing", token: strings.Replace(tok1, "egrid.example", "egrid.exampl", 1), keys: keys, want: sas.ErrSignature},
		{name: "signature of another token", token: tok1[:strings.Index(tok1, "&s=")] + mustSign(t, "https://x/", expiry, key1)[strings.Index(mustSign(t, "https://x/", expiry, key1), "&s="):], keys: keys, want: sas.ErrSignature},
		// The documentation's example token parses; its key is unknown.
		{name: "docs example", token: "r=https%3a%2f%2fmytopic.eventgrid.azure.net%2feventGrid%2fapi%2fevent&e=6%2f15%2f2017+6%3a20%3a15+PM&s=a4oNHpRZygINC%2fBPjdDLOrc6THPy3tDcGHw1zP4OajQ%3d", keys: keys, want: sas.ErrSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireErr(t, sas.Verify(tt.token, ordersPath, tt.keys, now), tt.want)
		})
	}
}

func TestVerifyResource(t *testing.T) {
	expiry := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		resource string
		path     string
		want     error
	}{
		{resource: "https://egrid.example/topics/orders/api/events?api-version=2018-01-01", path: ordersPath},
		{resource: "https://egrid.example/topics/orders/api/events/", path: ordersPath},
		{resource: "https://egrid.example/topics/orders", path: ordersPath},
		{resource: "https://egrid.example/topics/orders", path: "/topics/orders:publish"},
		{resource: "https://egrid.example/topics", path: ordersPath},
		{resource: "https://EGRID.example/Topics/ORDERS", path: ordersPath},
		{resource: "https://egrid.example/topics/orders", path: "/TOPICS/Orders/api/events"},
		{resource: "https://egrid.example", path: ordersPath},
		{resource: "https://egrid.example/", path: "/topics/anything/api/events"},
		{resource: "https://egrid.example:443/?api-version=2018-01-01", path: ordersPath},
		{resource: "http://another-host:9999/topics/orders/api/events", path: ordersPath}, // the host is not compared
		{resource: "egrid.example/topics/orders/api/events", path: ordersPath},            // no scheme: first segment is the host
		{resource: "/topics/orders", path: ordersPath},
		{resource: "https://egrid.example/topics/orders/../orders", path: ordersPath},
		{resource: "https://egrid.example/topics/orders", path: "/topics/orders2/api/events", want: sas.ErrResource},
		{resource: "https://egrid.example/topics/order", path: ordersPath, want: sas.ErrResource},
		{resource: "https://egrid.example/topics/billing/api/events", path: ordersPath, want: sas.ErrResource},
		{resource: "https://egrid.example/topics/orders/api/events/more", path: ordersPath, want: sas.ErrResource},
		{resource: "https://egrid.example/api/events", path: ordersPath, want: sas.ErrResource}, // Azure's classic path
		{resource: "https://egrid.example/topics/orders", path: "", want: sas.ErrResource},
	}
	for _, tt := range tests {
		t.Run(tt.resource+" "+tt.path, func(t *testing.T) {
			tok := mustSign(t, tt.resource, expiry, key1)
			requireErr(t, sas.Verify(tok, tt.path, keys, expiry.Add(-time.Hour)), tt.want)
		})
	}
}

func TestVerifyMalformed(t *testing.T) {
	now := time.Date(2017, 6, 15, 0, 0, 0, 0, time.UTC)
	r := url.QueryEscape("https://egrid.example/")
	e := url.QueryEscape("2030-01-02T03:04:05Z")
	good := handToken(r, e, key1, url.QueryEscape)
	sig := good[strings.Index(good, "&s="):]
	tests := []struct {
		name  string
		token string
		want  []string // words the message must contain
	}{
		{name: "empty", token: "", want: []string{"no s="}},
		{name: "prefix only", token: "SharedAccessSignature ", want: []string{"no s="}},
		{name: "garbage", token: "hello world", want: []string{"no s="}},
		{name: "no signature", token: "r=" + r + "&e=" + e, want: []string{"no s="}},
		{name: "no expiry", token: "r=" + r + sig, want: []string{"no e="}},
		{name: "no resource", token: "e=" + e + sig, want: []string{"no r="}},
		{name: "neither r nor e", token: sig[1:], want: []string{"no r=", "no e="}},
		{name: "empty resource", token: "r=&e=" + e + sig, want: []string{"r is empty"}},
		{name: "repeated field", token: "r=" + r + "&r=" + r + "&e=" + e + sig, want: []string{"twice"}},
		{name: "unknown field", token: "r=" + r + "&e=" + e + "&skn=policy" + sig, want: []string{"unknown field"}},
		{name: "field without =", token: "r=" + r + "&e" + sig, want: []string{"no '='", "no e="}},
		{name: "expiry not a date", token: "r=" + r + "&e=tomorrow" + sig, want: []string{"not a date"}},
		{name: "expiry 13th month", token: "r=" + r + "&e=2030-13-02T03%3A04%3A05Z" + sig, want: []string{"not a date"}},
		{name: "expiry bad escape", token: "r=" + r + "&e=%zz" + sig, want: []string{"expiry is not URL-encoded"}},
		{name: "resource bad escape", token: "r=%zz&e=" + e + sig, want: []string{"resource is not URL-encoded"}},
		{name: "resource not an URL", token: "r=" + url.QueryEscape("http://[::1") + "&e=" + e + sig, want: []string{"not an URL"}},
		{name: "signature not base64", token: "r=" + r + "&e=" + e + "&s=!!!", want: []string{"signature"}},
		{name: "signature too short", token: "r=" + r + "&e=" + e + "&s=" + url.QueryEscape(base64.StdEncoding.EncodeToString([]byte("short"))), want: []string{"signature"}},
		{name: "signature bad escape", token: "r=" + r + "&e=" + e + "&s=%zz", want: []string{"signature is not URL-encoded"}},
		{name: "every problem at once", token: "r=%zz&e=tomorrow&s=!!!", want: []string{"resource", "expiry", "signature"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sas.Verify(tt.token, ordersPath, keys, now)
			requireErr(t, err, sas.ErrMalformed)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Verify = %q; want it to mention %q", err, w)
				}
			}
		})
	}
	requireErr(t, sas.Verify(good, ordersPath, keys, now), nil) // the parts above are sound
}

func TestSignErrors(t *testing.T) {
	expiry := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct{ name, resource, key string }{
		{name: "key not base64", resource: "https://egrid.example/", key: "not base64!"},
		{name: "empty key", resource: "https://egrid.example/", key: ""},
		{name: "empty resource", resource: "", key: key1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tok, err := sas.Sign(tt.resource, expiry, tt.key); err == nil {
				t.Fatalf("Sign = %q, nil; want an error", tok)
			}
		})
	}
}

func TestKeyMatches(t *testing.T) {
	tests := []struct {
		name  string
		given string
		keys  []string
		want  bool
	}{
		{name: "key1", given: key1, keys: keys, want: true},
		{name: "key2", given: key2, keys: keys, want: true},
		{name: "neither", given: "guess", keys: keys},
		{name: "prefix of a key", given: key1[:10], keys: keys},
		{name: "key with extra", given: key1 + "x", keys: keys},
		{name: "different case", given: strings.ToLower(key1), keys: keys},
		{name: "no keys", given: key1, keys: nil},
		{name: "empty given, empty key", given: "", keys: []string{"", key1}},
		{name: "empty given", given: "", keys: keys},
		{name: "any string is a key", given: "plain-secret", keys: []string{"plain-secret"}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sas.KeyMatches(tt.given, tt.keys); got != tt.want {
				t.Fatalf("KeyMatches(%q, %q) = %v; want %v", tt.given, tt.keys, got, tt.want)
			}
		})
	}
}

func TestNewKey(t *testing.T) {
	k1, err := sas.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, err := sas.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(k1)
	if err != nil || len(raw) != 32 || len(k1) != 44 {
		t.Fatalf("NewKey = %q (%d bytes, %v); want 32 random bytes in standard base64", k1, len(raw), err)
	}
	if k1 == k2 {
		t.Fatalf("two NewKey calls gave the same key %q", k1)
	}
	if err := sas.ValidateKey(k1); err != nil {
		t.Fatalf("ValidateKey(NewKey()) = %v", err)
	}
	expiry := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tok := mustSign(t, "https://egrid.example/", expiry, k1)
	requireErr(t, sas.Verify(tok, ordersPath, []string{k2, k1}, expiry.Add(-time.Second)), nil)
}

func TestValidateKey(t *testing.T) {
	for _, tt := range []struct {
		key string
		ok  bool
	}{
		{key: key1, ok: true},
		{key: "", ok: false},
		{key: "not base64!", ok: false},
		{key: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8", ok: false}, // padding missing
	} {
		if err := sas.ValidateKey(tt.key); (err == nil) != tt.ok {
			t.Errorf("ValidateKey(%q) = %v; want ok=%v", tt.key, err, tt.ok)
		}
	}
}

// FuzzVerify checks that Verify never panics and always answers nil or one of its sentinels.
func FuzzVerify(f *testing.F) {
	expiry := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	valid, err := sas.Sign("https://egrid.example/topics/orders", expiry, key1)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		valid,
		"SharedAccessSignature " + valid,
		"r=https%3a%2f%2fmytopic.eventgrid.azure.net%2feventGrid%2fapi%2fevent&e=6%2f15%2f2017+6%3a20%3a15+PM&s=a4oNHpRZygINC%2fBPjdDLOrc6THPy3tDcGHw1zP4OajQ%3d",
		"r=%2F&e=1497550815&s=AAAA",
		"r=&e=&s=",
		"&s=",
		"",
	} {
		f.Add(seed, ordersPath)
	}
	sentinels := []error{sas.ErrMalformed, sas.ErrExpired, sas.ErrSignature, sas.ErrResource}
	f.Fuzz(func(t *testing.T, token, path string) {
		err := sas.Verify(token, path, keys, expiry.Add(-time.Hour))
		if err == nil {
			return
		}
		for _, s := range sentinels {
			if errors.Is(err, s) {
				return
			}
		}
		t.Fatalf("Verify(%q, %q) = %v; want nil or one of the sentinels", token, path, err)
	})
}
