package schemas

import (
	"encoding/base64"
	"mime"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/egridio/egrid/schemas/clip"
)

// specVersionCE is the only CloudEvents version egrid accepts.
const specVersionCE = "1.0"

// maxExtensionName is Event Grid's bound on extension attribute names
// (eventgrid-behaviour.md §1.3).
const maxExtensionName = 20

// The context attributes and data members of a structured-mode CloudEvent.
const (
	ceID = iota
	ceSource
	ceSpecVersion
	ceType
	ceTime
	ceSubject
	ceDataContentType
	ceDataSchema
	ceData
	ceDataBase64
	ceTraceparent
	ceMembers
)

// memberStrings has room for every member.
var _ [maxMembers - ceMembers]struct{}

var ceNames = [ceMembers]string{"id", "source", "specversion", "type", "time", "subject", "datacontenttype", "dataschema", "data", "data_base64", "traceparent"}

func ceIndex(key []byte) int {
	switch string(key) {
	case "id":
		return ceID
	case "source":
		return ceSource
	case "specversion":
		return ceSpecVersion
	case "type":
		return ceType
	case "time":
		return ceTime
	case "subject":
		return ceSubject
	case "datacontenttype":
		return ceDataContentType
	case "dataschema":
		return ceDataSchema
	case "data":
		return ceData
	case "data_base64":
		return ceDataBase64
	case "traceparent":
		return ceTraceparent
	}
	return -1
}

// extensionNameProblem returns why name cannot be a CloudEvents extension attribute name, or "".
func extensionNameProblem(name string) string {
	if name == "" || len(name) > maxExtensionName {
		return "is not a valid attribute name: extension attribute names are 1 to 20 lower-case letters and digits (a-z, 0-9)"
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return "is not a valid attribute name: extension attribute names are 1 to 20 lower-case letters and digits (a-z, 0-9)"
		}
	}
	return ""
}

// DecodeCloudEvents decodes a structured-mode CloudEvents 1.0 publish (SPEC §4,
// eventgrid-behaviour.md §1.3, §1.6, §2.2): a JSON array of events (a batch) or a single event
// object, told apart by the first non-space byte. A single event is index 0 in errors.
//
// Each event must have the string attributes id, source (a URI-reference, RFC 3986 §4.1) and
// type (non-empty) and specversion "1.0". Optional: time (an RFC 3339 date-time, checked
// against its grammar; a lower-case "t" or "z" is delivered upper-case), subject,
// datacontenttype and dataschema (non-empty strings when present, as CloudEvents requires;
// dataschema a URI-reference too, as Azure's own "#"+dataVersion is), data (any JSON value) or
// data_base64 (a base64 string), not both, and extension attributes whose names are 1 to 20
// lower-case letters and digits and whose values are strings, numbers or booleans. Attributes
// sent as JSON null count as absent, and are left out of Event.Raw (so neither stored nor
// delivered); an attribute sent twice is an error, and so is a string
// attribute (extensions included) holding a lone UTF-16 surrogate escape, as in
// [DecodeEventGrid].
//
// Event.Raw is the object as published, compacted (and its time upper-cased, when it was
// not). Event.Traceparent is the traceparent
// extension when it is a string. Errors are those of [DecodeEventGrid].
func DecodeCloudEvents(body []byte, lim Limits) ([]*Event, error) {
	return decodeCloudEvents(body, lim, false)
}

