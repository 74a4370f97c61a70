package sinks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/egridio/egrid/schemas"
	"github.com/egridio/egrid/schemas/clip"
)

// Limits of custom delivery headers (SPEC §2.4, eventgrid-behaviour.md §3.4).
const (
	// MaxHeaderMappings is the largest number of custom delivery headers one destination has.
	MaxHeaderMappings = 10
	// MaxHeaderValueBytes is the longest value of a custom delivery header, in bytes. A
	// dynamic value that resolves to more is not sent.
	MaxHeaderValueBytes = 4096
	// ReservedHeaderPrefix starts the names of Event Grid's own headers; custom names must not
	// start with it (compared ignoring case).
	ReservedHeaderPrefix = "aeg-"
)

// reservedHeaderNames are headers the HTTP client or the delivery protocol sets itself, so a
// custom value for them would be ignored or would corrupt the request.
var reservedHeaderNames = []string{"Content-Type", "Content-Length", "Host", "Transfer-Encoding", "Connection"}

// HeaderMapping is one custom delivery header, Event Grid's "delivery attribute mapping": a
// static value, or a dynamic value read from the event.
//
// Its String method never prints a static value, which may be a secret.
type HeaderMapping struct {
	// Name is the header name, an HTTP token that does not start with "aeg-".
	Name string `json:"name" yaml:"name"`
	// Value is the static value. It is used when SourceField is empty.
	Value string `json:"value,omitempty" yaml:"value,omitempty"`
	// SourceField makes the header dynamic: a dotted path into the event's JSON object as
	// published ("data.key1", "subject", "data.customer.tier"). Only string, number and
	// boolean values are sent: a string as its text, a number as written in the event, a
	// boolean as true or false. Any other value, a missing field, a value over
	// [MaxHeaderValueBytes] or one holding control characters leaves the header out of that
	// request.
	SourceField string `json:"sourceField,omitempty" yaml:"sourceField,omitempty"`
}

// Dynamic reports whether the value comes from the event.
func (m HeaderMapping) Dynamic() bool { return m.SourceField != "" }

// String describes the mapping without its static value.
func (m HeaderMapping) String() string {
	if m.Dynamic() {
		return fmt.Sprintf("%s: dynamic from %s", m.Name, m.SourceField)
	}
	return fmt.Sprintf("%s: static (%d bytes)", m.Name, len(m.Value))
}

// HeaderMappingError is one problem with a [HeaderMappings]. [HeaderMappings.Validate] joins
// one per problem. Its message never contains a static value.
type HeaderMappingError struct {
	// Index is the position of the mapping at fault, or -1 for a problem of the whole list.
	Index int
	// Name is the header name of the mapping at fault (may be empty).
	Name string
	// Reason says what is wrong and what to do.
	Reason string
}

// Error describes the problem.
func (e *HeaderMappingError) Error() string {
	if e.Index < 0 {
		return e.Reason
	}
	if e.Name == "" {
		return fmt.Sprintf("[%d]: %s", e.Index, e.Reason)
	}
	return fmt.Sprintf("[%d] %q: %s", e.Index, clip.String(e.Name), e.Reason)
}

// HeaderMappings are a destination's custom delivery headers (SPEC §2.4). The zero value has
// none. It is immutable data and safe for concurrent use.
type HeaderMappings []HeaderMapping

// Validate reports every problem at once (joined *[HeaderMappingError] values), or nil: more
// than [MaxHeaderMappings] mappings, a name that is empty, not an HTTP token, reserved (the
// "aeg-" prefix, or a header the HTTP protocol sets) or repeated (ignoring case), a static
// value that is empty, longer than [MaxHeaderValueBytes] or holds control characters, and a
// source field with an empty path segment. Messages never repeat a static value.
func (ms HeaderMappings) Validate() error {
	var errs []error
	if len(ms) > MaxHeaderMappings {
		errs = append(errs, &HeaderMappingError{Index: -1, Reason: fmt.Sprintf("%d headers; at most %d are allowed: remove %d", len(ms), MaxHeaderMappings, len(ms)-MaxHeaderMappings)})
	}
	seen := make(map[string]bool, len(ms))
	for i, m := range ms {
		bad := func(format string, args ...any) {
			errs = append(errs, &HeaderMappingError{Index: i, Name: m.Name, Reason: fmt.Sprintf(format, args...)})
		}
		switch {
		case m.Name == "":
			bad("the header name is empty: set a name such as X-Source")
		case !validToken(m.Name):
			bad("the header name is not a valid HTTP header name: use letters, digits and - only")
		case strings.HasPrefix(strings.ToLower(m.Name), ReservedHeaderPrefix):
			bad("names starting with %q are reserved for Event Grid's own headers: pick another name", ReservedHeaderPrefix)
		case isReservedHeader(m.Name):
			bad("the HTTP client sets this header itself: pick another name")
		}
		if m.Name != "" {
			key := strings.ToLower(m.Name)
			if seen[key] {
				bad("the header is mapped more than once (names ignore case): keep one mapping per header")
			}
			seen[key] = true
		}
		if m.Dynamic() {
			if m.Value != "" {
				bad("has both a static value and a source field: set one")
			}
			if err := checkSourceField(m.SourceField); err != "" {
				bad("sourceField %q %s", clip.String(m.SourceField), err)
			}
			continue
		}
		switch {
		case m.Value == "":
			bad("the static value is empty: set a value, or a sourceField for a dynamic header")
		case len(m.Value) > MaxHeaderValueBytes:
			bad("the static value is %d bytes; at most %d are allowed", len(m.Value), MaxHeaderValueBytes)
		case !validValue(m.Value):
			bad("the static value contains control characters (such as a line break), which HTTP header values cannot hold")
		}
	}
	return errors.Join(errs...)
}

