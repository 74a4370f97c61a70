package schemas

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// CloudEvents 1.0 types source as a URI-reference (RFC 3986 §4.1), and the CloudEvents SDKs
// refuse an event whose source is not one: the Go SDK parses it with net/url, the Java SDK
// builds a java.net.URI, the JavaScript SDK checks the JSON Schema format uri-reference. Event
// Grid does not document a check of its own, so egrid checks RFC 3986's grammar itself
// (net/url.Parse takes spaces, for one, which java.net.URI does not): an event it accepts is
// one that every receiver reads. IRIs (non-ASCII characters) are refused too: RFC 3986 and the
// uri-reference format are ASCII only, and a publisher sends the UTF-8 bytes of such a
// character percent-encoded (%C3%A9 for é).
//
// dataschema is typed an absolute URI, but Azure itself delivers "#"+dataVersion there when it
// converts an Event Grid event to a CloudEvent (as egrid does, see [EncodeBatch]), so it is
// held to the same URI-reference grammar: an event egrid or Azure delivers can be published
// to a CloudEvents topic again.

// checkURIRef returns why a decode refuses v as a source or dataschema, or "": a publish
// ([uriRefProblem]) when v is not a URI-reference. stored is set for an event egrid accepted
// before (one in a dead-letter record, decoded for replay): an earlier release took any
// non-empty string there, and so does its replay.
func checkURIRef(v string, stored bool) string {
	if stored {
		return ""
	}
	return uriRefProblem(v)
}

// uriRefProblem returns why v is not an RFC 3986 URI-reference, or "".
func uriRefProblem(v string) string {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '%':
			if i+2 >= len(v) || unhex(v[i+1]) < 0 || unhex(v[i+2]) < 0 {
				return "has a '%' at byte " + strconv.Itoa(i) + " that is not followed by two hex digits: write a '%' as %25"
			}
		case c >= 0x80:
			return "has a non-ASCII character at byte " + strconv.Itoa(i) + ": percent-encode its UTF-8 bytes (%C3%A9 for é)"
		case !uriChar(c):
			return "has " + charName(c) + " at byte " + strconv.Itoa(i) + ", which a URI cannot hold: percent-encode it (" + pctEncode(c) + ")"
		}
	}
	rest, fragment, hasFragment := strings.Cut(v, "#")
	if hasFragment && strings.ContainsAny(fragment, "#[]") {
		return "has a fragment (after '#') holding '#', '[' or ']': percent-encode them"
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	if hasQuery && strings.ContainsAny(query, "[]") {
		return "has a query (after '?') holding '[' or ']': percent-encode them"
	}
	// A ':' before the first '/' ends a scheme; a relative reference cannot have one there.
	if colon := strings.IndexByte(rest, ':'); colon >= 0 && !strings.Contains(rest[:colon], "/") {
		if !isScheme(rest[:colon]) {
			return "starts with " + strconv.Quote(rest[:colon+1]) + ", which is not a scheme (a letter, then letters, digits, '+', '-' or '.'): write a relative reference's first ':' as %3A, or start it with \"./\""
		}
		rest = rest[colon+1:]
	}
	path := rest
	if after, ok := strings.CutPrefix(rest, "//"); ok {
		authority, p, _ := strings.Cut(after, "/")
		if reason := authorityProblem(authority); reason != "" {
			return reason
		}
		path = p
	}
	if strings.ContainsAny(path, "[]") {
		return "has '[' or ']' in its path: they are only allowed around an IPv6 address in the host; percent-encode them (%5B, %5D)"
	}
	return ""
}

// authorityProblem returns why a URI's authority (between "//" and the path) is not one, or "".
func authorityProblem(a string) string {
	if userinfo, host, ok := strings.Cut(a, "@"); ok {
		if strings.ContainsAny(userinfo, "[]") {
			return "has '[' or ']' in its user information: percent-encode them"
		}
		a = host
	}
	if strings.IndexByte(a, '@') >= 0 {
		return "has a second '@' in its authority: percent-encode it (%40)"
	}
	host, port := a, ""
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "has a host that opens '[' without closing it: write an IPv6 address as [2001:db8::1]"
		}
		host, port = a[:end+1], a[end+1:]
		if port != "" && port[0] != ':' {
			return "has " + strconv.Quote(port) + " after its IPv6 host: only a port (\":8080\") may follow it"
		}
		if !ipLiteral(host[1 : len(host)-1]) {
			return "has the host " + strconv.Quote(host) + ", which is not an IPv6 address in brackets (such as [2001:db8::1])"
		}
	} else if i := strings.IndexByte(a, ':'); i >= 0 {
		host, port = a[:i], a[i:]
	}
	if strings.ContainsAny(host, "[]") && !strings.HasPrefix(host, "[") {
		return "has '[' or ']' in its host: they are only allowed around an IPv6 address"
	}
	if port != "" {
		for i := 1; i < len(port); i++ {
			if port[i] < '0' || port[i] > '9' {
				return "has the port " + strconv.Quote(port[1:]) + ", which is not a number"
			}
		}
	}
	return ""
}

// ipLiteral reports whether v is an IPv6 address (without a zone) or an IPvFuture, the two
// forms RFC 3986 allows in brackets.
func ipLiteral(v string) bool {
	if len(v) > 1 && (v[0] == 'v' || v[0] == 'V') {
		ver, rest, ok := strings.Cut(v[1:], ".")
		if !ok || ver == "" || rest == "" {
			return false
		}
		for i := 0; i < len(ver); i++ {
			if unhex(ver[i]) < 0 {
				return false
			}
		}
		return !strings.ContainsAny(rest, "%/?#@[]")
	}
	addr, err := netip.ParseAddr(v)
	return err == nil && addr.Is6() && addr.Zone() == ""
}

// isScheme reports whether s is an RFC 3986 scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
func isScheme(s string) bool {
	if s == "" || !isAlpha(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlpha(c) && (c < '0' || c > '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isAlpha(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// uriChar reports whether the ASCII byte c may appear in a URI as it is: unreserved, gen-delims
// and sub-delims ('%' is checked by the caller).
func uriChar(c byte) bool {
	if isAlpha(c) || c >= '0' && c <= '9' {
		return true
	}
	return strings.IndexByte("-._~:/?#[]@!$&'()*+,;=", c) >= 0
}

// charName names an ASCII byte in a message: a space or a control character by its code,
// another one quoted.
func charName(c byte) string {
	switch {
	case c == ' ':
		return "a space"
	case c < 0x20 || c == 0x7f:
		return fmt.Sprintf("the control character U+%04X", c)
	}
	return "'" + string(rune(c)) + "'"
}

func pctEncode(c byte) string {
	const hex = "0123456789ABCDEF"
	return string([]byte{'%', hex[c>>4], hex[c&0xf]})
}
