package schemas

import "strings"

// W3C Trace Context (https://www.w3.org/TR/trace-context/, §3.2 traceparent, §3.3
// tracestate): a CloudEvent's distributed-tracing extension (traceparent, tracestate) is
// forwarded in the delivery's headers of those names (SPEC §2.4) only when its traceparent is
// one, so a receiver's tracer never gets a header it must discard or, worse, misreads; the
// event itself, body and extensions, is delivered as published either way.

// MaxTracestateBytes bounds the tracestate header a delivery carries. W3C Trace Context asks
// a propagator to pass on at least 512 characters and lets it truncate a longer one, list
// members over 128 characters first, then from the end (§3.3.1.5).
const MaxTracestateBytes = 512

// maxTracestateMembers is W3C Trace Context's limit on a tracestate's list members; a longer
// list is discarded whole (§3.3.1.1).
const maxTracestateMembers = 32

// ValidTraceparent reports whether v is a W3C Trace Context traceparent (§3.2.2): version,
// trace-id, parent-id and trace-flags, in lower-case hex, dash-separated
// (00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01), neither id all zeros, version not
// ff. A version-00 traceparent is exactly 55 characters; a later version may add fields after
// a dash (§3.2.4, parsed as its future versions ask).
func ValidTraceparent(v string) bool {
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	version, traceID, parentID, flags := v[0:2], v[3:35], v[36:52], v[53:55]
	if !lowerHex(version) || version == "ff" || !lowerHex(traceID) || !lowerHex(parentID) || !lowerHex(flags) {
		return false
	}
	if strings.Trim(traceID, "0") == "" || strings.Trim(parentID, "0") == "" {
		return false
	}
	if version == "00" {
		return len(v) == 55
	}
	return len(v) == 55 || v[55] == '-'
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Tracestate returns the tracestate header to forward for the tracestate value v: its list
// members (key=value, §3.3.1.3) joined by "," without the optional whitespace around them,
// at most [MaxTracestateBytes] (members over 128 bytes dropped first, then members from the
// end), or "" when v is empty or is no tracestate: a list member that does not parse, a key
// given twice or more than 32 members, each of which W3C Trace Context has a propagator
// discard the whole header for.
func Tracestate(v string) string {
	var members []string
	keys := make(map[string]bool)
	for m := range strings.SplitSeq(v, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue // empty list members are allowed and carry nothing
		}
		key, value, ok := strings.Cut(m, "=")
		if !ok || !tracestateKey(key) || !tracestateValue(value) || keys[key] {
			return ""
		}
		keys[key] = true
		members = append(members, m)
		if len(members) > maxTracestateMembers {
			return ""
		}
	}
	size := func() int {
		n := max(len(members)-1, 0)
		for _, m := range members {
			n += len(m)
		}
		return n
	}
	if size() > MaxTracestateBytes {
		kept := members[:0]
		for _, m := range members {
			if len(m) <= 128 {
				kept = append(kept, m)
			}
		}
		members = kept
		for size() > MaxTracestateBytes {
			members = members[:len(members)-1]
		}
	}
	return strings.Join(members, ",")
}

// tracestateKey reports whether k is a tracestate key (§3.3.1.3.1): a simple key of lower-case
// letters, digits and _-*/ starting with a letter, at most 256 characters, or a multi-tenant
// key tenant@system (a tenant of at most 241 starting with a letter or digit, a system of at
// most 14 starting with a letter).
func tracestateKey(k string) bool {
	keyChar := func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*' || c == '/'
	}
	part := func(s string, maxLen int, digitFirst bool) bool {
		if s == "" || len(s) > maxLen || !(s[0] >= 'a' && s[0] <= 'z' || digitFirst && s[0] >= '0' && s[0] <= '9') {
			return false
		}
		for i := 1; i < len(s); i++ {
			if !keyChar(s[i]) {
				return false
			}
		}
		return true
	}
	if tenant, system, ok := strings.Cut(k, "@"); ok {
		return part(tenant, 241, true) && part(system, 14, false)
	}
	return part(k, 256, false)
}

// tracestateValue reports whether v is a tracestate value (§3.3.1.3.2): 1 to 256 printable
// ASCII characters other than ',' and '=', the last not a space.
func tracestateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// tracestateOf returns the tracestate extension attribute of the CloudEvent whose structured
// object is raw, when it is a string, or "".
func tracestateOf(raw []byte) string {
	j := NewJSONScanner(raw, true)
	j.SkipSpace()
	if j.Peek() != '{' || j.ObjectStart() {
		return ""
	}
	for {
		key, err := j.Key()
		if err != nil {
			return ""
		}
		if string(key) == "tracestate" && j.Peek() == '"' {
			tok, decode, err := j.String()
			if err != nil {
				return ""
			}
			return UnquoteJSON(tok, decode)
		}
		if _, err := j.Skip(1); err != nil {
			return ""
		}
		if more, err := j.ObjectNext(); err != nil || !more {
			return ""
		}
	}
}