// HasDynamic reports whether any header takes its value from the event.
func (ms HeaderMappings) HasDynamic() bool {
	for _, m := range ms {
		if m.Dynamic() {
			return true
		}
	}
	return false
}

// Static returns the static headers, name → value (nil when there are none).
func (ms HeaderMappings) Static() map[string]string {
	var out map[string]string
	for _, m := range ms {
		if !m.Dynamic() {
			if out == nil {
				out = make(map[string]string, len(ms))
			}
			out[m.Name] = m.Value
		}
	}
	return out
}

// Resolve returns the headers to send with a request for ev, name → value: every static
// header, and every dynamic header whose source field holds a string, number or boolean of
// at most [MaxHeaderValueBytes] without control characters (the others are left out: a value
// no header can carry must not stop the delivery, whatever the sink). A nil ev gives the static headers
// only. The caller owns the returned map.
//
// A batch carries several events but one set of headers: delivery sinks resolve dynamic
// headers from the batch's first event (egrid's decision; Event Grid documents dynamic
// values for single events only).
//
// in is the schema ev was published in. Event Grid and CloudEvents events are read as
// published. A custom-schema event is read as Event Grid sees it, as filter keys read it
// (package filter): data is the published object, so data.key1 is its member key1, and an
// envelope name alone (id, topic, subject, eventType, eventTime, dataVersion, in any case)
// is the mapped value; any other path is read from the published object (egrid's extension,
// as for filter keys).
func (ms HeaderMappings) Resolve(ev *schemas.Event, in schemas.Schema) map[string]string {
	if len(ms) == 0 {
		return nil
	}
	out := make(map[string]string, len(ms))
	for _, m := range ms {
		if !m.Dynamic() {
			out[m.Name] = m.Value
			continue
		}
		if ev == nil {
			continue
		}
		if v, ok := sourceValue(ev, in, m.SourceField); ok && len(v) <= MaxHeaderValueBytes && validValue(v) {
			out[m.Name] = v
		}
	}
	return out
}

// checkSourceField returns why a dotted path is unusable, or "".
func checkSourceField(path string) string {
	if strings.TrimSpace(path) != path {
		return "has leading or trailing spaces: remove them"
	}
	for seg := range strings.SplitSeq(path, ".") {
		if seg == "" {
			return "has an empty segment: write a dotted path such as data.key1"
		}
	}
	return ""
}

// sourceValue is the header text of the field at path in ev, published in schema in (see
// [HeaderMappings.Resolve]).
func sourceValue(ev *schemas.Event, in schemas.Schema, path string) (string, bool) {
	if in != schemas.Custom {
		return lookupScalar(ev.Raw, path)
	}
	first, rest, nested := strings.Cut(path, ".")
	if strings.EqualFold(first, "data") {
		if !nested {
			return "", false // the whole object: no header can carry it
		}
		return lookupScalar(ev.Raw, rest)
	}
	if !nested {
		for _, f := range [...]struct {
			name, value string
		}{{"id", ev.ID}, {"topic", ev.Source}, {"subject", ev.Subject}, {"eventType", ev.Type}, {"eventTime", ev.Time}, {"dataVersion", ev.DataVersion}} {
			if strings.EqualFold(first, f.name) {
				return f.value, true
			}
		}
	}
	return lookupScalar(ev.Raw, path)
}

// lookupScalar finds the value at a dotted path in a JSON object and returns it as header
// text when it is a string, number or boolean. In each object the last member named exactly
// like the segment is taken, or else the last that matches ignoring case (as filter keys do,
// and as receivers' JSON readers keep the last of a repeated name).
func lookupScalar(raw []byte, path string) (string, bool) {
	val := json.RawMessage(raw)
	for seg := range strings.SplitSeq(path, ".") {
		next, ok := member(val, seg)
		if !ok {
			return "", false
		}
		val = next
	}
	val = bytes.TrimSpace(val)
	if len(val) == 0 {
		return "", false
	}
	switch c := val[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(val, &s) != nil {
			return "", false
		}
		return s, true
	case c == 't' || c == 'f':
		return string(val), string(val) == "true" || string(val) == "false"
	case c == '-' || (c >= '0' && c <= '9'):
		return string(val), json.Valid(val)
	}
	return "", false // null, object or array
}

// member returns the raw value of the member named seg in a JSON object.
func member(obj json.RawMessage, seg string) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var exact, folded json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		if key == seg {
			exact = v
		} else if strings.EqualFold(key, seg) {
			folded = v
		}
	}
	if _, err := dec.Token(); err != nil && !errors.Is(err, io.EOF) {
		return nil, false
	}
	if exact != nil {
		return exact, true
	}
	return folded, folded != nil
}

// validToken reports whether name is an HTTP token (RFC 9110 §5.1).
func validToken(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return name != ""
}

// validValue reports whether v can be an HTTP header value: no control characters other
// than horizontal tab (RFC 9110 §5.5).
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func isReservedHeader(name string) bool {
	for _, r := range reservedHeaderNames {
		if strings.EqualFold(name, r) {
			return true
		}
	}
	return false
}