// decodeCloudEvents is [DecodeCloudEvents]; stored relaxes its checks for events accepted
// before, see [checkEventTime] and [checkURIRef].
func decodeCloudEvents(body []byte, lim Limits, stored bool) ([]*Event, error) {
	if err := checkRequestSize(len(body), lim); err != nil {
		return nil, err
	}
	s := &scanner{buf: body}
	s.skipWS()
	var p problems
	if s.peek() == '{' {
		var ev *Event
		err := scanOne(s, lim, func(i int) error {
			var err error
			ev, err = decodeCloudEventObject(s, i, &p, false, stored)
			return err
		})
		if err != nil {
			return nil, err
		}
		if err := p.err(); err != nil {
			return nil, err
		}
		return []*Event{ev}, nil
	}
	if err := openArray(s, "a CloudEvents publish", "a CloudEvent object or a JSON array of them"); err != nil {
		return nil, err
	}
	var events []*Event
	err := scanEvents(s, lim, &p, func(i int) error {
		ev, err := decodeCloudEventObject(s, i, &p, false, stored)
		if ev != nil && len(p.errs) == 0 {
			events = append(events, ev)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return events, nil
}

// nameSet holds the extension attribute names of one event, to refuse a name sent twice. A
// list is enough for the few names of a usual event; past maxListedNames it becomes a map,
// or a 1 MB event of 100 000 names would cost 5·10⁹ comparisons (seconds of CPU) to check.
type nameSet struct {
	list [][]byte
	set  map[string]struct{}
}

// maxListedNames is how many names a nameSet compares one by one before it uses a map.
const maxListedNames = 32

// add adds name (which must not change afterwards) and reports whether it was there already.
func (s *nameSet) add(name []byte) (seen bool) {
	if s.set != nil {
		if _, seen = s.set[string(name)]; !seen {
			s.set[string(name)] = struct{}{}
		}
		return seen
	}
	for _, e := range s.list {
		if string(e) == string(name) {
			return true
		}
	}
	s.list = append(s.list, name)
	if len(s.list) > maxListedNames {
		s.set = make(map[string]struct{}, 4*len(s.list))
		for _, e := range s.list {
			s.set[string(e)] = struct{}{}
		}
		s.list = nil
	}
	return false
}

// decodeCloudEventObject scans one event object, reports its problems to p and returns the
// event when it has none. binary words the messages for attributes that came from ce-*
// headers; stored relaxes the checks for an event accepted before ([checkEventTime],
// [checkURIRef]). The error is a scanner error.
func decodeCloudEventObject(s *scanner, i int, p *problems, binary, stored bool) (*Event, error) {
	start := s.pos
	s.ws = false
	var m [ceMembers]member
	var extensions nameSet // names seen, to refuse duplicates
	nullAttribute := false // an attribute sent as null, to leave out of Event.Raw
	bad := false
	fail := func(field, reason string) {
		p.add(i, field, reason)
		bad = true
	}
	empty, _ := s.objectStart()
	for !empty {
		key, _, err := s.objectKey()
		if err != nil {
			return nil, err
		}
		if k := ceIndex(key); k >= 0 {
			if m[k].kind != kindNone {
				fail(ceNames[k], "appears more than once: send each attribute once")
			}
			err = s.scanMember(&m[k])
			if k != ceData && m[k].kind == kindNull {
				nullAttribute = true
			}
			if k == ceTraceparent && (m[k].kind == kindObject || m[k].kind == kindArray) {
				fail("traceparent", "is an extension attribute and must be a string, number or boolean, got "+m[k].kind.String())
			}
		} else {
			name := string(key)
			if reason := extensionNameProblem(name); reason != "" {
				fail(name, reason)
			} else if extensions.add(key) {
				fail(name, "appears more than once: send each attribute once")
			}
			var kind jsonKind
			valStart := s.pos
			if kind, err = s.skipValue(1); err == nil && kind == kindNull {
				nullAttribute = true
			} else if err == nil && (kind == kindObject || kind == kindArray) {
				fail(name, "is an extension attribute and must be a string, number or boolean, got "+kind.String())
			} else if err == nil && kind == kindString {
				if esc := loneSurrogate(s.buf[valStart:s.pos]); esc != "" {
					fail(name, loneSurrogateReason(esc))
				}
			}
		}
		if err != nil {
			return nil, err
		}
		more, err := s.objectNext()
		if err != nil {
			return nil, err
		}
		empty = !more
	}
	raw := s.buf[start:s.pos]
	ws := s.ws

	var vals memberStrings
	vals.unquoteMembers(m[:], func(k int) bool { return k == ceData || k == ceDataBase64 })
	// surrogate marks the members refused for a lone surrogate, whose other checks are moot.
	var surrogate [ceMembers]bool

	str := func(k int, required bool) string {
		switch {
		case !m[k].present():
			if required {
				reason := "is required"
				if binary {
					reason += ": send it as the ce-" + ceNames[k] + " header"
				}
				fail(ceNames[k], reason)
			}
			return ""
		case m[k].kind != kindString:
			fail(ceNames[k], "must be a string, got "+m[k].kind.String())
			return ""
		}
		if esc := loneSurrogateIn(&m[k]); esc != "" {
			fail(ceNames[k], loneSurrogateReason(esc))
			surrogate[k] = true
		}
		v := vals.get(k)
		if v == "" {
			fail(ceNames[k], "must not be empty")
		}
		return v
	}
	ev := &Event{}
	ev.ID = str(ceID, true)
	if checkHeaderBound(p, i, "id", ev.ID, MaxIDBytes) {
		bad = true
	}
	ev.Source = str(ceSource, true)
	if ev.Source != "" && !surrogate[ceSource] && !p.has(i, "source") {
		if reason := checkURIRef(ev.Source, stored); reason != "" {
			fail("source", "is "+clip.Quote(ev.Source)+", not a URI-reference (RFC 3986) as CloudEvents requires: it "+reason+headerNote(binary, "source", ev.Source))
		}
	}
	ev.SpecVersion = str(ceSpecVersion, true)
	if ev.SpecVersion != "" && !surrogate[ceSpecVersion] && ev.SpecVersion != specVersionCE {
		fail("specversion", "is "+clip.Quote(ev.SpecVersion)+", but only CloudEvents \"1.0\" is supported")
	}
	ev.Type = str(ceType, true)
	ev.Time = str(ceTime, false)
	timeChanged := false // ev.Time is delivered in another form than published
	if ev.Time != "" && !surrogate[ceTime] {
		if t, reason := checkEventTime(ev.Time, false, stored); reason != "" {
			fail("time", reason)
		} else if t != ev.Time {
			ev.Time, timeChanged = t, true
		}
	}
	ev.Subject = str(ceSubject, false)
	str(ceDataContentType, false)
	if v := str(ceDataSchema, false); v != "" && !surrogate[ceDataSchema] && !p.has(i, "dataschema") {
		if reason := checkURIRef(v, stored); reason != "" {
			fail("dataschema", "is "+clip.Quote(v)+", not a URI-reference (RFC 3986): it "+reason+headerNote(binary, "dataschema", v))
		}
	}
	if m[ceData].present() && m[ceDataBase64].present() {
		fail("data_base64", "cannot be sent together with data: send binary payloads as data_base64 and JSON or text as data")
	}
	if m[ceDataBase64].present() {
		if m[ceDataBase64].kind != kindString {
			fail("data_base64", "must be a base64 string, got "+m[ceDataBase64].kind.String())
		} else if _, err := base64.StdEncoding.DecodeString(unquote(m[ceDataBase64].tok, m[ceDataBase64].esc)); err != nil {
			fail("data_base64", "is not valid base64 (standard alphabet, with padding): "+err.Error())
		}
	}
	if m[ceTraceparent].kind == kindString {
		ev.Traceparent = vals.get(ceTraceparent)
		if esc := loneSurrogateIn(&m[ceTraceparent]); esc != "" {
			fail("traceparent", loneSurrogateReason(esc))
		}
		if checkHeaderBound(p, i, "traceparent", ev.Traceparent, MaxHeaderAttributeBytes) {
			bad = true
		}
	}
	if bad || len(p.errs) > 0 {
		return nil, nil
	}
	if timeChanged {
		// The time's token lies in raw: its offset there is how much further it starts.
		off := cap(raw) - cap(m[ceTime].tok)
		fixed := make([]byte, 0, len(raw)+len(ev.Time))
		fixed = append(fixed, raw[:off]...)
		fixed = appendString(fixed, ev.Time)
		raw = append(fixed, raw[off+len(m[ceTime].tok):]...)
	}
	switch {
	case ws:
		ev.Raw = appendCompact(make([]byte, 0, len(raw)), raw)
	case binary || timeChanged:
		ev.Raw = raw // DecodeCloudEventBinary built it for this event, or the time fix did
	default:
		ev.Raw = append(make([]byte, 0, len(raw)), raw...)
	}
	if nullAttribute {
		ev.Raw = dropNullAttributes(ev.Raw)
	}
	return ev, nil
}

// dropNullAttributes returns the compact, valid event object obj without its attributes
// (context attributes and extensions) whose value is JSON null: the CloudEvents JSON format
// treats such an attribute as absent, so it is neither stored nor delivered. A null data member is kept: it is the event's data, as sent.
func dropNullAttributes(obj []byte) []byte {
	s := &scanner{buf: obj}
	out := make([]byte, 0, len(obj))
	out = append(out, '{')
	empty, _ := s.objectStart()
	first := true
	for !empty {
		start := s.pos
		key, _, err := s.objectKey()
		if err != nil {
			return obj
		}
		kind, err := s.skipValue(1)
		if err != nil {
			return obj
		}
		if kind != kindNull || string(key) == "data" {
			if !first {
				out = append(out, ',')
			}
			out = append(out, obj[start:s.pos]...)
			first = false
		}
		more, err := s.objectNext()
		if err != nil {
			return obj
		}
		empty = !more
	}
	return append(out, '}')
}

// headerNote is what a problem with the URI attribute attr adds in binary mode when its value
// v holds a '%' or a byte a URI cannot: the value checked is the ce-* header's once
// percent-decoded, so a URI's "%20" is sent as "%2520".
func headerNote(binary bool, attr, v string) string {
	if !binary || strings.IndexFunc(v, func(r rune) bool { return r == '%' || r >= 0x80 || !uriChar(byte(r)) }) < 0 {
		return ""
	}
	return " (the ce-" + attr + " header is percent-decoded before this check: send the URI's '%' as %25, so %20 as %2520)"
}

// DecodeCloudEventBinary builds one event from a binary-mode HTTP publish (SPEC §1.1,
// eventgrid-behaviour.md §1.3). attrs are the ce-* headers keyed by attribute name in lower
// case without the "ce-" prefix; their values are percent-decoded as the CloudEvents HTTP
// binding asks (a '%' not followed by two hex digits is kept as it is), and must then be
// UTF-8. contentType is the request's Content-Type, the media type of data. A caller that
// takes the distributed-tracing extension from the HTTP traceparent header passes it as
// attrs["traceparent"].
//
// ce-datacontenttype must not be sent: the Content-Type header takes its place and becomes the
// datacontenttype attribute. data becomes the "data" member as JSON for JSON media types
// (application/json, text/json, */*+json; it must then be valid JSON), a JSON string for text/*
// media types in UTF-8, and "data_base64" otherwise (also for text in another charset or
// that is not valid UTF-8, and for text more than twice as long as a JSON string: control
// characters are escaped in six bytes each). An empty body gives an event without data. So
// the data takes at most twice the room in the event that it takes in the request.
//
// The event is then validated like a structured one ([DecodeCloudEvents]) and Event.Raw is its
// structured form: specversion, id, source, type, time, subject, dataschema, the extensions in
// name order, datacontenttype and the data. The limits: a *[TooLargeError] with Index -1 when
// data is over lim.MaxRequestBytes, with Index 0 when data and attribute values together are
// over lim.MaxEventBytes.
func DecodeCloudEventBinary(attrs map[string]string, contentType string, data []byte, lim Limits) (*Event, error) {
	if err := checkRequestSize(len(data), lim); err != nil {
		return nil, err
	}
	size := len(data)
	for _, v := range attrs {
		size += len(v)
	}
	if err := checkEventSize(0, size, lim); err != nil {
		return nil, err
	}
	// Every problem is reported at once: attributes that cannot be written into the
	// structured form are reported here and left out of it, the rest is reported when the
	// structured form is validated.
	var p problems
	// In name order, so the problems listed when there are more than a decode lists are
	// the first by name, not those map order happened to give.
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	slices.Sort(names)
	all := names
	names = names[:0] // the attributes written into the structured form, filtered in place
	for _, name := range all {
		switch name {
		case "datacontenttype":
			p.add(0, name, "must not be sent as a ce-datacontenttype header in binary mode: the Content-Type header carries the data's media type")
		case "data", "data_base64":
			p.add(0, name, "is not a context attribute: in binary mode the data is the request body")
		default:
			if reason := extensionNameProblem(name); reason != "" {
				p.add(0, name, reason)
			} else {
				names = append(names, name)
			}
			// A structured event is UTF-8 JSON: bytes that are not UTF-8 would be replaced
			// with U+FFFD, and the event would not carry the value that was sent.
			if !utf8.ValidString(percentDecode(attrs[name])) {
				p.add(0, name, "is not UTF-8 once percent-decoded: send the ce-"+name+" header as UTF-8, percent-encoding the bytes of each non-ASCII character (%C3%A9 for é)")
			}
		}
	}
	var dataKey string
	var dataTok []byte
	if len(data) > 0 {
		var problem string
		dataKey, dataTok, problem = binaryData(contentType, data)
		if problem != "" {
			p.add(0, "data", problem)
		}
	}

	raw := make([]byte, 0, size+len(contentType)+len(names)*8+64)
	raw = append(raw, '{')
	member := func(name, value string) {
		if len(raw) > 1 {
			raw = append(raw, ',')
		}
		raw = appendString(raw, name)
		raw = append(raw, ':')
		raw = appendString(raw, value)
	}
	// Context attributes first, in a fixed order, then extensions by name.
	fixed := []string{"specversion", "id", "source", "type", "time", "subject", "dataschema"}
	for _, name := range fixed {
		if v, ok := attrs[name]; ok {
			member(name, percentDecode(v))
		}
	}
	for _, name := range names {
		if !slices.Contains(fixed, name) { // extensions
			member(name, percentDecode(attrs[name]))
		}
	}
	if contentType != "" {
		member("datacontenttype", contentType)
	}
	if dataKey != "" {
		raw = append(raw, ',')
		raw = appendString(raw, dataKey)
		raw = append(raw, ':')
		raw = append(raw, dataTok...)
	}
	raw = append(raw, '}')

	s := &scanner{buf: raw}
	ev, err := decodeCloudEventObject(s, 0, &p, true, false)
	if err != nil {
		// raw is built from valid parts; this is a bug, reported rather than hidden.
		return nil, syntaxProblem(err)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return ev, nil
}

// binaryData decides how a binary-mode body is carried in the structured event: the member
// name ("data" or "data_base64") and its JSON token, or a problem.
func binaryData(contentType string, data []byte) (key string, tok []byte, problem string) {
	mediaType, params, err := mime.ParseMediaType(contentType)
	if contentType != "" && err != nil {
		return "", nil, "cannot be interpreted: the Content-Type " + clip.Quote(contentType) + " is not a valid media type (" + err.Error() + ")"
	}
	switch {
	case mediaType == "application/json" || mediaType == "text/json" || strings.HasSuffix(mediaType, "+json"):
		s := &scanner{buf: data}
		s.skipWS()
		if _, err := s.skipValue(0); err != nil {
			return "", nil, "is not valid JSON, but the Content-Type " + clip.Quote(contentType) + " says it is: " + err.Error()
		}
		if err := s.end(); err != nil {
			return "", nil, "is not valid JSON, but the Content-Type " + clip.Quote(contentType) + " says it is: " + err.Error()
		}
		return "data", appendCompact(nil, data), ""
	case strings.HasPrefix(mediaType, "text/") && isUTF8Charset(params["charset"]) && utf8.Valid(data):
		// As a JSON string, text full of control characters grows up to sixfold (\u0001):
		// text that would more than double is carried as data_base64 (the same bytes), so an
		// event's data is never more than twice its body, which its 1 MB limit counts.
		// Quotes and backslashes take two bytes each, so text such as quoted CSV fields
		// stays a string, as a receiver of a text/* event expects.
		if str := appendString(nil, string(data)); len(str) <= 2*len(data)+2 {
			return "data", str, ""
		}
	}
	tok = make([]byte, 0, base64.StdEncoding.EncodedLen(len(data))+2)
	tok = append(tok, '"')
	tok = base64.StdEncoding.AppendEncode(tok, data)
	return "data_base64", append(tok, '"'), ""
}

func isUTF8Charset(charset string) bool {
	switch strings.ToLower(charset) {
	case "", "utf-8", "utf8", "us-ascii", "ascii":
		return true
	}
	return false
}

// percentDecode decodes %XX sequences of a ce-* header value (CloudEvents HTTP binding
// §3.1.3.2); a '%' not followed by two hex digits stays as it is.
func percentDecode(v string) string {
	s, _ := decodePercent(v)
	return s
}

// decodePercent decodes the %XX sequences of v; a '%' not followed by two hex digits stays as
// it is, and all reports whether every '%' of v began one.
func decodePercent(v string) (s string, all bool) {
	i := strings.IndexByte(v, '%')
	if i < 0 {
		return v, true
	}
	all = true
	b := make([]byte, 0, len(v))
	b = append(b, v[:i]...)
	for ; i < len(v); i++ {
		if v[i] == '%' {
			if i+2 < len(v) && unhex(v[i+1]) >= 0 && unhex(v[i+2]) >= 0 {
				b = append(b, byte(unhex(v[i+1])<<4|unhex(v[i+2])))
				i += 2
				continue
			}
			all = false
		}
		b = append(b, v[i])
	}
	return string(b), all
}
